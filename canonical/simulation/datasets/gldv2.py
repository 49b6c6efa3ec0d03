"""TFF's `tff.simulation.datasets.gldv2`: the federated Google Landmarks
v2 (gld160k: 1,262 clients and 2,028 classes; gld23k: 233 clients and 203
classes), from the TFRecord cache TFF 0.87 builds, and TFF's synthetic
version of it.

Building that cache downloads the landmark images (hundreds of GB) and
TFF's split files; this runtime downloads nothing, so `load_data` reads a
cache TFF built (`<cache_dir>/gld160k` or `<cache_dir>/gld23k`).
"""

import collections
import os

import tensorflow as tf

from canonical.simulation.datasets import client_data as client_data_lib
from canonical.simulation.datasets import tensor_slices
from canonical.simulation.datasets import vision

FED_GLD_CACHE = 'gld160k'
MINI_GLD_CACHE = 'gld23k'


def load_data(num_worker: int = 1, cache_dir: str = 'cache',
              gld23k: bool = False,
              base_url: str = 'https://s3.amazonaws.com/google-landmark'
             ) -> tuple[client_data_lib.ClientData, tf.data.Dataset]:
  """`(train clients, test examples)` of gld23k or gld160k, read from the
  cache TFF 0.87's `gldv2.load_data` builds under `cache_dir`. `num_worker`
  and `base_url` only steer TFF's download, which does not run here."""
  del num_worker, base_url  # For the download, which does not run here.
  name = MINI_GLD_CACHE if gld23k else FED_GLD_CACHE
  return vision.load_from_cache(
      'gldv2.load_data', os.path.join(cache_dir, name),
      'Build it where the images can be downloaded, with TFF 0.87\'s '
      f'tff.simulation.datasets.gldv2.load_data(gld23k={gld23k}, '
      f'cache_dir=...), and copy {name}/ into this cache_dir.')


def get_synthetic() -> client_data_lib.ClientData:
  """TFF's synthetic landmarks: client 'synthetic' with three 600x800
  images of stateless uniform noise (seed (0, 0)) and classes 0, 1, 2."""
  images = tf.random.stateless_uniform([3, 600, 800, 3], seed=(0, 0),
                                       minval=0, maxval=255, dtype=tf.int32)
  data = collections.OrderedDict([
      (vision.IMAGE_DECODED, tf.cast(images, tf.uint8).numpy()),
      (vision.CLASS, tf.constant([[0], [1], [2]], tf.int64).numpy())])
  return tensor_slices.TestClientData({'synthetic': data})
