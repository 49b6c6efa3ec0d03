"""The sequence intrinsics: `sequence_map`, `sequence_reduce`, `sequence_sum`.

A sequence is a `tf.data.Dataset`. Each intrinsic works in two places, as in
TFF: on a dataset (inside a tf_computation, or eagerly), where it is plain
tf.data; and on a federated value whose member is a dataset, pointwise at its
placement (at each client, like a `federated_map`), recorded as one op of the
federated graph. Anything else is a `FederatedError` naming the caller's line.
"""

import tensorflow as tf

from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import ir
from canonical.core import types as ft

KINDS = ('sequence_map', 'sequence_reduce', 'sequence_sum')


def _fail(name, message):
  raise ir.FederatedError(f'{name} at {ir.user_location()}: {message}')


def _kind_of(name, value):
  """'dataset' or 'federated' for a sequence argument; fails otherwise."""
  if isinstance(value, tf.data.Dataset):
    return 'dataset'
  if isinstance(value, ir.Value):
    if not isinstance(value.member, tf.data.DatasetSpec):
      hint = (' Select the dataset first (value[key]).'
              if ft.has_dataset(value.member) else '')
      _fail(name, f'expects a sequence, got {value!r}: its member is not a '
                  f'dataset.{hint}')
    return 'federated'
  _fail(name, f'expects a sequence: a tf.data.Dataset (inside a '
              'tf_computation) or a federated value whose member is a dataset '
              f'(e.g. client data typed type_at_clients(SequenceType(T))), '
              f'got {ir.describe_object(value)}.')


def _computation(name, what, fn):
  if not isinstance(fn, computations.TFComputation):
    _fail(name, f'{what} must be a tf_computation when the sequence is a '
                f'federated value, got {ir.describe_object(fn)}.')
  return fn


def _check_member(name, what, actual, expected):
  if not ft.same_member(actual, expected):
    _fail(name, f'{what} has type {ft.describe(actual)}, expected '
                f'{ft.describe(expected)}.')


def _result_spec(name, computation):
  try:
    return computation.result_spec
  except ir.FederatedError as e:
    _fail(name, str(e))


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
# The intrinsics.


def sequence_map(fn, value):
  """Applies `fn` to every element of a sequence; the result is a sequence."""
  name = 'sequence_map'
  if _kind_of(name, value) == 'dataset':
    if isinstance(fn, computations.TFComputation):
      _check_member(name, f'an element given to {fn.name!r}',
                    value.element_spec, fn.parameter_member())
    elif not callable(fn):
      _fail(name, f'expects a function, got {ir.describe_object(fn)}.')
    return value.map(_element_function(fn))
  fn = _computation(name, 'the function', fn)
  element = value.member.element_spec
  if not fn.parameter_specs:
    _fail(name, f'{fn!r} takes no argument; it must take an element.')
  _check_member(name, f'an element given to {fn.name!r}', element,
                fn.parameter_member())
  result = _result_spec(name, fn)
  if ft.has_dataset(result):
    _fail(name, f'{fn!r} returns {ft.describe(result)}: elements cannot be '
                'sequences.')
  return ir.add_op(name, [value], ft.FederatedType(
      tf.data.DatasetSpec(result), value.placement,
      value.type_signature.all_equal), attrs={'computation': fn})


def sequence_reduce(value, zero, op):
  """Folds a sequence: `op(...op(op(zero, e0), e1)..., en)`.

  On a federated sequence, `op` is a tf_computation `(accumulator, element)
  -> accumulator` (two parameters, or one pair) whose first parameter type is
  the accumulator's; `zero` is a federated value at the sequence's placement
  (a broadcast model, say), or constants, or a no-argument tf_computation.
  """
  name = 'sequence_reduce'
  if _kind_of(name, value) == 'dataset':
    if isinstance(zero, ir.Value):
      _fail(name, f'the zero {zero!r} is a federated value, the sequence a '
                  'dataset: inside a tf_computation, pass tensors.')
    if isinstance(zero, ir.Unplaced):
      zero = zero.computation
    if isinstance(zero, computations.TFComputation):
      zero = zero.invoke()
    if not callable(op):
      _fail(name, f'expects a function (accumulator, element) -> '
                  f'accumulator, got {ir.describe_object(op)}.')
    try:
      return value.reduce(zero, _reducer(op))
    except ir.FederatedError:
      raise
    except (TypeError, ValueError) as e:
      _fail(name, f'cannot fold {ft.describe(ft.spec_of(value))} from zero '
                  f'{ir.describe_object(zero)}: {type(e).__name__}: {e}')
  op = _computation(name, 'op', op)
  element = value.member.element_spec
  specs = op.parameter_specs
  if len(specs) == 1 and isinstance(specs[0], (tuple, list)) and (
      len(specs[0]) == 2):
    specs = tuple(specs[0])
  if len(specs) != 2:
    _fail(name, f'op {op!r} must take (accumulator, element).')
  accumulator = specs[0]
  _check_member(name, f'an element given to op {op.name!r}', element,
                specs[1])
  _check_member(name, f'the result of op {op.name!r}', _result_spec(name, op),
                accumulator)
  inputs, attrs = [value], {'op': op}
  if isinstance(zero, ir.Value):
    if zero.placement != value.placement:
      hint = (' federated_broadcast it first.'
              if zero.placement == ft.SERVER else '')
      _fail(name, f'the zero {zero!r} is placed at {zero.placement}, the '
                  f'sequence {value!r} at {value.placement}.{hint}')
    _check_member(name, 'the zero', zero.member, accumulator)
    inputs.append(zero)
  else:
    zero = intrinsics.zero_computation(zero, accumulator, name)
    _check_member(name, 'the zero', _result_spec(name, zero), accumulator)
    attrs['zero'] = zero
  all_equal = all(v.type_signature.all_equal for v in inputs)
  return ir.add_op(name, inputs, ft.FederatedType(
      accumulator, value.placement, all_equal), attrs=attrs)


def _sum_zero(name, element):
  for leaf in tf.nest.flatten(element):
    if not (isinstance(leaf, tf.TensorSpec) and (
        leaf.dtype.is_floating or leaf.dtype.is_integer or
        leaf.dtype.is_complex)):
      _fail(name, f'cannot sum elements of type {ft.describe(element)}.')
    if not leaf.shape.is_fully_defined():
      _fail(name, f'needs elements of fully defined shape to make its zero, '
                  f'got {ft.describe(element)} (e.g. batches of varying '
                  'size); use sequence_reduce with your own zero.')


def _add(a, b):
  return tf.nest.map_structure(tf.add, a, b)


def sum_dataset(dataset):
  """The sum of a dataset's elements (zeros for an empty one)."""
  zeros = tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype),
                                dataset.element_spec)
  return dataset.reduce(zeros, _add)


def sequence_sum(value):
  """The sum of a sequence's elements (zeros for an empty sequence)."""
  name = 'sequence_sum'
  if _kind_of(name, value) == 'dataset':
    _sum_zero(name, value.element_spec)
    return sum_dataset(value)
  element = value.member.element_spec
  _sum_zero(name, element)
  return ir.add_op(name, [value], ft.FederatedType(
      element, value.placement, value.type_signature.all_equal))


def evaluate(op, args):
  """The op's value at one place (a client, or the server)."""
  if op.kind == 'sequence_map':
    return args[0].map(_element_function(op.attrs['computation']))
  if op.kind == 'sequence_reduce':
    zero = args[1] if len(args) > 1 else op.attrs['zero'].invoke()
    return args[0].reduce(zero, _reducer(op.attrs['op']))
  if op.kind == 'sequence_sum':
    return sum_dataset(args[0])
  raise ValueError(f'{op.describe()} is not a sequence op.')
