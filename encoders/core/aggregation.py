"""The four ways state update tensors combine across clients, as zero/accumulate/merge.

These match the canonical form's aggregation pieces, so a runtime can fold state
updates into its accumulator. STACK keeps one row per client (in the order the
aggregation tree happened to combine them, so consumers must not rely on it).
"""

import tensorflow as tf

from encoders import errors
from encoders.core.encoding_stage import StateAggregationMode


def zero(mode, spec):
  """The identity element of `mode` for tensors like `spec`."""
  _check_mode(mode)
  shape, dtype = spec.shape, spec.dtype
  if mode == StateAggregationMode.SUM:
    return tf.zeros(shape, dtype)
  if mode == StateAggregationMode.STACK:
    return tf.zeros([0] + shape.as_list(), dtype)
  if dtype.is_floating:
    extreme = float('inf')
  else:
    extreme = dtype.max
  if mode == StateAggregationMode.MIN:
    return tf.fill(shape, tf.constant(extreme, dtype))
  return tf.fill(shape, tf.constant(-extreme if dtype.is_floating else dtype.min,
                                    dtype))


def accumulate(mode, accumulator, value):
  """Folds one client's `value` into `accumulator`."""
  if mode == StateAggregationMode.STACK:
    return tf.concat([accumulator, value[tf.newaxis]], axis=0)
  return merge(mode, accumulator, value)


def merge(mode, a, b):
  """Combines two accumulators."""
  _check_mode(mode)
  if mode == StateAggregationMode.SUM:
    return a + b
  if mode == StateAggregationMode.MIN:
    return tf.minimum(a, b)
  if mode == StateAggregationMode.MAX:
    return tf.maximum(a, b)
  return tf.concat([a, b], axis=0)


def _check_mode(mode):
  if not isinstance(mode, StateAggregationMode):
    raise errors.InvalidTypeError(
        f'Unknown state aggregation mode {mode!r}; expected a '
        'StateAggregationMode (SUM, MIN, MAX or STACK).')
