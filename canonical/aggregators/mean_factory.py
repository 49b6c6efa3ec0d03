"""TensorFlow Federated's `MeanFactory` (weighted) and `UnweightedMeanFactory`:
a mean as two inner sums and a division at the server.

The state and measurements are the inner processes': MeanFactory's are
`OrderedDict(value_sum_process=..., weight_sum_process=...)` and
`OrderedDict(mean_value=..., mean_weight=...)`; UnweightedMeanFactory's
`(value sum's, count sum's)` and `OrderedDict(mean_value=..., mean_count=...)`.
A value sum keeping client state (error feedback) makes a mean that keeps
it: the clients' state passes through.
"""

import collections

import tensorflow as tf

from canonical.aggregators import factory
from canonical.aggregators import sum_factory
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import specs
from canonical.core import types as ft
from canonical import errors
from canonical.templates import aggregation_process
from canonical.templates import measured
from canonical.templates import measured_process



def _inner(inner_factory, where, what):
  """An inner sum's factory: `SumFactory()` when None."""
  if inner_factory is None:
    return sum_factory.SumFactory()
  return factory.check_factory(
      inner_factory, (factory.UnweightedAggregationFactory,), where, what)


def _stateless_at_clients(process, where, what):
  if process.has_client_state:
    raise errors.FederatedError(
        f'{where}: the {what} keeps client state; only the value sum may '
        '(its client state is the mean\'s).')
  return process


def _weigh(value, weight):
  return tf.nest.map_structure(lambda x: x * tf.cast(weight, x.dtype), value)


def _divide(total, weight):
  return tf.nest.map_structure(
      lambda x: tf.math.divide(x, tf.cast(weight, x.dtype)), total)


def _divide_no_nan(total, weight):
  return tf.nest.map_structure(
      lambda x: tf.math.divide_no_nan(x, tf.cast(weight, x.dtype)), total)


class MeanFactory(factory.WeightedAggregationFactory):
  """`sum(value * weight) / sum(weight)`, each sum by an inner factory
  (`SumFactory` by default). With `no_nan_division`, a zero total weight
  gives a zero mean instead of NaN."""

  def __init__(self, value_sum_factory=None, weight_sum_factory=None,
               no_nan_division=False):
    where = 'MeanFactory'
    self._value_sum_factory = _inner(value_sum_factory, where,
                                     'value_sum_factory')
    self._weight_sum_factory = _inner(weight_sum_factory, where,
                                      'weight_sum_factory')
    if not isinstance(no_nan_division, bool):
      raise errors.InvalidTypeError(
          f'{where}: no_nan_division must be a bool, got '
          f'{no_nan_division!r}.')
    self._no_nan_division = no_nan_division

  def create(self, value_type, weight_type):
    where = 'MeanFactory.create'
    value_type = factory.float_value_type(value_type, where)
    weight_type = factory.value_type_of(weight_type, where, 'weight_type')
    value_sum = self._value_sum_factory.create(value_type)
    weight_sum = _stateless_at_clients(
        self._weight_sum_factory.create(weight_type), where,
        'weight_sum_factory')
    weigh = specs.tf_computation(_weigh, value_type, weight_type)
    divide = specs.tf_computation(
        _divide_no_nan if self._no_nan_division else _divide,
        value_sum.result_type, weight_sum.result_type)

    @computations.federated_computation()
    def init_fn():
      return intrinsics.federated_zip(collections.OrderedDict(
          value_sum_process=value_sum.initialize(),
          weight_sum_process=weight_sum.initialize()))

    def step(state, value, weight, client_state=None):
      weighted = intrinsics.federated_map(weigh, (value, weight))
      value_output = aggregation_process.call_next(
          value_sum, state['value_sum_process'], weighted,
          client_state=client_state)
      weight_output = weight_sum.next(state['weight_sum_process'], weight)
      mean = intrinsics.federated_map(
          divide, (value_output.result, weight_output.result))
      new_state = collections.OrderedDict(
          value_sum_process=value_output.state,
          weight_sum_process=weight_output.state)
      measurements = collections.OrderedDict(
          mean_value=value_output.measurements,
          mean_weight=weight_output.measurements)
      return measured.output(
          intrinsics.federated_zip(new_state), mean,
          intrinsics.federated_zip(measurements),
          measured.client_state_of(value_output))

    next_fn = aggregation_process.next_computation(
        step, [('state', init_fn.type_signature.result),
               ('value', ft.clients(value_type)),
               ('weight', ft.clients(weight_type))],
        value_sum.client_state_type)
    return measured_process.with_encoders_of(
        value_sum, aggregation_process.AggregationProcess(
            init_fn, next_fn,
            client_state_initializer=value_sum.client_state_initializer))


class UnweightedMeanFactory(factory.UnweightedAggregationFactory):
  """`sum(value) / number of clients`, the sum and the count (of int32 ones)
  each by an inner factory (`SumFactory` by default)."""

  def __init__(self, value_sum_factory=None, count_sum_factory=None):
    where = 'UnweightedMeanFactory'
    self._value_sum_factory = _inner(value_sum_factory, where,
                                     'value_sum_factory')
    self._count_sum_factory = _inner(count_sum_factory, where,
                                     'count_sum_factory')

  def create(self, value_type):
    where = 'UnweightedMeanFactory.create'
    value_type = factory.float_value_type(value_type, where)
    count_type = tf.TensorSpec([], tf.int32)
    value_sum = self._value_sum_factory.create(value_type)
    count_sum = _stateless_at_clients(
        self._count_sum_factory.create(count_type), where,
        'count_sum_factory')
    divide = specs.tf_computation(_divide, value_sum.result_type,
                                  count_sum.result_type)

    @computations.federated_computation()
    def init_fn():
      return intrinsics.federated_zip(
          (value_sum.initialize(), count_sum.initialize()))

    def step(state, value, client_state=None):
      value_state, count_state = state
      value_output = aggregation_process.call_next(
          value_sum, value_state, value, client_state=client_state)
      count_output = count_sum.next(
          count_state, intrinsics.federated_value(1, ft.CLIENTS))
      mean = intrinsics.federated_map(
          divide, (value_output.result, count_output.result))
      measurements = collections.OrderedDict(
          mean_value=value_output.measurements,
          mean_count=count_output.measurements)
      return measured.output(
          intrinsics.federated_zip((value_output.state, count_output.state)),
          mean, intrinsics.federated_zip(measurements),
          measured.client_state_of(value_output))

    next_fn = aggregation_process.next_computation(
        step, [('state', init_fn.type_signature.result),
               ('value', ft.clients(value_type))],
        value_sum.client_state_type)
    return measured_process.with_encoders_of(
        value_sum, aggregation_process.AggregationProcess(
            init_fn, next_fn,
            client_state_initializer=value_sum.client_state_initializer))
