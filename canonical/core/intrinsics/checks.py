"""The argument checks the intrinsics share; each failure names the intrinsic
and the user's line."""

import numpy as np
import tensorflow as tf

from canonical.core import computations
from canonical.core.intrinsics import registry
from canonical.core.intrinsics import structure
from canonical.core import ir
from canonical.core import naming
from canonical.core import types as ft
from canonical.errors import FederatedError

fail = registry.fail


def as_value(name, arg):
  """A federated value; a structure of values is their `federated_zip`."""
  if isinstance(arg, ir.Value):
    return arg
  leaves = tf.nest.flatten(arg)
  if leaves and all(isinstance(leaf, ir.Value) for leaf in leaves):
    return structure.zip_values(name, arg)
  fail(name, f'expected a federated value, got {naming.describe_object(arg)}.')


_NOT_AT_SERVER = ('client values reach the server only through an aggregation '
                  '(federated_sum, federated_mean, federated_aggregate, ...).')
_NOT_AT_CLIENTS = ('it reduces values placed at CLIENTS; use federated_map / '
                   'federated_apply on a SERVER value instead.')


def expect_placement(name, value, placement):
  if value.placement != placement:
    hint = _NOT_AT_SERVER if placement == ft.SERVER else _NOT_AT_CLIENTS
    fail(name, f'expects a value placed at {placement}, got {value!r}: '
               f'{hint}')


def expect_placement_literal(name, placement):
  if placement not in (ft.SERVER, ft.CLIENTS):
    fail(name, f'placement must be SERVER or CLIENTS, got '
               f'{naming.describe_object(placement)}.')


def expect_member(name, what, actual, expected):
  if not ft.same_member(actual, expected):
    fail(name, f'{what} has type {ft.describe(actual)}, expected '
               f'{ft.describe(expected)}.')


def expect_tf_computation(name, what, computation):
  if not isinstance(computation, computations.TFComputation):
    hint = (' A federated_computation combines placed values; the function '
            'applied at one place must be a tf_computation.'
            if isinstance(computation, computations.FederatedComputation)
            else '')
    fail(name, f'{what} must be a tf_computation, got '
               f'{naming.describe_object(computation)}.{hint}')


def typed_tf_computation(name, what, computation, argument_member):
  """`computation` as a typed tf_computation for `argument_member` (an
  untyped one is typed by it, as TFF types one by its first use)."""
  if isinstance(computation, computations.PolymorphicComputation):
    try:
      computation = computation.for_member(argument_member)
    except FederatedError as e:
      fail(name, f'{what}: {e}')
  expect_tf_computation(name, what, computation)
  return computation


def result_spec(name, computation):
  """The computation's result type; a trace error names the intrinsic's line."""
  try:
    return computation.result_spec
  except FederatedError as e:
    fail(name, str(e))


def client_tensors(name, value):
  """A CLIENTS value of tensors only: what an aggregation takes."""
  expect_placement(name, value, ft.CLIENTS)
  for leaf in tf.nest.flatten(value.member):
    if not isinstance(leaf, tf.TensorSpec):
      fail(name, f'cannot aggregate {ft.describe(leaf)} in {value!r}: only '
                 'tensors can be aggregated.')


def built_in_reduction(name, value, what, dtype_ok):
  """A CLIENTS value a built-in reduction folds: known shapes, fitting
  dtypes."""
  client_tensors(name, value)
  for leaf in tf.nest.flatten(value.member):
    if not dtype_ok(leaf.dtype):
      fail(name, f'cannot {what} {leaf.dtype.name} tensors (in '
                 f'{ft.describe(value.member)}).')
    if not leaf.shape.is_fully_defined():
      fail(name, f'needs fully defined shapes to make its zero, got '
                 f'{ft.describe(value.member)}; use federated_aggregate '
                 'with your own zero for values whose shape varies.')


def constant_computation(name, value, specs=None):
  """A no-argument computation making constants (of `specs`' dtypes, if any)."""
  if isinstance(specs, tf.TensorSpec) and not isinstance(value, np.ndarray):
    try:  # One tensor: a (nested) list is its value, not a structure.
      value = np.asarray(value, specs.dtype.as_numpy_dtype)
    except (TypeError, ValueError):
      fail(name, f'cannot make a {ft.describe(specs)} zero from '
                 f'{naming.describe_object(value)}.')
  for leaf in tf.nest.flatten(value):
    if isinstance(leaf, (ir.Unplaced, ir.Value)):
      fail(name, f'{naming.describe_object(leaf)} inside a structure of '
                 'constants: place each part on its own and federated_zip '
                 'them.')
  try:
    leaves = [np.array(leaf) for leaf in tf.nest.flatten(value)]
  except (TypeError, ValueError):
    fail(name, f'expected a tf_computation or a structure of constants, got '
               f'{naming.describe_object(value)}.')
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


def zero_computation(zero, accumulator, name):
  """A no-argument tf_computation making the zero `zero` stands for: one
  already, the unplaced result of calling one, or constants."""
  if isinstance(zero, ir.Unplaced):
    zero = zero.computation
  if isinstance(zero, computations.TFComputation):
    if zero.parameter_specs:
      fail(name, f'zero {zero!r} must take no argument.')
    return zero
  return constant_computation(name, zero, accumulator)
