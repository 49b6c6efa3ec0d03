"""What `gldv2` and `inaturalist` share: TFF caches each as a directory of
TFRecord files, one per training client (`<cache>/train/<client id>`), and
one file of test examples (`<cache>/test.tfRecord`), each record a
`tf.train.Example` of a JPEG (`image/encoded_jpeg`) and its class.

Elements are `OrderedDict([('image/decoded', uint8 [h, w, 3]),
('class', int64 [1])])`.
"""

import collections
import os

import tensorflow as tf

from canonical.simulation.datasets import cache
from canonical.simulation.datasets import client_data as client_data_lib
from canonical.simulation.datasets import file_per_user

IMAGE_BYTES = 'image/encoded_jpeg'
IMAGE_DECODED = 'image/decoded'
CLASS = 'class'
TRAIN_SUB_DIR = 'train'
TEST_FILE_NAME = 'test.tfRecord'


def _decode(serialized):
  example = tf.io.parse_single_example(serialized, {
      IMAGE_BYTES: tf.io.FixedLenFeature([], tf.string, default_value=''),
      CLASS: tf.io.FixedLenFeature([], tf.int64, default_value=-1)})
  return collections.OrderedDict([
      (IMAGE_DECODED, tf.io.decode_jpeg(example[IMAGE_BYTES])),
      (CLASS, tf.reshape(example[CLASS], [1]))])


def read_tfrecords(path) -> tf.data.Dataset:
  """The decoded examples of one TFRecord file (traceable in `path`)."""
  return tf.data.TFRecordDataset([path]).map(_decode)


def load_from_cache(what: str, directory: str, how: str) -> tuple[
    client_data_lib.ClientData, tf.data.Dataset]:
  """`(train clients, test examples)` cached under `directory`;
  DatasetNotCachedError naming the missing part and `how` to make it."""
  train_dir = os.path.join(directory, TRAIN_SUB_DIR)
  test_file = os.path.join(directory, TEST_FILE_NAME)
  if not os.path.isdir(train_dir) or not os.listdir(train_dir):
    cache.refuse(what, f'the training clients\' directory {train_dir}', how)
  if not os.path.isfile(test_file):
    cache.refuse(what, f'the test file {test_file}', how)
  train = file_per_user.FilePerUserClientData.create_from_dir(
      train_dir, read_tfrecords)
  return train, read_tfrecords(test_file)
