"""What a client contributes to heavy hitters (its words, each with a
count, capped as asked), and TFF's `ClippingIbltFactory`, which caps a
client's words this way before an inner `IbltFactory` aggregates them."""

import collections
from typing import Optional

import tensorflow as tf

from canonical.aggregators import factory
from canonical.analytics import data_processing
from canonical.analytics.heavy_hitters.iblt import iblt_factory
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import naming
from canonical.core import types as ft
from canonical import errors
from canonical.templates import aggregation_process

# Plain TensorFlow (no Python control flow over tensors): not for AutoGraph.
_plain = tf.autograph.experimental.do_not_convert

# A client's words: a dataset of string batches.
WORDS_TYPE = tf.data.DatasetSpec(tf.TensorSpec([None], tf.string))


def words_and_counts(dataset, max_words_per_user=None, multi_contribution=True,
                     batch_size=1, string_max_bytes=10):
  """`(words, counts)` a client contributes (int64 counts).

  All its distinct words with their counts, or with `max_words_per_user`
  its first that many words (`multi_contribution`) or its that many most
  frequent distinct words (each counted once); without
  `multi_contribution`, every count is 1.
  """
  if max_words_per_user is None:
    words, counts = data_processing.get_unique_elements_with_counts(
        dataset, string_max_bytes=string_max_bytes)
  elif multi_contribution:
    return data_processing.get_capped_elements_with_counts(
        dataset, max_words_per_user, batch_size=batch_size,
        string_max_bytes=string_max_bytes)
  else:
    words, counts = data_processing.get_top_elements_with_counts(
        dataset, max_words_per_user, string_max_bytes=string_max_bytes)
  if not multi_contribution:
    counts = tf.ones_like(counts)
  return words, counts


def check_options(where, max_words_per_user, batch_size, string_max_bytes):
  if max_words_per_user is not None and max_words_per_user < 1:
    raise errors.InvalidValueError(
        f'{where}: max_words_per_user must be at least 1 (or None), got '
        f'{max_words_per_user}.')
  if batch_size < 1:
    raise errors.InvalidValueError(
        f'{where}: batch_size must be at least 1, got {batch_size}.')
  if string_max_bytes < 1:
    raise errors.InvalidValueError(
        f'{where}: string_max_bytes must be at least 1, got '
        f'{string_max_bytes}.')


class ClippingIbltFactory(factory.UnweightedAggregationFactory):
  """TFF's `ClippingIbltFactory(inner_iblt_agg, max_words_per_user=None,
  multi_contribution=True, batch_size=1, string_max_bytes=10,
  unique_counts=False)`: aggregates clients' datasets of string batches by
  turning each into `OrderedDict(key=words, value=counts)` (as
  `words_and_counts` picks them; each value `[count, 1]` with
  `unique_counts`, else `[count]`) for `inner_iblt_agg`.

  TFF 0.87 gives a scalar value without `unique_counts`, which its own
  `IbltFactory` then refuses; here the value is `[count]`, so it works.
  """

  def __init__(self, inner_iblt_agg: iblt_factory.IbltFactory,
               max_words_per_user: Optional[int] = None,
               multi_contribution: bool = True, batch_size: int = 1,
               string_max_bytes: int = 10, unique_counts: bool = False):
    where = 'ClippingIbltFactory'
    factory.check_factory(inner_iblt_agg, (iblt_factory.IbltFactory,),
                          where, 'inner_iblt_agg')
    check_options(where, max_words_per_user, batch_size, string_max_bytes)
    self.inner_iblt_agg = inner_iblt_agg
    self.max_words_per_user = max_words_per_user
    self.multi_contribution = multi_contribution
    self.batch_size = batch_size
    self.string_max_bytes = string_max_bytes
    self.unique_counts = unique_counts

  def create(self, value_type) -> aggregation_process.AggregationProcess:
    value_type = ft.to_member(value_type, 'ClippingIbltFactory.create')
    if not (isinstance(value_type, tf.data.DatasetSpec) and
            value_type.element_spec == WORDS_TYPE.element_spec):
      raise errors.InvalidTypeError(
          'ClippingIbltFactory.create: value_type must be a sequence of '
          f'string batches, {ft.describe(WORDS_TYPE)}, got '
          f'{naming.describe_object(value_type)}.')

    @computations.tf_computation(value_type)
    @_plain
    def preprocess(dataset):
      words, counts = words_and_counts(
          dataset, self.max_words_per_user, self.multi_contribution,
          self.batch_size, self.string_max_bytes)
      values = counts[:, None]
      if self.unique_counts:
        values = tf.stack([counts, tf.ones_like(counts)], axis=1)
      return tf.data.Dataset.from_tensor_slices(
          collections.OrderedDict(key=words, value=values))

    inner = self.inner_iblt_agg.create(preprocess.result_spec)

    @computations.federated_computation(inner.initialize.type_signature.result,
                                        ft.clients(value_type))
    def next_fn(state, client_data):
      return inner.next(state, intrinsics.federated_map(preprocess,
                                                        client_data))

    return aggregation_process.AggregationProcess(inner.initialize, next_fn)
