"""The intrinsics, with TensorFlow Federated's names; each checks its types.

Called while tracing a federated computation, each appends one op to the
graph and returns its typed output value.
"""

import numpy as np
import tensorflow as tf

from canonical.core import computations
from canonical.core import ir
from canonical.secagg import sums as secure_sums
from canonical.core import types as ft

SECURE_AGGREGATIONS = secure_sums.KINDS
AGGREGATIONS = ('federated_sum', 'federated_mean', 'federated_weighted_mean',
                'federated_min', 'federated_max',
                'federated_aggregate') + SECURE_AGGREGATIONS


def _fail(name, message):
  raise ir.FederatedError(f'{name} at {ir.user_location()}: {message}')


def _as_value(name, arg):
  """A federated value; a structure of values is zipped."""
  if isinstance(arg, ir.Value):
    return arg
  leaves = tf.nest.flatten(arg)
  if leaves and all(isinstance(leaf, ir.Value) for leaf in leaves):
    return _zip(name, arg)
  _fail(name, f'expected a federated value, got {ir.describe_object(arg)}.')


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


def _expect_tf_computation(name, what, computation):
  if not isinstance(computation, computations.TFComputation):
    hint = (' A federated_computation combines placed values; the function '
            'applied at one place must be a tf_computation.'
            if isinstance(computation, computations.FederatedComputation)
            else '')
    _fail(name, f'{what} must be a tf_computation, got '
                f'{ir.describe_object(computation)}.{hint}')


def _map(name, computation, value):
  _expect_tf_computation(name, 'the function', computation)
  value = _as_value(name, value)
  if not computation.parameter_specs:
    _fail(name, f'{computation!r} takes no argument; use federated_value or '
                'federated_eval.')
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


def _is_weight(dtype):
  return (dtype.is_floating or dtype.is_integer) and dtype != tf.uint64


def federated_mean(value, weight=None):
  """Mean over clients, at the server; weighted by a scalar if given.

  The weight may be any float or integer scalar (not uint64). Each client's
  weight is cast to each value tensor's own float dtype before it multiplies
  it; the total weight is summed in the weight's dtype (integers as int64,
  so exactly) and cast to the tensor's dtype for the division.
  """
  name = 'federated_mean'
  value = _builtin_reduction(name, value, 'average',
                             lambda dtype: dtype.is_floating)
  if weight is None:
    return ir.add_op(name, [value], ft.server(value.member))
  weight = _client_reduction(name, weight)
  spec = weight.member
  if not (isinstance(spec, tf.TensorSpec) and spec.shape.rank == 0 and
          _is_weight(spec.dtype)):
    _fail(name, f'the weight must be a scalar of a float or integer dtype at '
                f'CLIENTS, got {weight!r}.')
  return ir.add_op('federated_weighted_mean', [value, weight],
                   ft.server(value.member))


def federated_secure_sum_bitwidth(value, bitwidth):
  """The exact sum at the SERVER of integers in [0, 2**bitwidth - 1] at the
  clients, added under pairwise masks so that no aggregator sees a client's
  value. `bitwidth`: an int, or a structure of ints like `value` (one per
  tensor), or an integer SERVER value (from the server state)."""
  return _secure_sum(secure_sums.BITWIDTH, value, bitwidth)


def federated_secure_sum(value, max_input):
  """The exact sum at the SERVER of integers in [0, max_input] at the
  clients, securely (see `federated_secure_sum_bitwidth`)."""
  return _secure_sum(secure_sums.MAX_INPUT, value, max_input)


def federated_secure_modular_sum(value, modulus):
  """SUM(value) % modulus at the SERVER, securely; client values are taken
  modulo `modulus` first (negatives too)."""
  return _secure_sum(secure_sums.MODULAR, value, modulus)


def _secure_sum(name, value, parameter):
  value = _builtin_reduction(name, value, 'securely sum',
                             lambda dtype: dtype.is_integer)
  leaves = tf.nest.flatten(value.member)
  what = secure_sums.PARAMETER_NAMES[name]
  if isinstance(parameter, ir.Unplaced):
    _fail(name, f'the {what} {ir.describe_object(parameter)} is unplaced: '
                'place it with federated_value(..., SERVER), or compute it '
                'from the server state with federated_map.')
  if isinstance(parameter, ir.Value) or (
      tf.nest.flatten(parameter) and
      all(isinstance(p, ir.Value) for p in tf.nest.flatten(parameter))):
    parameter = _as_value(name, parameter)
    _expect_placement(name, parameter, ft.SERVER)
    specs = _parameter_leaves(name, what, parameter.member, value)
    for spec in specs:
      if not (isinstance(spec, tf.TensorSpec) and spec.shape.rank == 0 and
              spec.dtype.is_integer):
        _fail(name, f'the {what} must be integer scalars at SERVER, got '
                    f'{parameter!r}.')
    return ir.add_op(name, [value, parameter], ft.server(value.member),
                     attrs={'per_leaf': len(specs) == len(leaves)})
  try:
    flat = _parameter_leaves(name, what, parameter, value)
    flat = [secure_sums.check_parameter(name, _python_int(name, what, p),
                                        f'the {what}') for p in flat]
  except secure_sums.SecureSumError as e:
    _fail(name, str(e))
  if len(flat) == 1:
    flat = flat * len(leaves)
  return ir.add_op(name, [value], ft.server(value.member),
                   attrs={'parameters': tuple(flat)})


def _parameter_leaves(name, what, parameter, value):
  """The parameter's leaves: one for every tensor of `value`, or one for all."""
  flat = tf.nest.flatten(parameter)
  if len(flat) == 1 and not tf.nest.is_nested(parameter):
    return flat
  try:
    tf.nest.assert_same_structure(value.member, parameter, check_types=False)
  except (TypeError, ValueError):
    _fail(name, f'the {what} must be one int or a structure like the value '
                f'{ft.describe(value.member)}, got '
                f'{ir.describe_object(parameter)}.')
  return flat


def _python_int(name, what, parameter):
  if isinstance(parameter, (int, np.integer)) and not isinstance(
      parameter, (bool, np.bool_)):
    return int(parameter)
  _fail(name, f'the {what} must be an int (or an integer SERVER value), got '
              f'{ir.describe_object(parameter)}.')


def _constant_computation(name, value, specs=None):
  """A no-argument computation making constants (of `specs`' dtypes, if any)."""
  if isinstance(specs, tf.TensorSpec) and not isinstance(value, np.ndarray):
    try:  # One tensor: a (nested) list is its value, not a structure.
      value = np.asarray(value, specs.dtype.as_numpy_dtype)
    except (TypeError, ValueError):
      _fail(name, f'cannot make a {ft.describe(specs)} zero from '
                  f'{ir.describe_object(value)}.')
  for leaf in tf.nest.flatten(value):
    if isinstance(leaf, (ir.Unplaced, ir.Value)):
      _fail(name, f'{ir.describe_object(leaf)} inside a structure of '
                  'constants: place each part on its own and federated_zip '
                  'them.')
  try:
    leaves = [np.array(leaf) for leaf in tf.nest.flatten(value)]
  except (TypeError, ValueError):
    _fail(name, f'expected a tf_computation or a structure of constants, got '
                f'{ir.describe_object(value)}.')
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


def zero_computation(zero, accumulator, name='federated_aggregate'):
  """A no-argument tf_computation making the zero `zero` stands for."""
  if isinstance(zero, ir.Unplaced):
    zero = zero.computation
  if isinstance(zero, computations.TFComputation):
    if zero.parameter_specs:
      _fail(name, f'zero {zero!r} must take no argument.')
    return zero
  return _constant_computation(name, zero, accumulator)


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
    _expect_tf_computation(name, role, comp)
    if len(comp.parameter_specs) != arity:
      _fail(name, f'{role} {comp!r} must take {arity} argument(s).')
  accumulator = accumulate.parameter_specs[0]
  zero = zero_computation(zero, accumulator)
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
                f'{ir.describe_object(values)}.')
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


def _expect_placement_literal(name, placement):
  if placement not in (ft.SERVER, ft.CLIENTS):
    _fail(name, f'placement must be SERVER or CLIENTS, got '
                f'{ir.describe_object(placement)}.')


def federated_value(value, placement):
  """A value known at trace time, at a placement (all clients: the same).

  `value` is a constant structure (Python numbers become TensorFlow's default
  dtypes, float32 and int32), the unplaced result of calling a tf_computation
  in the body (`federated_value(init(), SERVER)`: the piece at `placement`
  runs `init`), or a no-argument tf_computation.
  """
  name = 'federated_value'
  _expect_placement_literal(name, placement)
  if isinstance(value, ir.Value):
    _fail(name, f'{value!r} is already placed; federated_broadcast moves a '
                'SERVER value to the clients.')
  if isinstance(value, ir.Unplaced):
    value = value.computation
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


def federated_eval(fn, placement):
  """Evaluates the no-argument tf_computation `fn` at `placement`.

  At the SERVER this is `federated_value(fn(), SERVER)`. At CLIENTS each
  client evaluates `fn` and the result is a CLIENTS value with no promise
  that clients agree ({T}@CLIENTS), as in TFF. Our pieces are pure, so `fn`
  draws no entropy of its own and every client in fact computes the same
  value; randomness that differs per client comes from stateless random ops
  seeded by the client's data.
  """
  name = 'federated_eval'
  _expect_placement_literal(name, placement)
  if isinstance(fn, ir.Unplaced):
    _fail(name, f'expects the tf_computation itself, not its result: write '
                f'federated_eval({fn.computation.name}, ...) without the call.')
  _expect_tf_computation(name, 'the function', fn)
  if fn.parameter_specs:
    _fail(name, f'{fn!r} must take no argument; apply a computation to a '
                'placed value with federated_map.')
  return ir.add_op(
      name, [],
      ft.FederatedType(_result_spec(name, fn), placement,
                       placement == ft.SERVER),
      attrs={'computation': fn})


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
