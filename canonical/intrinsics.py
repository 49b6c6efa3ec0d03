"""The intrinsics, with TensorFlow Federated's names; each checks its types.

Called while tracing a federated computation, each appends one op to the
graph and returns its typed output value.
"""

import numpy as np
import tensorflow as tf

from canonical import computations
from canonical import ir
from canonical import types as ft

AGGREGATIONS = ('federated_sum', 'federated_mean', 'federated_weighted_mean',
                'federated_min', 'federated_max', 'federated_aggregate')


def _fail(name, message):
  raise ir.FederatedError(f'{name} at {ir.user_location()}: {message}')


def _as_value(name, arg):
  """A federated value; a structure of values is zipped."""
  if isinstance(arg, ir.Value):
    return arg
  leaves = tf.nest.flatten(arg)
  if leaves and all(isinstance(leaf, ir.Value) for leaf in leaves):
    return federated_zip(arg)
  _fail(name, f'expected a federated value, got {arg!r}.')


def _expect_placement(name, value, placement):
  if value.placement != placement:
    _fail(name, f'expects a value placed at {placement}, got {value!r}.')


def _expect_tensors(name, value):
  for leaf in tf.nest.flatten(value.member):
    if not isinstance(leaf, tf.TensorSpec):
      _fail(name, f'cannot aggregate {ft.describe(leaf)} in {value!r}: only '
                  'tensors can be aggregated.')


def _expect_member(name, what, actual, expected):
  if not ft.same_member(actual, expected):
    _fail(name, f'{what} has type {ft.describe(actual)}, expected '
                f'{ft.describe(expected)}.')


def federated_broadcast(value):
  """SERVER value -> the same value at every client."""
  name = 'federated_broadcast'
  value = _as_value(name, value)
  _expect_placement(name, value, ft.SERVER)
  return ir.add_op(name, [value], ft.clients(value.member, all_equal=True))


def federated_map(computation, value):
  """Applies a tf_computation pointwise: at each client, or at the server."""
  name = 'federated_map'
  if not isinstance(computation, computations.TFComputation):
    _fail(name, f'expects a tf_computation, got {computation!r}.')
  value = _as_value(name, value)
  if not computation.parameter_specs:
    _fail(name, f'{computation!r} takes no argument; use federated_value.')
  _expect_member(name, f'the argument of {computation.name!r}', value.member,
                 computation.parameter_member())
  result = computation.result_spec
  return ir.add_op(
      name, [value],
      ft.FederatedType(result, value.placement, value.type_signature.all_equal),
      attrs={'computation': computation})


def federated_apply(computation, value):
  """Applies a tf_computation to a SERVER value (a server-side map)."""
  value = _as_value('federated_apply', value)
  _expect_placement('federated_apply', value, ft.SERVER)
  return federated_map(computation, value)


def _client_reduction(name, value):
  value = _as_value(name, value)
  _expect_placement(name, value, ft.CLIENTS)
  _expect_tensors(name, value)
  return value


def federated_sum(value):
  """Sum over clients, at the server."""
  value = _client_reduction('federated_sum', value)
  return ir.add_op('federated_sum', [value], ft.server(value.member))


def federated_min(value):
  """Elementwise minimum over clients, at the server."""
  value = _client_reduction('federated_min', value)
  return ir.add_op('federated_min', [value], ft.server(value.member))


def federated_max(value):
  """Elementwise maximum over clients, at the server."""
  value = _client_reduction('federated_max', value)
  return ir.add_op('federated_max', [value], ft.server(value.member))


def federated_mean(value, weight=None):
  """Mean over clients, at the server; weighted by a float32 scalar if given."""
  name = 'federated_mean'
  value = _client_reduction(name, value)
  for leaf in tf.nest.flatten(value.member):
    if not leaf.dtype.is_floating:
      _fail(name, f'can only average floating point tensors, got '
                  f'{ft.describe(value.member)}.')
  if weight is None:
    return ir.add_op(name, [value], ft.server(value.member))
  weight = _client_reduction(name, weight)
  if weight.member != tf.TensorSpec([], tf.float32):
    _fail(name, f'the weight must be a float32 scalar at CLIENTS, got '
                f'{weight!r}.')
  return ir.add_op('federated_weighted_mean', [value, weight],
                   ft.server(value.member))


def _zero_computation(zero):
  if isinstance(zero, computations.TFComputation):
    if zero.parameter_specs:
      _fail('federated_aggregate', f'zero {zero!r} must take no argument.')
    return zero
  try:
    constants = tf.nest.map_structure(np.asarray, zero)
  except (TypeError, ValueError):
    _fail('federated_aggregate', f'zero must be a tf_computation or a '
                                 f'structure of constants, got {zero!r}.')
  return computations.TFComputation(
      lambda: tf.nest.map_structure(tf.constant, constants), (), name='zero')


def federated_aggregate(value, zero, accumulate, merge, report):
  """The general aggregation: fold clients into accumulators, merge, report.

  `accumulate(A, value) -> A`, `merge(A, A) -> A` and `report(A) -> R` are
  tf_computations; `zero` is one with no argument, or constants. The
  accumulator type is `accumulate`'s declared first parameter, so it may have
  unknown dimensions (e.g. a growing stack) that `zero` specializes.
  """
  name = 'federated_aggregate'
  value = _as_value(name, value)
  _expect_placement(name, value, ft.CLIENTS)
  zero = _zero_computation(zero)
  for role, comp, arity in (('accumulate', accumulate, 2), ('merge', merge, 2),
                            ('report', report, 1)):
    if not isinstance(comp, computations.TFComputation):
      _fail(name, f'{role} must be a tf_computation, got {comp!r}.')
    if len(comp.parameter_specs) != arity:
      _fail(name, f'{role} {comp!r} must take {arity} argument(s).')
  accumulator = accumulate.parameter_specs[0]
  _expect_member(name, 'zero', zero.result_spec, accumulator)
  _expect_member(name, f'the value aggregated by {accumulate.name!r}',
                 value.member, accumulate.parameter_specs[1])
  _expect_member(name, f'the result of accumulate {accumulate.name!r}',
                 accumulate.result_spec, accumulator)
  for spec in merge.parameter_specs:
    _expect_member(name, f'a parameter of merge {merge.name!r}', accumulator,
                   spec)
  _expect_member(name, f'the result of merge {merge.name!r}', merge.result_spec,
                 accumulator)
  _expect_member(name, f'the parameter of report {report.name!r}', accumulator,
                 report.parameter_specs[0])
  return ir.add_op(
      name, [value], ft.server(report.result_spec),
      attrs={'zero': zero, 'accumulate': accumulate, 'merge': merge,
             'report': report, 'accumulator_spec': accumulator})


def federated_zip(values):
  """A structure of values with one placement -> one value of that structure."""
  name = 'federated_zip'
  leaves = tf.nest.flatten(values)
  if not leaves or not all(isinstance(v, ir.Value) for v in leaves):
    _fail(name, f'expects a non-empty structure of federated values, got '
                f'{values!r}.')
  placements = {v.placement for v in leaves}
  if len(placements) != 1:
    _fail(name, f'cannot zip values placed at different places: {values!r}.')
  member = tf.nest.map_structure(lambda v: v.member, values)
  all_equal = all(v.type_signature.all_equal for v in leaves)
  return ir.add_op(name, leaves,
                   ft.FederatedType(member, placements.pop(), all_equal),
                   attrs={'structure': tf.nest.map_structure(lambda _: None,
                                                             values)})


def federated_value(value, placement):
  """A constant (or a no-argument tf_computation's result) at a placement."""
  if isinstance(value, computations.TFComputation):
    computation = value
  else:
    constants = tf.nest.map_structure(np.asarray, value)
    computation = computations.TFComputation(
        lambda: tf.nest.map_structure(tf.constant, constants), (),
        name='constant')
  return ir.add_op('federated_value', [],
                   ft.FederatedType(computation.result_spec, placement, True),
                   attrs={'computation': computation})


def select(value, key):
  """One part of a structured federated value (`value[key]`)."""
  member = value.member
  try:
    part = member[key]
  except (KeyError, IndexError, TypeError):
    _fail('select', f'{value!r} has no element {key!r}.')
  return ir.add_op('select', [value], ft.FederatedType(
      part, value.placement, value.type_signature.all_equal),
                   attrs={'key': key})
