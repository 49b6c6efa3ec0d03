"""`federated_mean`: CLIENTS float tensors averaged at the server, plainly or
weighted by a scalar per client (recorded as `federated_weighted_mean`)."""

import tensorflow as tf

from canonical.core.intrinsics import checks
from canonical.core.intrinsics import registry
from canonical.core import types as ft


def federated_mean(value, weight=None):
  """Mean over clients, at the server; weighted by a scalar if given.

  The weight may be any float or integer scalar (not uint64). Each client's
  weight is cast to each value tensor's own float dtype before it multiplies
  it; the total weight is summed in the weight's dtype (integers as int64,
  so exactly) and cast to the tensor's dtype for the division.
  """
  value = checks.as_value(MEAN.name, value)
  if weight is None:
    return MEAN.bind([value])
  return WEIGHTED_MEAN.bind([value, checks.as_value(MEAN.name, weight)])


def _average(value):
  checks.built_in_reduction(MEAN.name, value, 'average',
                            lambda dtype: dtype.is_floating)


def _mean_type(value):
  _average(value)
  return ft.server(value.member)


def _is_weight(dtype):
  return (dtype.is_floating or dtype.is_integer) and dtype != tf.uint64


def _weighted_mean_type(value, weight):
  _average(value)
  checks.client_tensors(MEAN.name, weight)
  spec = weight.member
  if not (isinstance(spec, tf.TensorSpec) and spec.shape.rank == 0 and
          _is_weight(spec.dtype)):
    checks.fail(MEAN.name, f'the weight must be a scalar of a float or '
                           f'integer dtype at CLIENTS, got {weight!r}.')
  return ft.server(value.member)


def weight_total_dtype(weight_dtype):
  """The dtype the total weight is summed in: the weight's own float dtype,
  int64 for integer weights (exact; an int32 total could overflow)."""
  return weight_dtype if weight_dtype.is_floating else tf.int64


def _add(x, y):
  return registry.map_structure_pairwise(tf.add, x, y)


def _mean_lowering(total_dtype, weighted):
  """A mean as (sum of weighted values, total weight); `weighted(part)` is a
  client's part as (value times weight, weight)."""

  def lowering(value_spec):
    zeros = tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype),
                                  value_spec)

    def accumulate(acc, part):
      total, weight = weighted(part)
      return _add(acc[0], total), acc[1] + weight

    def report(acc):
      return tf.nest.map_structure(lambda t: t / tf.cast(acc[1], t.dtype),
                                   acc[0])

    return registry.Aggregation(
        lambda: (zeros, tf.zeros([], total_dtype)), accumulate,
        lambda x, y: (_add(x[0], y[0]), x[1] + y[1]), report,
        (value_spec, tf.TensorSpec([], total_dtype)))

  return lowering


def _unweighted_lowering(op, value_spec):
  del op  # A count of clients: exact up to 2**24.
  return _mean_lowering(tf.float32, lambda u: (u, tf.constant(1.0)))(
      value_spec)


def _weighted_lowering(op, value_spec):
  total_dtype = weight_total_dtype(op.inputs[1].member.dtype)

  def weighted(part):  # Each weight is cast to each value tensor's dtype.
    value, weight = part
    return (tf.nest.map_structure(lambda v: v * tf.cast(weight, v.dtype),
                                  value), tf.cast(weight, total_dtype))

  return _mean_lowering(total_dtype, weighted)(value_spec)


def _value_and_weight(op, args):
  del op
  return tuple(args)


MEAN = registry.register(registry.Intrinsic(
    name='federated_mean', function=federated_mean, type_rule=_mean_type,
    placement=registry.Placement.SERVER, role=registry.Role.AGGREGATION,
    at_one_place=registry.first_argument, reference=registry.folded_in_order,
    lowering=_unweighted_lowering))
WEIGHTED_MEAN = registry.register(registry.Intrinsic(
    name='federated_weighted_mean', function=federated_mean,
    type_rule=_weighted_mean_type, placement=registry.Placement.SERVER,
    role=registry.Role.AGGREGATION, at_one_place=_value_and_weight,
    reference=registry.folded_in_order, lowering=_weighted_lowering))
