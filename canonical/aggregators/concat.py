"""TensorFlow Federated's `concat_factory`: a structure of tensors aggregated
as one vector.

Each client flattens every tensor of its value and concatenates them (in
`tf.nest` order) into one rank-1 tensor; the inner factory aggregates those
vectors; the server splits the result back into the value's structure. The
state and measurements are the inner process's. Useful before an aggregator
that should see the whole value at once (one rotation, one norm).
"""

import tensorflow as tf

from canonical.aggregators import factory
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import specs
from canonical.core import types as ft
from canonical import errors
from canonical.templates import aggregation_process
from canonical.templates import measured


def _concat(value):
  return tf.concat([tf.reshape(x, [-1]) for x in tf.nest.flatten(value)], 0)


def _split(vector, value_type):
  sizes = [spec.shape.num_elements() for spec in tf.nest.flatten(value_type)]
  parts = tf.split(vector, sizes) if len(sizes) > 1 else [vector]
  return tf.nest.pack_sequence_as(value_type, [
      tf.reshape(part, spec.shape)
      for part, spec in zip(parts, tf.nest.flatten(value_type))])


def concat_fns(value_type, where):
  """`(concat, split)` tf_computations between `value_type` (tensors of one
  integer or floating dtype) and one rank-1 tensor."""
  value_type = factory.value_type_of(value_type, where)
  dtypes = {spec.dtype for spec in tf.nest.flatten(value_type)}
  dtype = dtypes.pop()
  if dtypes or not (dtype.is_integer or dtype.is_floating):
    raise errors.InvalidTypeError(
        f'{where}: the tensors of value_type must all have one integer or '
        f'floating dtype, got {ft.describe(value_type)}.')
  concat = specs.tf_computation(_concat, value_type)
  split = specs.tf_computation(lambda vector: _split(vector, value_type),
                               specs.plain(concat.result_spec))
  return value_type, concat, split


class _ConcatFactory:
  """What both kinds of concat factory do around the inner process."""

  def __init__(self, inner_agg_factory):
    self._inner = inner_agg_factory

  def _create(self, value_type, weight_type=None):
    where = f'concat_factory({type(self._inner).__name__}).create'
    value_type, concat, split = concat_fns(value_type, where)
    vector_type = specs.plain(concat.result_spec)
    weighted = weight_type is not None
    if weighted:
      weight_type = factory.value_type_of(weight_type, where, 'weight_type')
      inner = self._inner.create(vector_type, weight_type)
    else:
      inner = self._inner.create(vector_type)

    def next_impl(state, value, *weight):
      output = inner.next(state, intrinsics.federated_map(concat, value),
                          *weight)
      return measured.MeasuredProcessOutput(
          output.state, intrinsics.federated_map(split, output.result),
          output.measurements)

    state_type = inner.next.parameter_types[0]
    if weighted:

      @computations.federated_computation(state_type, ft.clients(value_type),
                                          ft.clients(weight_type))
      def next_fn(state, value, weight):
        return next_impl(state, value, weight)
    else:

      @computations.federated_computation(state_type, ft.clients(value_type))
      def next_fn(state, value):  # pylint: disable=function-redefined
        return next_impl(state, value)

    return aggregation_process.AggregationProcess(inner.initialize, next_fn)


class _UnweightedConcatFactory(_ConcatFactory,
                               factory.UnweightedAggregationFactory):

  def create(self, value_type):
    return self._create(value_type)


class _WeightedConcatFactory(_ConcatFactory,
                             factory.WeightedAggregationFactory):

  def create(self, value_type, weight_type):
    return self._create(value_type, weight_type)


def concat_factory(inner_agg_factory):
  """A factory of the inner one's kind (weighted or not) aggregating each
  client's value as one concatenated rank-1 tensor."""
  factory.check_factory(
      inner_agg_factory, (factory.UnweightedAggregationFactory,
                          factory.WeightedAggregationFactory),
      'concat_factory', 'inner_agg_factory')
  if isinstance(inner_agg_factory, factory.WeightedAggregationFactory):
    return _WeightedConcatFactory(inner_agg_factory)
  return _UnweightedConcatFactory(inner_agg_factory)
