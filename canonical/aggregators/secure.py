"""TensorFlow Federated's `SecureSumFactory`: a sum through
`federated_secure_sum_bitwidth`, no aggregator seeing a client's value.

Values are clipped to [lower, upper] first. Integers are shifted by -lower
and summed with the fewest bits that hold upper - lower; floats are
quantized to 32-bit integers over [lower, upper] (deterministic rounding,
the shift done in integer space so a sum of zeros decodes to exactly zero)
and dequantized once after the sum. The bounds are constants, or (floats
only) `EstimationProcess`es adapted each round from every client's largest
absolute value (one process: [-C, C]) or its largest and smallest values
(two processes). Measurements, securely summed as in TFF:
`OrderedDict(secure_upper_clipped_count, secure_lower_clipped_count,
secure_upper_threshold, secure_lower_threshold)`.
"""

import collections
import math
import numbers

import numpy as np
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

# Floats are quantized to integers in [0, SECAGG_MAX], summed with 32 bits.
SECAGG_MAX = 2**32 - 1
_FLOAT_BITS = 32
COUNT_SPEC = tf.TensorSpec([], tf.int32)
NORM_SPEC = tf.TensorSpec([], tf.float32)


def _is_int(value):
  return isinstance(value, (int, np.integer)) and not isinstance(
      value, (bool, np.bool_))


def _is_float(value):
  return isinstance(value, (float, np.floating))


def _largest(value):
  return tf.reduce_max(tf.stack([tf.reduce_max(x)
                                 for x in tf.nest.flatten(value)]))


def _smallest(value):
  return tf.reduce_min(tf.stack([tf.reduce_min(x)
                                 for x in tf.nest.flatten(value)]))


def _quantization_scale(lower, upper):
  return tf.math.divide_no_nan(tf.constant(SECAGG_MAX, tf.float64),
                               tf.cast(upper - lower, tf.float64))


def _lower_in_levels(lower, scale):
  return tf.saturate_cast(tf.round(tf.cast(lower, tf.float64) * scale),
                          tf.int64)


def quantize_float(x, lower, upper):
  """A float tensor as integers in [0, 2**32 - 1] over [lower, upper]."""
  scale = _quantization_scale(lower, upper)
  clipped = tf.clip_by_value(x, lower, upper)
  levels = tf.saturate_cast(tf.round(tf.cast(clipped, tf.float64) * scale),
                            tf.int64)
  return tf.clip_by_value(levels - _lower_in_levels(lower, scale),
                          tf.constant(0, tf.int64),
                          tf.constant(SECAGG_MAX, tf.int64))


def dequantize_float_sum(total, lower, upper, count, dtype):
  """The float sum of `count` quantized values summing to `total`."""
  scale = _quantization_scale(lower, upper)
  total = total + _lower_in_levels(lower, scale) * tf.cast(count, tf.int64)
  value = tf.cast(total, tf.float64) * (
      tf.cast(upper - lower, tf.float64) / SECAGG_MAX)
  # Equal bounds make the scale 0 (every level is 0): shift here instead.
  at_bound = value + tf.cast(count, tf.float64) * tf.cast(lower, tf.float64)
  value = tf.where(tf.equal(lower, upper), at_bound, value)
  return tf.cast(value, dtype)


class SecureSumFactory(factory.UnweightedAggregationFactory):
  """TFF's `SecureSumFactory(upper_bound_threshold,
  lower_bound_threshold=None)`: ints for integer values, floats or
  EstimationProcesses for float values; without a lower bound, the upper
  bound bounds the absolute value."""

  def __init__(self, upper_bound_threshold, lower_bound_threshold=None):
    where = 'SecureSumFactory'
    upper, lower = upper_bound_threshold, lower_bound_threshold
    kinds = (numbers.Real, np.integer, np.floating,
             estimation_process.EstimationProcess)
    if isinstance(upper, bool) or not isinstance(upper, kinds):
      raise errors.InvalidTypeError(
          f'{where}: upper_bound_threshold must be an int, a float or an '
          f'EstimationProcess, got {type(upper).__name__}.')
    if lower is not None and not _same_kind(upper, lower):
      raise errors.InvalidTypeError(
          f'{where}: upper_bound_threshold and lower_bound_threshold must be '
          f'of one kind, got {type(upper).__name__} and '
          f'{type(lower).__name__}.')
    self._processes = None
    if isinstance(upper, estimation_process.EstimationProcess):
      self._integer = False
      estimation_process.check_scalar_estimator(
          upper, f'{where}: upper_bound_threshold', tf.float32)
      if lower is not None:
        estimation_process.check_scalar_estimator(
            lower, f'{where}: lower_bound_threshold', tf.float32)
      self._processes = (upper, lower)
    else:
      self._integer = _is_int(upper)
      if lower is None:
        if upper <= 0:
          raise errors.InvalidValueError(
              f'{where}: upper_bound_threshold alone bounds the absolute '
              f'value, so it must be positive, got {upper!r}.')
        lower = -upper
      elif upper <= lower:
        raise errors.InvalidValueError(
            f'{where}: upper_bound_threshold ({upper!r}) must be larger '
            f'than lower_bound_threshold ({lower!r}).')
      self._bounds = (upper, lower)
      if self._integer:
        self._bitwidth = max(1, math.ceil(math.log2(int(upper) - int(lower)
                                                    + 1)))

  def create(self, value_type):
    where = 'SecureSumFactory.create'
    value_type = factory.value_type_of(value_type, where)
    dtypes = {s.dtype for s in tf.nest.flatten(value_type)}
    if len(dtypes) != 1:
      raise errors.InvalidTypeError(
          f'{where}: every tensor of value_type must have one dtype, got '
          f'{ft.describe(value_type)}.')
    dtype = dtypes.pop()
    if self._integer and not dtype.is_integer:
      raise errors.InvalidTypeError(
          f'{where}: integer bounds sum integer values, got '
          f'{ft.describe(value_type)}.')
    if not self._integer and not dtype.is_floating:
      raise errors.InvalidTypeError(
          f'{where}: float bounds sum float values, got '
          f'{ft.describe(value_type)}.')
    bound_spec = tf.TensorSpec([], dtype)
    init_fn = self._init_fn()
    largest = specs.tf_computation(_largest, value_type)
    smallest = specs.tf_computation(_smallest, value_type)
    get_bounds = self._bounds_fn(init_fn.type_signature.result, dtype)
    is_above = specs.tf_computation(
        lambda bound, x: tf.cast(bound < x, tf.int32), bound_spec, bound_spec)
    is_below = specs.tf_computation(
        lambda bound, x: tf.cast(bound > x, tf.int32), bound_spec, bound_spec)
    update_state = self._update_fn()
    sum_securely = (self._integer_sum if self._integer else
                    self._float_sum)(value_type, bound_spec)

    @computations.federated_computation(init_fn.type_signature.result,
                                        ft.clients(value_type))
    def next_fn(state, value):
      value_max = intrinsics.federated_map(largest, value)
      value_min = intrinsics.federated_map(smallest, value)
      upper, lower = get_bounds(state)
      new_state = update_state(state, value_min, value_max)
      total = sum_securely(value, upper, lower)
      above = intrinsics.federated_map(
          is_above, (intrinsics.federated_broadcast(upper), value_max))
      below = intrinsics.federated_map(
          is_below, (intrinsics.federated_broadcast(lower), value_min))
      measurements = collections.OrderedDict(
          secure_upper_clipped_count=(
              intrinsics.federated_secure_sum_bitwidth(above, 1)),
          secure_lower_clipped_count=(
              intrinsics.federated_secure_sum_bitwidth(below, 1)),
          secure_upper_threshold=upper,
          secure_lower_threshold=lower)
      return measured.MeasuredProcessOutput(
          new_state, total, intrinsics.federated_zip(measurements))

    return aggregation_process.AggregationProcess(init_fn, next_fn)

  def _init_fn(self):
    if self._processes is None:
      return computations.federated_computation(sum_factory.empty_at_server)
    upper, lower = self._processes
    if lower is None:
      return upper.initialize

    @computations.federated_computation()
    def init_fn():
      return intrinsics.federated_zip((upper.initialize(),
                                       lower.initialize()))

    return init_fn

  def _bounds_fn(self, state_type, dtype):
    """`get_bounds(state) -> (upper, lower)` at SERVER, of `dtype`."""
    if self._processes is None:
      upper, lower = self._bounds
      constants = specs.tf_computation(
          lambda: (tf.constant(upper, dtype), tf.constant(lower, dtype)))
      return lambda state: tuple(
          intrinsics.federated_eval(constants, ft.SERVER))
    del state_type
    cast = specs.tf_computation(lambda x: tf.cast(x, dtype), NORM_SPEC)
    negate = specs.tf_computation(lambda x: x * -1.0,
                                  tf.TensorSpec([], dtype))
    upper_process, lower_process = self._processes
    if lower_process is None:

      def get_bounds(state):
        upper = intrinsics.federated_map(cast, upper_process.report(state))
        return upper, intrinsics.federated_map(negate, upper)

      return get_bounds

    def get_two_bounds(state):
      return (intrinsics.federated_map(cast, upper_process.report(state[0])),
              intrinsics.federated_map(cast, lower_process.report(state[1])))

    return get_two_bounds

  def _update_fn(self):
    """`update(state, value_min, value_max)`: the new state at SERVER."""
    if self._processes is None:
      return lambda state, value_min, value_max: state
    upper_process, lower_process = self._processes
    if lower_process is None:

      def update(state, value_min, value_max):
        largest_abs = intrinsics.federated_map(
            computations.tf_computation(
                lambda a, b: tf.cast(tf.maximum(tf.abs(a), tf.abs(b)),
                                     tf.float32)), (value_min, value_max))
        return upper_process.next(state, largest_abs)

      return update
    as_norm = computations.tf_computation(lambda x: tf.cast(x, tf.float32))

    def update_two(state, value_min, value_max):
      return intrinsics.federated_zip((
          upper_process.next(state[0],
                             intrinsics.federated_map(as_norm, value_max)),
          lower_process.next(state[1],
                             intrinsics.federated_map(as_norm, value_min))))

    return update_two

  def _integer_sum(self, value_type, bound_spec):
    """Clip to [lower, upper], shift by -lower, sum with the bitwidth of the
    range, shift back by lower per client."""
    shift = specs.tf_computation(
        lambda value, upper, lower: tf.nest.map_structure(
            lambda v: tf.clip_by_value(v, lower, upper) - lower, value),
        value_type, bound_spec, bound_spec)
    unshift = specs.tf_computation(
        lambda total, lower, count: tf.nest.map_structure(
            lambda v: v + lower * tf.cast(count, lower.dtype), total),
        value_type, bound_spec, COUNT_SPEC)
    bitwidth = self._bitwidth

    def sum_securely(value, upper, lower):
      shifted = intrinsics.federated_map(shift, (
          value, intrinsics.federated_broadcast(upper),
          intrinsics.federated_broadcast(lower)))
      total = intrinsics.federated_secure_sum_bitwidth(shifted, bitwidth)
      count = intrinsics.federated_secure_sum_bitwidth(_ones(), 1)
      return intrinsics.federated_map(unshift, (total, lower, count))

    return sum_securely

  def _float_sum(self, value_type, bound_spec):
    """Quantize to 32-bit levels over [lower, upper], sum, dequantize."""
    quantize = specs.tf_computation(
        lambda value, lower, upper: tf.nest.map_structure(
            lambda v: quantize_float(v, lower, upper), value),
        value_type, bound_spec, bound_spec)
    levels_type = specs.plain(quantize.result_spec)
    dequantize = specs.tf_computation(
        lambda total, lower, upper, count: tf.nest.map_structure(
            lambda t, s: dequantize_float_sum(t, lower, upper, count, s.dtype),
            total, value_type),
        levels_type, bound_spec, bound_spec, COUNT_SPEC)

    def sum_securely(value, upper, lower):
      levels = intrinsics.federated_map(quantize, (
          value, intrinsics.federated_broadcast(lower),
          intrinsics.federated_broadcast(upper)))
      count = intrinsics.federated_secure_sum_bitwidth(_ones(), 1)
      total = intrinsics.federated_secure_sum_bitwidth(levels, _FLOAT_BITS)
      return intrinsics.federated_map(dequantize,
                                      (total, lower, upper, count))

    return sum_securely


def _ones():
  return intrinsics.federated_value(1, ft.CLIENTS)


def _same_kind(upper, lower):
  if isinstance(upper, estimation_process.EstimationProcess):
    return isinstance(lower, estimation_process.EstimationProcess)
  if _is_int(upper):
    return _is_int(lower)
  return _is_float(lower) or (isinstance(lower, numbers.Real) and
                              not _is_int(lower) and
                              not isinstance(lower, bool))
