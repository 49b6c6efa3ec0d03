"""TFF's `tff.simulation.datasets.celeba`: LEAF's CelebA, one client per
celebrity, from TFF's cached SQLite file.

Elements are `OrderedDict`s sorted by key: `image` (int64 [84, 84, 3]) and
the 40 CelebA attributes (bool scalars).
"""

import collections

import tensorflow as tf

from canonical.simulation.datasets import cache
from canonical.simulation.datasets import client_data as client_data_lib
from canonical.simulation.datasets import sql_client_data
from canonical.simulation.datasets import tff_synthetic_data

IMAGE_NAME = tff_synthetic_data.CELEBA_IMAGE_NAME
ATTRIBUTE_NAMES = list(tff_synthetic_data.CELEBA_ATTRIBUTE_NAMES)

_SPLITS = {True: ('split_by_clients_train', 'split_by_clients_test'),
           False: ('split_by_examples_train', 'split_by_examples_test')}


def _parse(dataset):
  features = {IMAGE_NAME: tf.io.FixedLenFeature([84, 84, 3], tf.int64)}
  features.update({name: tf.io.FixedLenFeature([], tf.int64)
                   for name in ATTRIBUTE_NAMES})

  def parse(serialized):
    parsed = tf.io.parse_example(serialized, features)
    return collections.OrderedDict(
        (key, parsed[key] if key == IMAGE_NAME else tf.cast(parsed[key],
                                                             tf.bool))
        for key in sorted(features))

  return dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE)


def load_data(split_by_clients=True, cache_dir=None) -> tuple[
    client_data_lib.ClientData, client_data_lib.ClientData]:
  """`(train, test)` client data of CelebA: held-out celebrities as test
  with `split_by_clients`, else each celebrity's examples split. Read from
  TFF's cache (`<cache_dir or ~/.tff>/celeba.sqlite`); nothing is
  downloaded here."""
  path = cache.sqlite_file('celeba.load_data', 'celeba', cache_dir)
  train, test = _SPLITS[bool(split_by_clients)]
  return (sql_client_data.SqlClientData(path, train).preprocess(_parse),
          sql_client_data.SqlClientData(path, test).preprocess(_parse))
