"""TensorFlow Federated's `clipping_factory` and `zeroing_factory`: bound each
client's value before an inner aggregation.

Clipping scales a value whose global L2 norm exceeds the clipping norm down
to it; zeroing replaces a value whose norm (L1, L2 or L-infinity) exceeds the
zeroing norm by zeros (its weight is kept). The norm is a constant, or an
`EstimationProcess` (`PrivateQuantileEstimationProcess`) whose `report` is the
norm of this round and whose `next` learns from the clients' norms.

State `OrderedDict(clipping_norm=, inner_agg=, clipped_count_agg=)` and
measurements `OrderedDict(clipping=<inner's>, clipping_norm=float32,
clipped_count=int32)` ('zeroing', 'zeroed_...' for zeroing), as in TFF.
"""

import collections
import math
import numbers

import tensorflow as tf

from canonical.aggregators import factory
from canonical.aggregators import sum_factory
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import specs
from canonical.core import types as ft
from canonical import errors
from canonical.templates import aggregation_process
from canonical.templates import estimation_process
from canonical.templates import measured
from canonical.templates import measured_process
from encoders.stages import basic

NORM_SPEC = tf.TensorSpec([], tf.float32)
COUNT_SPEC = tf.TensorSpec([], tf.int32)


def _constant_process(value):
  """An EstimationProcess whose estimate is always `value`."""

  @computations.federated_computation()
  def init_fn():
    return sum_factory.empty_at_server()

  @computations.federated_computation(init_fn.type_signature.result,
                                      ft.clients(NORM_SPEC))
  def next_fn(state, value):
    del value  # A constant learns nothing.
    return state

  @computations.federated_computation(init_fn.type_signature.result)
  def report_fn(state):
    del state
    return intrinsics.federated_value(value, ft.SERVER)

  return estimation_process.EstimationProcess(init_fn, next_fn, report_fn)


def _global_l2_norm(value):
  return tf.cast(basic.global_l2_norm(value), tf.float32)


def _global_l1_norm(value):
  return tf.reduce_sum(tf.stack([tf.cast(tf.norm(x, ord=1), tf.float32)
                                 for x in tf.nest.flatten(value)]))


def _global_inf_norm(value):
  return tf.reduce_max(tf.stack([tf.cast(tf.norm(x, ord=math.inf), tf.float32)
                                 for x in tf.nest.flatten(value)]))


def _make_clip(value_type):
  def clip_fn(value, clipping_norm):
    clipped, norm = basic.clip_by_global_l2_norm(value, clipping_norm)
    norm = tf.cast(norm, tf.float32)
    return clipped, norm, tf.cast(norm > clipping_norm, tf.int32)
  return specs.tf_computation(clip_fn, value_type, NORM_SPEC)


def _make_zero(value_type, norm_order):
  norm_of = {1.0: _global_l1_norm, 2.0: _global_l2_norm}.get(
      norm_order, _global_inf_norm)

  def zero_fn(value, zeroing_norm):
    norm = norm_of(value)
    zeroed = norm > zeroing_norm
    value = tf.cond(zeroed,
                    lambda: tf.nest.map_structure(tf.zeros_like, value),
                    lambda: value)
    return value, norm, tf.cast(zeroed, tf.int32)
  return specs.tf_computation(zero_fn, value_type, NORM_SPEC)


class _Bounded:
  """What clipping and zeroing share: a norm process, a count of bounded
  values, and a per-client computation `make_bound(value_type)` returning
  (bounded value, norm, 1 if bounded)."""

  def __init__(self, norm, inner_factory, count_factory, make_bound,
               prefix, where):
    if count_factory is None:
      count_factory = sum_factory.SumFactory()
    factory.check_factory(count_factory,
                          (factory.UnweightedAggregationFactory,), where,
                          f'{prefix}ed_count_sum_factory')
    if isinstance(norm, numbers.Real) and not isinstance(norm, bool):
      norm = _constant_process(float(norm))
    elif not isinstance(norm, estimation_process.EstimationProcess):
      raise errors.InvalidTypeError(
          f'{where}: {prefix}ing_norm must be a float or an '
          f'EstimationProcess, got {type(norm).__name__}.')
    estimation_process.check_scalar_estimator(
        norm, f'{where}: {prefix}ing_norm', tf.float32)
    self.norm = norm
    self.inner_factory = inner_factory
    self.count_factory = count_factory
    self.make_bound = make_bound
    self.prefix = prefix
    self.where = where

  def create(self, value_type, weight_type=None):
    where = f'{self.where}(...).create'
    value_type = factory.float_value_type(value_type, where)
    if weight_type is None:
      inner = self.inner_factory.create(value_type)
    else:
      weight_type = factory.value_type_of(weight_type, where, 'weight_type')
      inner = self.inner_factory.create(value_type, weight_type)
    counter = self.count_factory.create(COUNT_SPEC)
    bound = self.make_bound(value_type)
    norm_process, prefix = self.norm, self.prefix
    names = (f'{prefix}ing_norm', 'inner_agg', f'{prefix}ed_count_agg')

    @computations.federated_computation()
    def init_fn():
      return intrinsics.federated_zip(collections.OrderedDict(zip(
          names, (norm_process.initialize(), inner.initialize(),
                  counter.initialize()))))

    def step(state, value, weight=None, client_state=None):
      norm_state, inner_state, count_state = (state[n] for n in names)
      norm = norm_process.report(norm_state)
      bounded, norms, was_bounded = intrinsics.federated_map(
          bound, (value, intrinsics.federated_broadcast(norm)))
      new_norm_state = norm_process.next(norm_state, norms)
      weights = () if weight is None else (weight,)
      output = aggregation_process.call_next(
          inner, inner_state, bounded, *weights, client_state=client_state)
      count = counter.next(count_state, was_bounded)
      new_state = collections.OrderedDict(zip(
          names, (new_norm_state, output.state, count.state)))
      measurements = collections.OrderedDict((
          (f'{prefix}ing', output.measurements),
          (f'{prefix}ing_norm', norm),
          (f'{prefix}ed_count', count.result)))
      return measured.output(
          intrinsics.federated_zip(new_state), output.result,
          intrinsics.federated_zip(measurements),
          measured.client_state_of(output))

    parameters = [('state', init_fn.type_signature.result),
                  ('value', ft.clients(value_type))]
    if weight_type is not None:
      parameters.append(('weight', ft.clients(weight_type)))
    next_fn = aggregation_process.next_computation(step, parameters,
                                                   inner.client_state_type)
    return measured_process.with_encoders_of(
        inner, aggregation_process.AggregationProcess(
            init_fn, next_fn,
            client_state_initializer=inner.client_state_initializer))


class WeightedRobustFactory(factory.WeightedAggregationFactory):
  """A weighted aggregation, its values clipped or zeroed first."""

  def __init__(self, bounded):
    self._bounded = bounded

  def create(self, value_type, weight_type):
    return self._bounded.create(value_type, weight_type)


class UnweightedRobustFactory(factory.UnweightedAggregationFactory):
  """An unweighted aggregation, its values clipped or zeroed first."""

  def __init__(self, bounded):
    self._bounded = bounded

  def create(self, value_type):
    return self._bounded.create(value_type)


def _wrap(bounded, inner_factory, where):
  if isinstance(inner_factory, factory.WeightedAggregationFactory):
    return WeightedRobustFactory(bounded)
  if isinstance(inner_factory, factory.UnweightedAggregationFactory):
    return UnweightedRobustFactory(bounded)
  raise errors.InvalidTypeError(
      f'{where}: inner_agg_factory must be an UnweightedAggregationFactory '
      f'or a WeightedAggregationFactory, got '
      f'{type(inner_factory).__name__}.')


def clipping_factory(clipping_norm, inner_agg_factory,
                     clipped_count_sum_factory=None):
  """TFF's `clipping_factory`: values projected onto the L2 ball of radius
  `clipping_norm` (a float, or an EstimationProcess adapting it), then
  aggregated by `inner_agg_factory` (weighted or not, as it is)."""
  where = 'clipping_factory'
  _wrap(None, inner_agg_factory, where)  # Checks its kind first.
  bounded = _Bounded(clipping_norm, inner_agg_factory,
                     clipped_count_sum_factory, _make_clip, 'clipp', where)
  return _wrap(bounded, inner_agg_factory, where)


def zeroing_factory(zeroing_norm, inner_agg_factory, norm_order=math.inf,
                    zeroed_count_sum_factory=None):
  """TFF's `zeroing_factory`: values whose `norm_order`-norm (1, 2 or
  infinity) exceeds `zeroing_norm` (a float, or an EstimationProcess)
  replaced by zeros, then aggregated by `inner_agg_factory`."""
  where = 'zeroing_factory'
  _wrap(None, inner_agg_factory, where)
  if isinstance(norm_order, bool) or not isinstance(
      norm_order, numbers.Real) or not (
          norm_order in (1.0, 2.0) or math.isinf(norm_order)):
    raise errors.InvalidValueError(
        f'{where}: norm_order must be 1.0, 2.0 or infinity, got '
        f'{norm_order!r}.')
  bounded = _Bounded(zeroing_norm, inner_agg_factory, zeroed_count_sum_factory,
                     lambda value_type: _make_zero(value_type,
                                                   float(norm_order)),
                     'zero', where)
  return _wrap(bounded, inner_agg_factory, where)
