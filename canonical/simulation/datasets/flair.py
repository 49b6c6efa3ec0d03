"""TFF's `tff.simulation.datasets.flair`: Apple's FLAIR (Federated
Learning Annotated Image Repository), one client per Flickr user.

TFF's route is three steps: `download_data(data_dir)` fetches the metadata
and images, `write_data(data_dir, cache_dir)` writes one TFRecord file per
client under `<cache_dir>/<split>/`, and `load_data(cache_dir)` reads them.
The last two run here; the download does not (nothing is downloaded at run
time), so fetch the data by hand or with TFF 0.87's `download_data`.

Elements are `OrderedDict([('image', uint8 [256, 256, 3]), ('label', int32
[17]), ('fine_grained_label', int32 [1628])])`, labels as multi-hot vectors.
"""

import collections
import json
import os

import tensorflow as tf

from canonical import errors
from canonical.simulation.datasets import cache
from canonical.simulation.datasets import file_per_user

_METADATA_FILE = 'flair_metadata.json'
_IMAGES = os.path.join('images', 'small_images')
_IMAGE_SHAPE = (256, 256, 3)
_NUM_LABELS = 17
_NUM_FINE_GRAINED_LABELS = 1628
_SPLITS = ('train', 'val', 'test')
_URL = 'https://docs-assets.developer.apple.com/ml-research/datasets/flair'


def download_data(data_dir: str) -> None:
  """Refused: it downloads FLAIR, and this runtime downloads nothing."""
  cache.refuse(
      'flair.download_data', f'FLAIR\'s metadata and images (for {data_dir})',
      f'Download them from {_URL} (or with TFF 0.87\'s flair.download_data): '
      f'{_METADATA_FILE} and the images under {_IMAGES}/, then call '
      'write_data(data_dir, cache_dir).')


def _index(names):
  """Each name's position in sorted order."""
  return {name: i for i, name in enumerate(sorted(names))}


def _example(image, labels, fine_grained_labels):
  return tf.train.Example(features=tf.train.Features(feature={
      'image': tf.train.Feature(bytes_list=tf.train.BytesList(value=[image])),
      'label': tf.train.Feature(int64_list=tf.train.Int64List(value=labels)),
      'fine_grained_label': tf.train.Feature(int64_list=tf.train.Int64List(
          value=fine_grained_labels)),
  }))


def write_data(data_dir: str, cache_dir: str) -> None:
  """Writes FLAIR as downloaded into `data_dir` (its metadata file and its
  images) as TFRecord files, one per client, under
  `<cache_dir>/<train|val|test>/<user id>.tfrecords`; labels are numbered
  in sorted order of their names."""
  metadata_file = os.path.join(data_dir, _METADATA_FILE)
  if not tf.io.gfile.exists(metadata_file):
    raise errors.InvalidValueError(
        f'flair.write_data: no {metadata_file}; download FLAIR into '
        f'{data_dir} first ({_URL}).')
  with tf.io.gfile.GFile(metadata_file) as f:
    metadata = json.load(f)
  by_user = collections.defaultdict(list)
  for entry in metadata:
    by_user[entry['user_id']].append(entry)
  labels = _index({label for e in metadata for label in e['labels']})
  fine = _index({label for e in metadata
                 for label in e['fine_grained_labels']})
  image_dir = os.path.join(data_dir, _IMAGES)
  for user_id, entries in by_user.items():
    # A user's examples are all in one split, so the splits' users differ.
    split_dir = os.path.join(cache_dir, entries[0]['partition'])
    tf.io.gfile.makedirs(split_dir)
    path = os.path.join(split_dir, f'{user_id}.tfrecords')
    with tf.io.TFRecordWriter(path) as writer:
      for entry in entries:
        with tf.io.gfile.GFile(
            os.path.join(image_dir, f'{entry["image_id"]}.jpg'), 'rb') as f:
          image = f.read()
        writer.write(_example(
            image, [labels[x] for x in entry['labels']],
            [fine[x] for x in entry['fine_grained_labels']]
        ).SerializeToString())


def _multi_hot(indices, depth):
  return tf.reduce_sum(tf.one_hot(indices, depth, dtype=tf.int32), axis=0)


def _parse(serialized):
  example = tf.io.parse_single_example(serialized, {
      'image': tf.io.FixedLenFeature([], tf.string),
      'label': tf.io.VarLenFeature(tf.int64),
      'fine_grained_label': tf.io.VarLenFeature(tf.int64)})
  image = tf.reshape(tf.io.decode_jpeg(example['image']), _IMAGE_SHAPE)
  return collections.OrderedDict([
      ('image', image),
      ('label', _multi_hot(example['label'].values, _NUM_LABELS)),
      ('fine_grained_label', _multi_hot(example['fine_grained_label'].values,
                                        _NUM_FINE_GRAINED_LABELS))])


def _read(path):
  return tf.data.TFRecordDataset([path]).map(_parse, tf.data.AUTOTUNE)


def load_data(cache_dir: str) -> tuple[file_per_user.FilePerUserClientData,
                                       file_per_user.FilePerUserClientData,
                                       file_per_user.FilePerUserClientData]:
  """`(train, val, test)` client data of FLAIR, read from what
  `write_data` wrote into `cache_dir`."""
  splits = []
  for split in _SPLITS:
    directory = os.path.join(cache_dir, split)
    if not tf.io.gfile.isdir(directory):
      cache.refuse('flair.load_data', f'the {split} clients\' directory '
                   f'{directory}', 'Write it with flair.write_data(data_dir, '
                   'cache_dir) from FLAIR\'s downloaded files.')
    files = {os.path.splitext(name)[0]: os.path.join(directory, name)
             for name in tf.io.gfile.listdir(directory)}
    splits.append(file_per_user.FilePerUserClientData(files, _read))
  return tuple(splits)
