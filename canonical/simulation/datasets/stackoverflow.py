"""TFF's `tff.simulation.datasets.stackoverflow`: Stack Overflow posts, one
client per user, from TFF's cached files, and TFF's small synthetic version.

Elements are `OrderedDict` of `creation_date`, `score` (int64), `tags`
('|'-separated), `title`, `tokens` (the body, space-separated tokens) and
`type`, all string scalars but the score.
"""

import collections
import json

import numpy as np
import tensorflow as tf

from canonical import errors
from canonical.simulation.datasets import cache
from canonical.simulation.datasets import client_data as client_data_lib
from canonical.simulation.datasets import sql_client_data
from canonical.simulation.datasets import tensor_slices
from canonical.simulation.datasets import tff_synthetic_data

_FIELDS = collections.OrderedDict(
    creation_date=tf.string, score=tf.int64, tags=tf.string, title=tf.string,
    tokens=tf.string, type=tf.string)


def _parse(dataset):
  features = {key: tf.io.FixedLenFeature([], dtype)
              for key, dtype in _FIELDS.items()}

  def parse(serialized):
    parsed = tf.io.parse_example(serialized, features)
    return collections.OrderedDict((key, parsed[key]) for key in _FIELDS)

  return dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE)


def load_data(cache_dir=None) -> tuple[client_data_lib.ClientData,
                                       client_data_lib.ClientData,
                                       client_data_lib.ClientData]:
  """`(train, heldout, test)` client data of Stack Overflow, read from
  TFF's cache (`<cache_dir or ~/.tff>/stackoverflow.sqlite`); nothing is
  downloaded here."""
  path = cache.sqlite_file('stackoverflow.load_data', 'stackoverflow',
                           cache_dir)
  return tuple(sql_client_data.SqlClientData(path, split).preprocess(_parse)
               for split in ('train', 'heldout', 'test'))


def load_word_counts(cache_dir=None, vocab_size: int | None = None):
  """`OrderedDict` word -> number of training users using it, most used
  first (the first `vocab_size` only, if given), from Keras' cache
  (`<cache_dir or ~/.keras>/datasets/stackoverflow.word_count`)."""
  if vocab_size is not None:
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool):
      raise errors.InvalidTypeError(
          'stackoverflow.load_word_counts: vocab_size must be None or an '
          f'int, got {type(vocab_size).__name__}.')
    if vocab_size <= 0:
      raise errors.InvalidValueError(
          'stackoverflow.load_word_counts: vocab_size must be positive, got '
          f'{vocab_size}.')
  path = cache.keras_file('stackoverflow.load_word_counts',
                          'stackoverflow.word_count',
                          'stackoverflow.word_count.tar.bz2', cache_dir)
  counts = collections.OrderedDict()
  with open(path) as lines:
    for line in lines:
      word, count = line.split()
      counts[word] = int(count)
      if vocab_size is not None and len(counts) >= vocab_size:
        break
  return counts


def load_tag_counts(cache_dir=None):
  """`OrderedDict` tag -> number of training users using it, most used
  first, from Keras' cache
  (`<cache_dir or ~/.keras>/datasets/stackoverflow.tag_count`)."""
  path = cache.keras_file('stackoverflow.load_tag_counts',
                          'stackoverflow.tag_count',
                          'stackoverflow.tag_count.tar.bz2', cache_dir)
  with open(path) as f:
    counts = json.load(f)
  return collections.OrderedDict(
      sorted(counts.items(), key=lambda item: item[1], reverse=True))


def create_synthetic_data_dictionary():
  """TFF's synthetic clients as `{client id: OrderedDict(field: values)}`
  (scores as an int64 array), what `TestClientData` takes."""
  return {
      client_id: collections.OrderedDict(
          (key, np.array(columns[key], np.int64) if key == 'score' else
           list(columns[key])) for key in _FIELDS)
      for client_id, columns in
      tff_synthetic_data.STACKOVERFLOW_CLIENTS.items()}


def get_synthetic() -> client_data_lib.ClientData:
  """TFF's synthetic Stack Overflow: three users' posts."""
  return tensor_slices.TestClientData(create_synthetic_data_dictionary())


def get_synthetic_word_counts():
  """The word counts of the synthetic posts' bodies, as TFF gives them."""
  return collections.OrderedDict(tff_synthetic_data.STACKOVERFLOW_WORD_COUNTS)


def get_synthetic_tag_counts():
  """The tag counts of the synthetic posts, as TFF gives them."""
  return collections.OrderedDict(tff_synthetic_data.STACKOVERFLOW_TAG_COUNTS)
