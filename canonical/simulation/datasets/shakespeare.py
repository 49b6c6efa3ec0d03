"""TFF's `tff.simulation.datasets.shakespeare`: LEAF's Shakespeare, one
client per speaking role of a play, from TFF's cached SQLite file, and
TFF's small synthetic version of it.

Elements are `OrderedDict(snippets=string [])`: a run of the role's lines.
"""

import collections

import tensorflow as tf

from canonical.simulation.datasets import cache
from canonical.simulation.datasets import client_data as client_data_lib
from canonical.simulation.datasets import sql_client_data
from canonical.simulation.datasets import tensor_slices
from canonical.simulation.datasets import tff_synthetic_data


def _parse(dataset):

  def parse(serialized):
    parsed = tf.io.parse_example(
        serialized, {'snippets': tf.io.FixedLenFeature([], tf.string)})
    return collections.OrderedDict(snippets=parsed['snippets'])

  return dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE)


def load_data(cache_dir: str | None = None) -> tuple[
    client_data_lib.ClientData, client_data_lib.ClientData]:
  """`(train, test)` client data of Shakespeare (715 roles), read from
  TFF's cache (`<cache_dir or ~/.tff>/shakespeare.sqlite`); nothing is
  downloaded here."""
  path = cache.sqlite_file('shakespeare.load_data', 'shakespeare', cache_dir)
  return (sql_client_data.SqlClientData(path, 'train').preprocess(_parse),
          sql_client_data.SqlClientData(path, 'test').preprocess(_parse))


def get_synthetic() -> client_data_lib.ClientData:
  """TFF's synthetic Shakespeare: three roles and their snippets."""
  return tensor_slices.TestClientData({
      role: collections.OrderedDict(snippets=list(snippets))
      for role, snippets in tff_synthetic_data.SHAKESPEARE_SNIPPETS.items()})
