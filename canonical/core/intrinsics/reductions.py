"""`federated_sum`, `federated_min` and `federated_max`: CLIENTS tensors
reduced elementwise, at the server."""

import tensorflow as tf

from canonical.core.intrinsics import checks
from canonical.core.intrinsics import registry
from canonical.core import types as ft


def federated_sum(value):
  """Sum over clients, at the server."""
  return SUM.bind([checks.as_value(SUM.name, value)])


def federated_min(value):
  """Elementwise minimum over clients, at the server."""
  return MIN.bind([checks.as_value(MIN.name, value)])


def federated_max(value):
  """Elementwise maximum over clients, at the server."""
  return MAX.bind([checks.as_value(MAX.name, value)])


def _is_number(dtype):
  return (dtype.is_floating or dtype.is_integer or dtype.is_complex) and (
      not dtype.is_quantized)


def _is_ordered(dtype):
  return (dtype.is_floating or dtype.is_integer) and not dtype.is_quantized


def _type_rule(name, what, dtype_ok):

  def type_rule(value):
    checks.built_in_reduction(name, value, what, dtype_ok)
    return ft.server(value.member)

  return type_rule


def _zeros(value_spec):
  return tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype),
                               value_spec)


def _add(x, y):
  return registry.map_structure_pairwise(tf.add, x, y)


def _identity(x):
  return x


def _sum_lowering(op, value_spec):
  del op
  return registry.Aggregation(lambda: _zeros(value_spec), _add, _add,
                              _identity, value_spec)


def _extreme(spec, largest):
  dtype = spec.dtype
  if dtype.is_floating:
    value = float('inf') if largest else float('-inf')
  else:
    value = dtype.max if largest else dtype.min
  return tf.fill(spec.shape, tf.constant(value, dtype))


def _extreme_lowering(is_min):
  reduce = tf.minimum if is_min else tf.maximum

  def lowering(op, value_spec):
    del op

    def fold(x, y):
      return registry.map_structure_pairwise(reduce, x, y)

    return registry.Aggregation(  # The zero of a minimum is the largest value.
        lambda: tf.nest.map_structure(lambda s: _extreme(s, is_min),
                                      value_spec),
        fold, fold, _identity, value_spec)

  return lowering


def _spec(name, function, what, dtype_ok, lowering):
  return registry.Intrinsic(
      name=name, function=function,
      type_rule=_type_rule(name, what, dtype_ok),
      placement=registry.Placement.SERVER, role=registry.Role.AGGREGATION,
      at_one_place=registry.first_argument,
      reference=registry.folded_in_order, lowering=lowering)


SUM = registry.register(_spec('federated_sum', federated_sum, 'sum',
                              _is_number, _sum_lowering))
MIN = registry.register(_spec('federated_min', federated_min,
                              'take the minimum of', _is_ordered,
                              _extreme_lowering(is_min=True)))
MAX = registry.register(_spec('federated_max', federated_max,
                              'take the maximum of', _is_ordered,
                              _extreme_lowering(is_min=False)))
