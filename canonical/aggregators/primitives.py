"""TensorFlow Federated's aggregation primitives: `secure_quantized_sum` (and
`federated_sample`, in `sampling`), called while tracing a federated
computation.

`secure_quantized_sum(client_value, lower_bound, upper_bound)` sums
through `federated_secure_sum_bitwidth` with 32 bits per value:

| dtype   | at each client                  | at the server, n clients      |
| int32   | clip, minus lower               | plus n * lower                |
| int64   | clip, minus lower, floor-divided | times s, plus n * lower      |
|         | by s = span // (2**32 - 1) + 1  | (exact when s is 1)           |
| float32 | clip, 32-bit levels over        | levels back to values         |
| float64 | [lower, upper] (`SecureSumFactory`'s quantization)              |

Bounds are constants (Python numbers take the value's dtype) or SERVER
values of the value's dtype; one scalar pair for every tensor, or a pair of
structures like the value. The number of clients is a secure sum of ones.
"""

import numbers

import numpy as np
import tensorflow as tf

from canonical.aggregators import secure
from canonical.core import intrinsics
from canonical.core import ir
from canonical.core import naming
from canonical.core import specs
from canonical.core import types as ft
from canonical import errors

_DTYPES = (tf.int32, tf.int64, tf.float32, tf.float64)
_BITWIDTH = 32
COUNT_SPEC = tf.TensorSpec([], tf.int32)

_WHERE = 'secure_quantized_sum'


def _fail(message):
  raise errors.FederatedError(
      f'{_WHERE} at {naming.user_location()}: {message}')


def _int64_scale(lower, upper):
  """How many integers one level spans: 1 while the range fits 32 bits."""
  return tf.math.floordiv(upper - lower, secure.SECAGG_MAX) + 1


def _shift_at_client(x, lower, upper):
  """One tensor as integers in [0, 2**32 - 1]."""
  in_order = tf.debugging.assert_less_equal(
      lower, upper, message=f'{_WHERE}: lower_bound above upper_bound')
  with tf.control_dependencies([in_order]):
    x = tf.identity(x)
  if x.dtype == tf.int32:
    return (tf.cast(tf.clip_by_value(x, lower, upper), tf.int64) -
            tf.cast(lower, tf.int64))
  if x.dtype == tf.int64:
    return tf.math.floordiv(tf.clip_by_value(x, lower, upper) - lower,
                            _int64_scale(lower, upper))
  return secure.quantize_float(x, lower, upper)


def _shift_at_server(total, lower, upper, count, dtype):
  """The sum of `count` shifted tensors back in the value's terms."""
  if dtype == tf.int32:
    return tf.cast(total + tf.cast(count, tf.int64) *
                   tf.cast(lower, tf.int64), dtype)
  if dtype == tf.int64:
    return total * _int64_scale(lower, upper) + tf.cast(count,
                                                        tf.int64) * lower
  return secure.dequantize_float_sum(total, lower, upper, count, dtype)


def _bound_constant(bound, dtype, what):
  if isinstance(bound, (bool, np.bool_)) or not isinstance(
      bound, (numbers.Real, np.integer, np.floating)):
    _fail(f'{what} must be a number or a SERVER value, got '
          f'{naming.describe_object(bound)}.')
  if isinstance(bound, (np.integer, np.floating)) and (
      tf.as_dtype(bound.dtype) != dtype):
    _fail(f'{what} {bound!r} is {bound.dtype}, the value {dtype.name}.')
  if dtype.is_integer and not isinstance(bound, (int, np.integer)):
    _fail(f'{what} {bound!r} must be an integer for {dtype.name} values.')
  return bound


def _placed_bounds(value_member, lower, upper):
  """The bounds as one SERVER value each, scalars or structures like the
  value, of the value's dtypes."""
  lower_placed = isinstance(lower, ir.Value)
  if lower_placed != isinstance(upper, ir.Value):
    _fail('lower_bound and upper_bound must both be constants or both '
          f'SERVER values, got {naming.describe_object(lower)} and '
          f'{naming.describe_object(upper)}.')
  flat_value = tf.nest.flatten(value_member)
  if not lower_placed:
    per_leaf = tf.nest.is_nested(lower) or tf.nest.is_nested(upper)
    if per_leaf:
      for bound, what in ((lower, 'lower_bound'), (upper, 'upper_bound')):
        try:
          tf.nest.assert_same_structure(value_member, bound,
                                        check_types=False)
        except (TypeError, ValueError):
          _fail(f'{what} must be a number or a structure like the value '
                f'{ft.describe(value_member)}, got '
                f'{naming.describe_object(bound)}.')
      pairs = list(zip(tf.nest.flatten(lower), tf.nest.flatten(upper)))
    else:
      dtypes = {s.dtype for s in flat_value}
      if len(dtypes) != 1:
        _fail('scalar bounds need one dtype for every tensor of the value, '
              f'got {ft.describe(value_member)}: give bounds like the value.')
      pairs = [(lower, upper)]
    checked = []
    for (lo, hi), spec in zip(pairs, flat_value):
      lo = _bound_constant(lo, spec.dtype, 'lower_bound')
      hi = _bound_constant(hi, spec.dtype, 'upper_bound')
      if lo > hi:
        _fail(f'lower_bound {lo!r} is above upper_bound {hi!r}.')
      checked.append((lo, hi))
    dtypes = [s.dtype for s in flat_value][:len(checked)]

    def constants(index):
      flat = [tf.constant(pair[index], dtype)
              for pair, dtype in zip(checked, dtypes)]
      return tf.nest.pack_sequence_as(value_member, flat) if per_leaf else (
          flat[0])

    lower = intrinsics.federated_eval(
        specs.tf_computation(lambda: constants(0)), ft.SERVER)
    upper = intrinsics.federated_eval(
        specs.tf_computation(lambda: constants(1)), ft.SERVER)
  for bound, what in ((lower, 'lower_bound'), (upper, 'upper_bound')):
    if bound.placement != ft.SERVER:
      _fail(f'{what} must be placed at SERVER, got {bound.type_signature}.')
  if not ft.same_member(lower.member, upper.member):
    _fail(f'lower_bound and upper_bound must have one type, got '
          f'{lower.type_signature} and {upper.type_signature}.')
  bound_leaves = tf.nest.flatten(lower.member)
  if tf.nest.is_nested(lower.member):
    try:
      tf.nest.assert_same_structure(value_member, lower.member,
                                    check_types=False)
    except (TypeError, ValueError):
      bound_leaves = None
    if bound_leaves is None or any(
        b.dtype != v.dtype or b.shape.rank != 0
        for b, v in zip(bound_leaves, flat_value)):
      _fail(f'structured bounds must be scalars like the value '
            f'{ft.describe(value_member)} (same dtypes), got '
            f'{ft.describe(lower.member)}.')
  else:
    bound = bound_leaves[0]
    if bound.shape.rank != 0 or any(v.dtype != bound.dtype
                                    for v in flat_value):
      _fail(f'a scalar bound must have the dtype of every tensor of the '
            f'value {ft.describe(value_member)}, got '
            f'{ft.describe(lower.member)}.')
  return lower, upper


def _per_leaf(fn, value, lower, upper, *rest):
  if tf.nest.is_nested(lower):
    return tf.nest.map_structure(lambda v, lo, hi, *r: fn(v, lo, hi, *r),
                                 value, lower, upper, *rest)
  return tf.nest.map_structure(lambda v, *r: fn(v, lower, upper, *r),
                               value, *rest)


def secure_quantized_sum(client_value, lower_bound, upper_bound):
  """The sum at SERVER of `client_value` (CLIENTS; int32, int64, float32 or
  float64 tensors) clipped to [lower_bound, upper_bound], through 32-bit
  secure sums: exact for int32 (and int64 over a range below 2**32), else
  within the quantization step (upper - lower) / (2**32 - 1) per client."""
  if not isinstance(client_value, ir.Value):
    leaves = tf.nest.flatten(client_value)
    if not leaves or not all(isinstance(v, ir.Value) for v in leaves):
      _fail(f'client_value must be a value placed at CLIENTS, got '
            f'{naming.describe_object(client_value)}.')
    client_value = intrinsics.federated_zip(client_value)
  if client_value.placement != ft.CLIENTS:
    _fail(f'client_value must be placed at CLIENTS, got '
          f'{client_value.type_signature}.')
  member = client_value.member
  for spec in tf.nest.flatten(member):
    if not isinstance(spec, tf.TensorSpec) or spec.dtype not in _DTYPES:
      _fail('client_value must hold int32, int64, float32 or float64 '
            f'tensors, got {ft.describe(member)}.')
  lower, upper = _placed_bounds(member, lower_bound, upper_bound)
  bound_member = lower.member
  value_type = specs.plain(member)
  shift = specs.tf_computation(
      lambda value, lo, hi: _per_leaf(_shift_at_client, value, lo, hi),
      value_type, bound_member, bound_member)
  levels_type = specs.plain(shift.result_spec)
  dtypes = tf.nest.map_structure(lambda s: s.dtype, value_type)
  unshift = specs.tf_computation(
      lambda total, lo, hi, count: _per_leaf(
          lambda t, l, h, d: _shift_at_server(t, l, h, count, d),
          total, lo, hi, dtypes),
      levels_type, bound_member, bound_member, COUNT_SPEC)
  levels = intrinsics.federated_map(shift, (
      client_value, intrinsics.federated_broadcast(lower),
      intrinsics.federated_broadcast(upper)))
  count = intrinsics.federated_secure_sum_bitwidth(
      intrinsics.federated_value(1, ft.CLIENTS), 1)
  total = intrinsics.federated_secure_sum_bitwidth(levels, _BITWIDTH)
  return intrinsics.federated_map(unshift, (total, lower, upper, count))

