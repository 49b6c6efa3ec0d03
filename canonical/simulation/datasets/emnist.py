"""TFF's `tff.simulation.datasets.emnist`: Federated EMNIST (LEAF's
EMNIST grouped by writer), from TFF's cached SQLite file, and TFF's small
synthetic version of it.

Elements are `OrderedDict(label=int32 [], pixels=float32 [28, 28])`, pixels
in [0, 1] with 1.0 the background (the inverse of MNIST's usual colours).
"""

import collections

import numpy as np
import tensorflow as tf

from canonical.simulation.datasets import cache
from canonical.simulation.datasets import client_data as client_data_lib
from canonical.simulation.datasets import sql_client_data
from canonical.simulation.datasets import tensor_slices
from canonical.simulation.datasets import tff_synthetic_data

_SPLITS = {True: ('digits_only_train', 'digits_only_test'),
           False: ('all_train', 'all_test')}


def _parse(dataset):

  def parse(serialized):
    parsed = tf.io.parse_example(serialized, {
        'pixels': tf.io.FixedLenFeature([28, 28], tf.float32),
        'label': tf.io.FixedLenFeature([], tf.int64)})
    return collections.OrderedDict(label=tf.cast(parsed['label'], tf.int32),
                                   pixels=parsed['pixels'])

  return dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE)


def load_data(only_digits=True, cache_dir=None) -> tuple[
    client_data_lib.ClientData, client_data_lib.ClientData]:
  """`(train, test)` client data of Federated EMNIST: 3,383 writers and 10
  labels with `only_digits`, else 3,400 writers and 62 labels (digits,
  then upper and lower case letters). Read from TFF's cache
  (`<cache_dir or ~/.tff>/emnist_all.sqlite`); nothing is downloaded here."""
  path = cache.sqlite_file('emnist.load_data', 'emnist_all', cache_dir)
  train, test = _SPLITS[bool(only_digits)]
  return (sql_client_data.SqlClientData(path, train).preprocess(_parse),
          sql_client_data.SqlClientData(path, test).preprocess(_parse))


def _digits():
  levels = np.array([[[int(c) for c in row] for row in image]
                     for image in tff_synthetic_data.EMNIST_DIGIT_LEVELS],
                    np.float32)
  return collections.OrderedDict(label=np.arange(10, dtype=np.int32),
                                 pixels=levels / np.float32(9.0))


def get_synthetic() -> client_data_lib.ClientData:
  """TFF's synthetic EMNIST: clients 'synthetic1' and 'synthetic2', each
  one image of every digit 0-9 (TFF's images)."""
  return tensor_slices.TestClientData({'synthetic1': _digits(),
                                       'synthetic2': _digits()})
