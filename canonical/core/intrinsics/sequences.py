"""The sequence intrinsics: `sequence_map`, `sequence_reduce`, `sequence_sum`.

A sequence is a `tf.data.Dataset`. Each intrinsic works in two places, as in
TFF: on a dataset (inside a tf_computation, or eagerly), where it is plain
tf.data; and on a federated value whose member is a dataset, pointwise at its
placement (at each client, like a `federated_map`), recorded as one op of the
federated graph. Anything else is a `FederatedError` naming the caller's line.
"""

import tensorflow as tf

from canonical.core import computations
from canonical.core.intrinsics import checks
from canonical.core.intrinsics import registry
from canonical.core import ir
from canonical.core import naming
from canonical.core import types as ft
from canonical.errors import FederatedError

fail = checks.fail


def _is_dataset(name, value):
  """True for a dataset, False for a federated sequence; fails otherwise."""
  if isinstance(value, tf.data.Dataset):
    return True
  if isinstance(value, ir.Value):
    if not isinstance(value.member, tf.data.DatasetSpec):
      hint = (' Select the dataset first (value[key]).'
              if ft.has_dataset(value.member) else '')
      fail(name, f'expects a sequence, got {value!r}: its member is not a '
                 f'dataset.{hint}')
    return False
  fail(name, f'expects a sequence: a tf.data.Dataset (inside a '
             'tf_computation) or a federated value whose member is a dataset '
             f'(e.g. client data typed type_at_clients(SequenceType(T))), '
             f'got {naming.describe_object(value)}.')


def _computation(name, what, fn, argument_member):
  fn = computations.typed(fn, argument_member)
  if not isinstance(fn, computations.TFComputation):
    fail(name, f'{what} must be a tf_computation when the sequence is a '
               f'federated value, got {naming.describe_object(fn)}.')
  return fn


def _element_function(fn):
  """A `Dataset.map` function calling `fn` on a whole element (map unpacks
  tuple elements into positional arguments)."""
  if isinstance(fn, computations.TFComputation):
    call = fn.call_with_member
  else:
    call = fn

  def apply(*element):
    return call(element[0] if len(element) == 1 else element)

  return apply


def _reducer(op):
  if isinstance(op, computations.TFComputation):
    if len(op.parameter_specs) == 1:
      return lambda acc, element: op.invoke((acc, element))
    return op.invoke
  return op


# ----------------------------------------------------------------------------
# sequence_map


def sequence_map(fn, value):
  """Applies `fn` to every element of a sequence; the result is a sequence."""
  name = MAP.name
  if _is_dataset(name, value):
    if isinstance(fn, computations.TFComputation):
      checks.expect_member(name, f'an element given to {fn.name!r}',
                           value.element_spec, fn.parameter_member())
    elif not callable(fn):
      fail(name, f'expects a function, got {naming.describe_object(fn)}.')
    return value.map(_element_function(fn))
  fn = _computation(name, 'the function', fn, value.member.element_spec)
  if not fn.parameter_specs:
    fail(name, f'{fn!r} takes no argument; it must take an element.')
  return MAP.bind([value], {'computation': fn})


def _map_type(value, computation):
  name = MAP.name
  checks.expect_member(name, f'an element given to {computation.name!r}',
                       value.member.element_spec,
                       computation.parameter_member())
  result = checks.result_spec(name, computation)
  if ft.has_dataset(result):
    fail(name, f'{computation!r} returns {ft.describe(result)}: elements '
               'cannot be sequences.')
  return ft.FederatedType(tf.data.DatasetSpec(result), value.placement,
                          value.type_signature.all_equal)


def _map_at_one_place(op, args):
  return args[0].map(_element_function(op.attrs['computation']))


# ----------------------------------------------------------------------------
# sequence_reduce


def sequence_reduce(value, zero, op):
  """Folds a sequence: `op(...op(op(zero, e0), e1)..., en)`.

  On a federated sequence, `op` is a tf_computation `(accumulator, element)
  -> accumulator` (two parameters, or one pair) whose first parameter type is
  the accumulator's; `zero` is a federated value at the sequence's placement
  (a broadcast model, say), or constants, or a no-argument tf_computation.
  """
  name = REDUCE.name
  if _is_dataset(name, value):
    return _reduce_dataset(value, zero, op)
  if isinstance(op, computations.PolymorphicComputation):
    # Untyped: the zero's type is the accumulator's.
    if not isinstance(zero, ir.Value):
      zero = checks.zero_computation(zero, None, name)
    zero_member = (zero.member if isinstance(zero, ir.Value) else
                   checks.result_spec(name, zero))
    op = _computation(name, 'op', op,
                      (zero_member, value.member.element_spec))
  op = _computation(name, 'op', op, None)
  accumulator, _ = _accumulator_and_element(op)
  if isinstance(zero, ir.Value):
    return REDUCE.bind([value, zero], {'op': op})
  zero = checks.zero_computation(zero, accumulator, name)
  return REDUCE.bind([value], {'op': op, 'zero': zero})


def _reduce_dataset(value, zero, op):
  name = REDUCE.name
  if isinstance(zero, ir.Value):
    fail(name, f'the zero {zero!r} is a federated value, the sequence a '
               'dataset: inside a tf_computation, pass tensors.')
  if isinstance(zero, ir.Unplaced):
    zero = zero.computation
  if isinstance(zero, computations.TFComputation):
    zero = zero.invoke()
  if not callable(op):
    fail(name, f'expects a function (accumulator, element) -> accumulator, '
               f'got {naming.describe_object(op)}.')
  try:
    return value.reduce(zero, _reducer(op))
  except FederatedError:
    raise
  except (TypeError, ValueError) as e:
    fail(name, f'cannot fold {ft.describe(ft.spec_of(value))} from zero '
               f'{naming.describe_object(zero)}: {type(e).__name__}: {e}')


def _accumulator_and_element(op):
  specs = op.parameter_specs
  if len(specs) == 1 and isinstance(specs[0], (tuple, list)) and (
      len(specs[0]) == 2):
    specs = tuple(specs[0])
  if len(specs) != 2:
    fail(REDUCE.name, f'op {op!r} must take (accumulator, element).')
  return specs


def _reduce_type(value, zero=None, op=None):
  name = REDUCE.name
  accumulator, element = _accumulator_and_element(op)
  checks.expect_member(name, f'an element given to op {op.name!r}',
                       value.member.element_spec, element)
  checks.expect_member(name, f'the result of op {op.name!r}',
                       checks.result_spec(name, op), accumulator)
  if isinstance(zero, ir.Value):
    if zero.placement != value.placement:
      hint = (' federated_broadcast it first.'
              if zero.placement == ft.SERVER else '')
      fail(name, f'the zero {zero!r} is placed at {zero.placement}, the '
                 f'sequence {value!r} at {value.placement}.{hint}')
    checks.expect_member(name, 'the zero', zero.member, accumulator)
    all_equal = (value.type_signature.all_equal and
                 zero.type_signature.all_equal)
  else:
    checks.expect_member(name, 'the zero', checks.result_spec(name, zero),
                         accumulator)
    all_equal = value.type_signature.all_equal
  return ft.FederatedType(accumulator, value.placement, all_equal)


def _reduce_at_one_place(op, args):
  zero = args[1] if len(args) > 1 else op.attrs['zero'].invoke()
  return args[0].reduce(zero, _reducer(op.attrs['op']))


# ----------------------------------------------------------------------------
# sequence_sum


def _add(a, b):
  return tf.nest.map_structure(tf.add, a, b)


def sum_dataset(dataset):
  """The sum of a dataset's elements (zeros for an empty one)."""
  zeros = tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype),
                                dataset.element_spec)
  return dataset.reduce(zeros, _add)


def _check_summable(element):
  for leaf in tf.nest.flatten(element):
    if not (isinstance(leaf, tf.TensorSpec) and (
        leaf.dtype.is_floating or leaf.dtype.is_integer or
        leaf.dtype.is_complex)):
      fail(SUM.name, f'cannot sum elements of type {ft.describe(element)}.')
    if not leaf.shape.is_fully_defined():
      fail(SUM.name, f'needs elements of fully defined shape to make its '
                     f'zero, got {ft.describe(element)} (e.g. batches of '
                     'varying size); use sequence_reduce with your own zero.')


def sequence_sum(value):
  """The sum of a sequence's elements (zeros for an empty sequence)."""
  if _is_dataset(SUM.name, value):
    _check_summable(value.element_spec)
    return sum_dataset(value)
  return SUM.bind([value])


def _sum_type(value):
  element = value.member.element_spec
  _check_summable(element)
  return ft.FederatedType(element, value.placement,
                          value.type_signature.all_equal)


def _sum_at_one_place(op, args):
  del op
  return sum_dataset(args[0])


def _spec(name, function, type_rule, at_one_place):
  return registry.Intrinsic(
      name=name, function=function, type_rule=type_rule,
      placement=registry.Placement.OF_ARGUMENT, role=registry.Role.LOCAL,
      at_one_place=at_one_place, reference=registry.pointwise)


MAP = registry.register(_spec('sequence_map', sequence_map, _map_type,
                              _map_at_one_place))
REDUCE = registry.register(_spec('sequence_reduce', sequence_reduce,
                                 _reduce_type, _reduce_at_one_place))
SUM = registry.register(_spec('sequence_sum', sequence_sum, _sum_type,
                              _sum_at_one_place))
