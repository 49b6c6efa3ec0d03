"""TFF's `tff.simulation.datasets.cifar100`: CIFAR-100 split over 500
clients by a Pachinko allocation of its labels, from TFF's cached SQLite
file, and TFF's small synthetic version of it.

Elements are `OrderedDict(coarse_label=int64 [], image=uint8 [32, 32, 3],
label=int64 [])`.
"""

import collections

import numpy as np
import tensorflow as tf

from canonical.simulation.datasets import cache
from canonical.simulation.datasets import client_data as client_data_lib
from canonical.simulation.datasets import sql_client_data
from canonical.simulation.datasets import tensor_slices
from canonical.simulation.datasets import tff_synthetic_data


def _parse(dataset):

  def parse(serialized):
    parsed = tf.io.parse_example(serialized, {
        'coarse_label': tf.io.FixedLenFeature([], tf.int64),
        'image': tf.io.FixedLenFeature([32, 32, 3], tf.int64),
        'label': tf.io.FixedLenFeature([], tf.int64)})
    return collections.OrderedDict(
        coarse_label=parsed['coarse_label'],
        image=tf.cast(parsed['image'], tf.uint8), label=parsed['label'])

  return dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE)


def load_data(cache_dir=None) -> tuple[client_data_lib.ClientData,
                                       client_data_lib.ClientData]:
  """`(train, test)` client data of CIFAR-100 (500 and 100 clients), read
  from TFF's cache (`<cache_dir or ~/.tff>/cifar100.sqlite`); nothing is
  downloaded here."""
  path = cache.sqlite_file('cifar100.load_data', 'cifar100', cache_dir)
  return (sql_client_data.SqlClientData(path, 'train').preprocess(_parse),
          sql_client_data.SqlClientData(path, 'test').preprocess(_parse))


def _images():
  """TFF's five 8x8 images, resized to 32x32 as TFF resizes them."""
  small = np.array(tff_synthetic_data.CIFAR100_IMAGES_TIMES_4,
                   np.float32) / np.float32(4.0)
  resized = tf.image.resize(small, (32, 32))
  return collections.OrderedDict(
      coarse_label=np.array(tff_synthetic_data.CIFAR100_COARSE_LABELS,
                            np.int64),
      image=tf.cast(resized, tf.uint8).numpy(),
      label=np.array(tff_synthetic_data.CIFAR100_LABELS, np.int64))


def get_synthetic() -> client_data_lib.ClientData:
  """TFF's synthetic CIFAR-100: clients 'synthetic1' and 'synthetic2',
  each the same five images."""
  return tensor_slices.TestClientData({'synthetic1': _images(),
                                       'synthetic2': _images()})
