"""TensorFlow Federated's `ModularClippingSumFactory`: integers wrapped into
one range before and after an inner sum.

Each client maps every entry x into [lower, upper) by x - k (upper - lower)
for the integer k that lands it there; the inner factory (`SumFactory` by
default) sums, and the server wraps the sum into the same range. Summing
mod (upper - lower) commutes with the wrapping, so a secure modular sum of
that modulus inside makes the server-side wrap a no-op; distributed DP
nests two (signed, then [0, 2**bits)) to put a two's complement around the
secure sum. With `estimate_stddev`, the measurements also hold the standard
deviation of the wrapped sum, estimated as a wrapped normal's (Mardia's
circular statistic: s = width / (2 pi) * sqrt(-2 log R)). State: the inner
process's; measurements `OrderedDict(modclip=<inner's>[, estimated_stddev])`.
"""

import collections
import math
import warnings

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
from canonical.templates import measured

_INT32_MAX = int(np.iinfo(np.int32).max)
_INT32_MIN = int(np.iinfo(np.int32).min)


def modular_clip_by_value(value, clip_range_lower, clip_range_upper):
  """Every entry of `value` wrapped into [lower, upper)."""

  def wrap(x):
    x = tf.convert_to_tensor(x)
    lower = tf.cast(clip_range_lower, x.dtype)
    width = tf.cast(clip_range_upper, x.dtype) - lower
    if x.dtype.is_integer:
      return tf.math.floormod(x - lower, width) + lower
    return x - tf.floor((x - lower) / width) * width

  return tf.nest.map_structure(wrap, value)


def estimate_wrapped_gaussian_stddev(values, clip_lower, clip_upper):
  """The stddev of `values` taken as a wrapped normal over [lower, upper)
  centred in it: the circle's mean resultant length R gives
  width / (2 pi) * sqrt(-2 log R)."""
  flat = tf.concat([tf.reshape(tf.cast(x, tf.float64), [-1])
                    for x in tf.nest.flatten(values)], 0)
  width = tf.cast(clip_upper, tf.float64) - tf.cast(clip_lower, tf.float64)
  angles = flat / width * (2 * math.pi)
  resultant = tf.sqrt(tf.square(tf.reduce_mean(tf.cos(angles))) +
                      tf.square(tf.reduce_mean(tf.sin(angles))))
  stddev = tf.sqrt(-2.0 * tf.math.log(resultant)) * width / (2 * math.pi)
  return tf.cast(stddev, tf.float32)


class ModularClippingSumFactory(factory.UnweightedAggregationFactory):
  """TFF's `ModularClippingSumFactory(clip_range_lower, clip_range_upper,
  inner_agg_factory=None, estimate_stddev=False)`: Python ints within int32,
  the upper bound exclusive; integer values only."""

  def __init__(self, clip_range_lower, clip_range_upper,
               inner_agg_factory=None, estimate_stddev=False):
    where = 'ModularClippingSumFactory'
    if inner_agg_factory is None:
      inner_agg_factory = sum_factory.SumFactory()
    self._inner = factory.check_factory(
        inner_agg_factory, (factory.UnweightedAggregationFactory,), where,
        'inner_agg_factory')
    for name, bound in (('clip_range_lower', clip_range_lower),
                        ('clip_range_upper', clip_range_upper)):
      if isinstance(bound, bool) or not isinstance(bound, int):
        raise errors.InvalidTypeError(
            f'{where}: {name} must be a Python int, got {bound!r}.')
    if clip_range_lower > clip_range_upper:
      raise errors.InvalidValueError(
          f'{where}: clip_range_lower ({clip_range_lower}) must not be larger '
          f'than clip_range_upper ({clip_range_upper}).')
    if (clip_range_upper > _INT32_MAX or clip_range_lower < _INT32_MIN or
        clip_range_upper - clip_range_lower > _INT32_MAX):
      raise errors.InvalidValueError(
          f'{where}: the range [{clip_range_lower}, {clip_range_upper}) must '
          'be within int32, its width too.')
    if not isinstance(estimate_stddev, bool):
      raise errors.InvalidTypeError(
          f'{where}: estimate_stddev must be a bool, got '
          f'{estimate_stddev!r}.')
    self._lower, self._upper = clip_range_lower, clip_range_upper
    self._estimate_stddev = estimate_stddev

  def create(self, value_type):
    where = 'ModularClippingSumFactory.create'
    value_type = factory.integer_value_type(value_type, where)
    size = sum(s.shape.num_elements() for s in tf.nest.flatten(value_type))
    if self._estimate_stddev and size <= 1:
      raise errors.InvalidValueError(
          f'{where}: estimate_stddev needs more than one element, '
          f'{ft.describe(value_type)} has {size}.')
    if self._estimate_stddev and size <= 100:
      warnings.warn(f'{where}: the stddev estimated from {size} elements '
                    'is noisy; it is meant for more than 100.')
    lower, upper = self._lower, self._upper
    wrap = specs.tf_computation(
        lambda value: modular_clip_by_value(value, lower, upper), value_type)
    estimate = specs.tf_computation(
        lambda value: estimate_wrapped_gaussian_stddev(value, lower, upper),
        value_type)
    inner = self._inner.create(value_type)
    estimate_stddev = self._estimate_stddev

    @computations.federated_computation(inner.initialize.type_signature.result,
                                        ft.clients(value_type))
    def next_fn(state, value):
      output = inner.next(state, intrinsics.federated_map(wrap, value))
      result = intrinsics.federated_map(wrap, output.result)
      measurements = collections.OrderedDict(modclip=output.measurements)
      if estimate_stddev:
        measurements['estimated_stddev'] = intrinsics.federated_map(
            estimate, result)
      return measured.MeasuredProcessOutput(
          output.state, result, intrinsics.federated_zip(measurements))

    return aggregation_process.AggregationProcess(inner.initialize, next_fn)
