"""TFF's `tff.simulation.datasets.inaturalist`: the federated iNaturalist
2017, split by user (USER_120K: 9,275 clients) or by location (GEO_*), from
the TFRecord cache TFF 0.87 builds, and TFF's synthetic version of it.

Building that cache downloads the iNaturalist images and TFF's split files;
this runtime downloads nothing, so `load_data` reads a cache TFF built
(`<cache_dir>/<split name>`).
"""

import collections
import enum
import os

import tensorflow as tf

from canonical import errors
from canonical.simulation.datasets import client_data as client_data_lib
from canonical.simulation.datasets import tensor_slices
from canonical.simulation.datasets import vision


class INaturalistSplit(enum.Enum):
  """How the clients are made: by user, or by location at several
  granularities."""
  USER_120K = enum.auto()
  GEO_100 = enum.auto()
  GEO_300 = enum.auto()
  GEO_1K = enum.auto()
  GEO_3K = enum.auto()
  GEO_10K = enum.auto()
  GEO_30K = enum.auto()

  def __repr__(self):
    return f'<{type(self).__name__}.{self.name}>'


def load_data(image_dir: str = 'images', cache_dir: str = 'cache',
              split: INaturalistSplit = INaturalistSplit.USER_120K
             ) -> tuple[client_data_lib.ClientData, tf.data.Dataset]:
  """`(train clients, test examples)` of one split, read from the cache
  TFF 0.87's `inaturalist.load_data` builds under `cache_dir`. `image_dir`
  is where TFF downloads the images to build it, which does not run here."""
  del image_dir  # For building the cache, which does not run here.
  if not isinstance(split, INaturalistSplit):
    raise errors.InvalidTypeError(f'inaturalist.load_data: split must be an '
                    f'INaturalistSplit, got {split!r}.')
  return vision.load_from_cache(
      'inaturalist.load_data', os.path.join(cache_dir, split.name),
      'Build it where the images can be downloaded, with TFF 0.87\'s '
      'tff.simulation.datasets.inaturalist.load_data(split=INaturalistSplit.'
      f'{split.name}, cache_dir=...), and copy {split.name}/ into this '
      'cache_dir.')


def get_synthetic() -> client_data_lib.ClientData:
  """TFF's synthetic iNaturalist: client 'synthetic' with three 128x128
  images of stateless normal noise (seeds (0, i)) cast to uint8, and
  classes 0, 1, 2."""
  images = tf.stack([tf.random.stateless_normal([128, 128, 3], seed=(0, i))
                     for i in range(3)])
  data = collections.OrderedDict([
      (vision.IMAGE_DECODED, tf.cast(images, tf.uint8).numpy()),
      (vision.CLASS, tf.constant([0, 1, 2], tf.int64).numpy())])
  return tensor_slices.TestClientData({'synthetic': data})
