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
    return _zip(name, arg)
  _fail(name, f'expected a federated value, got {arg!r}.')


_NOT_AT_SERVER = ('client values reach the server only through an aggregation '
                  '(federated_sum, federated_mean, federated_aggregate, ...).')
_NOT_AT_CLIENTS = ('it reduces values placed at CLIENTS; use federated_map / '
                   'federated_apply on a SERVER value instead.')


def _expect_placement(name, value, placement):
  if value.placement != placement:
    hint = _NOT_AT_SERVER if placement == ft.SERVER else _NOT_AT_CLIENTS
    _fail(name, f'expects a value placed at {placement}, got {value!r}: '
                f'{hint}')


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
  return _map('federated_map', computation, value)


def federated_apply(computation, value):
  """Applies a tf_computation to a SERVER value (a server-side map)."""
  value = _as_value('federated_apply', value)
  _expect_placement('federated_apply', value, ft.SERVER)
  return _map('federated_apply', computation, value)


def _map(name, computation, value):
  if not isinstance(computation, computations.TFComputation):
    _fail(name, f'expects a tf_computation, got {computation!r}.')
  value = _as_value(name, value)
  if not computation.parameter_specs:
    _fail(name, f'{computation!r} takes no argument; use federated_value.')
  _expect_member(name, f'the argument of {computation.name!r}', value.member,
                 computation.parameter_member())
  result = _result_spec(name, computation)
  return ir.add_op(
      name, [value],
      ft.FederatedType(result, value.placement, value.type_signature.all_equal),
      attrs={'computation': computation})


def _result_spec(name, computation):
  """The computation's result type; a trace error names the intrinsic's line."""
  try:
    return computation.result_spec
  except ir.FederatedError as e:
    _fail(name, str(e))


def _client_reduction(name, value):
  value = _as_value(name, value)
  _expect_placement(name, value, ft.CLIENTS)
  _expect_tensors(name, value)
  return value


def _builtin_reduction(name, value, what, dtype_ok):
  """A CLIENTS value a built-in reduction folds: known shapes, fitting dtypes."""
  value = _client_reduction(name, value)
  for leaf in tf.nest.flatten(value.member):
    if not dtype_ok(leaf.dtype):
      _fail(name, f'cannot {what} {leaf.dtype.name} tensors (in '
                  f'{ft.describe(value.member)}).')
    if not leaf.shape.is_fully_defined():
      _fail(name, f'needs fully defined shapes to make its zero, got '
                  f'{ft.describe(value.member)}; use federated_aggregate '
                  'with your own zero for values whose shape varies.')
  return value


def _is_number(dtype):
  return (dtype.is_floating or dtype.is_integer or dtype.is_complex) and (
      not dtype.is_quantized)


def _is_ordered(dtype):
  return (dtype.is_floating or dtype.is_integer) and not dtype.is_quantized


def federated_sum(value):
  """Sum over clients, at the server."""
  value = _builtin_reduction('federated_sum', value, 'sum', _is_number)
  return ir.add_op('federated_sum', [value], ft.server(value.member))


def federated_min(value):
  """Elementwise minimum over clients, at the server."""
  value = _builtin_reduction('federated_min', value, 'take the minimum of',
                             _is_ordered)
  return ir.add_op('federated_min', [value], ft.server(value.member))


def federated_max(value):
  """Elementwise maximum over clients, at the server."""
  value = _builtin_reduction('federated_max', value, 'take the maximum of',
                             _is_ordered)
  return ir.add_op('federated_max', [value], ft.server(value.member))


def federated_mean(value, weight=None):
  """Mean over clients, at the server; weighted by a float32 scalar if given."""
  name = 'federated_mean'
  value = _builtin_reduction(name, value, 'average',
                             lambda dtype: dtype.is_floating)
  if weight is None:
    return ir.add_op(name, [value], ft.server(value.member))
  weight = _client_reduction(name, weight)
  if not ft.same_member(weight.member, tf.TensorSpec([], tf.float32)) or (
      weight.member.shape.rank != 0):
    _fail(name, f'the weight must be a float32 scalar at CLIENTS, got '
                f'{weight!r}.')
  return ir.add_op('federated_weighted_mean', [value, weight],
                   ft.server(value.member))


def _constant_computation(name, value, specs=None):
  """A no-argument computation making constants (of `specs`' dtypes, if any)."""
  if isinstance(specs, tf.TensorSpec) and not isinstance(value, np.ndarray):
    try:  # One tensor: a (nested) list is its value, not a structure.
      value = np.asarray(value, specs.dtype.as_numpy_dtype)
    except (TypeError, ValueError):
      _fail(name, f'cannot make a {ft.describe(specs)} zero from {value!r}.')
  try:
    leaves = [np.array(leaf) for leaf in tf.nest.flatten(value)]
  except (TypeError, ValueError):
    _fail(name, f'expected a tf_computation or a structure of constants, got '
                f'{value!r}.')
  dtypes = [None] * len(leaves)
  if specs is not None and len(tf.nest.flatten(specs)) == len(leaves):
    dtypes = [spec.dtype for spec in tf.nest.flatten(specs)]
  # Python scalars get TensorFlow's defaults (float32, int32), not numpy's.
  python_scalars = [isinstance(leaf, (bool, int, float))
                    for leaf in tf.nest.flatten(value)]

  def make():
    tensors = [tf.constant(leaf.item() if scalar else leaf, dtype=dtype)
               for leaf, dtype, scalar in zip(leaves, dtypes, python_scalars)]
    return tf.nest.pack_sequence_as(value, tensors)

  return computations.TFComputation(make, (), name='constant')


def _zero_computation(zero, accumulator):
  if isinstance(zero, computations.TFComputation):
    if zero.parameter_specs:
      _fail('federated_aggregate', f'zero {zero!r} must take no argument.')
    return zero
  return _constant_computation('federated_aggregate', zero, accumulator)


def federated_aggregate(value, zero, accumulate, merge, report):
  """The general aggregation: fold clients into accumulators, merge, report.

  `accumulate(A, value) -> A`, `merge(A, A) -> A` and `report(A) -> R` are
  tf_computations; `zero` is one with no argument, or constants. The
  accumulator type is `accumulate`'s declared first parameter, so it may have
  unknown dimensions (e.g. a growing stack) that `zero` specializes.
  """
  name = 'federated_aggregate'
  value = _client_reduction(name, value)
  for role, comp, arity in (('accumulate', accumulate, 2), ('merge', merge, 2),
                            ('report', report, 1)):
    if not isinstance(comp, computations.TFComputation):
      _fail(name, f'{role} must be a tf_computation, got {comp!r}.')
    if len(comp.parameter_specs) != arity:
      _fail(name, f'{role} {comp!r} must take {arity} argument(s).')
  accumulator = accumulate.parameter_specs[0]
  zero = _zero_computation(zero, accumulator)
  for comp in (zero, accumulate, merge, report):
    _result_spec(name, comp)
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
  return _zip('federated_zip', values)


def _zip(name, values):
  leaves = tf.nest.flatten(values)
  if not leaves or not all(isinstance(v, ir.Value) for v in leaves):
    _fail(name, f'expects a non-empty structure of federated values, got '
                f'{values!r}.')
  placements = {v.placement for v in leaves}
  if len(placements) != 1:
    _fail(name, f'cannot zip values placed at different places '
                f'({", ".join(repr(v) for v in leaves)}): to combine them at '
                'the clients, federated_broadcast the SERVER values first; to '
                'combine them at the server, aggregate the CLIENTS values '
                'first.')
  member = tf.nest.map_structure(lambda v: v.member, values)
  all_equal = all(v.type_signature.all_equal for v in leaves)
  return ir.add_op('federated_zip', leaves,
                   ft.FederatedType(member, placements.pop(), all_equal),
                   attrs={'structure': tf.nest.map_structure(lambda _: None,
                                                             values)})


def federated_value(value, placement):
  """A constant (or a no-argument tf_computation's result) at a placement.

  Python numbers become TensorFlow's default dtypes (float32, int32).
  """
  name = 'federated_value'
  if placement not in (ft.SERVER, ft.CLIENTS):
    _fail(name, f'placement must be SERVER or CLIENTS, got {placement!r}.')
  if isinstance(value, computations.TFComputation):
    computation = value
    if computation.parameter_specs:
      _fail(name, f'{computation!r} must take no argument.')
  else:
    computation = _constant_computation(name, value)
  return ir.add_op(
      name, [],
      ft.FederatedType(_result_spec(name, computation), placement, True),
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
