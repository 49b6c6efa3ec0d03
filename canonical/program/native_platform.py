"""`NativeFederatedContext`: the federated context of a program's platform
lines, over an execution context of `tff.backends.native`.

    context = tff.backends.native.create_async_local_cpp_execution_context()
    context = tff.program.NativeFederatedContext(context)
    tff.framework.set_default_context(context)

Once installed, a computation called from Python returns its result as
`NativeValueReference`s, one per tensor or sequence, in the containers of
its result (server values lose their placement), as TFF's does; arguments
may hold references, which are replaced by their values. TFF returns
references to a computation still running; here the computation runs when
called (on the calling thread) and the references are resolved over its
values, so its errors are raised at the call, and the same program logic
(awaiting `tff.program.materialize_value`) sees the same values.
"""

import asyncio

import tensorflow as tf

from canonical import errors
from canonical import framework
from canonical.program import federated_context
from canonical.program import structure
from canonical.program import value_reference


def _type_of(value):
  """The type a reference to `value` carries (a tensor's or a sequence's)."""
  from canonical.core import types  # pylint: disable=g-import-not-at-top
  try:
    spec = types.spec_of(value)
  except (TypeError, ValueError):
    return None
  if isinstance(spec, tf.data.DatasetSpec):
    return types.SequenceType(spec.element_spec)
  return types.TensorType(spec.dtype, spec.shape)


def _references(value):
  """`value` with each leaf a resolved reference (empty containers stay)."""
  return structure.map_structure(
      lambda _, leaf: value_reference.NativeValueReference.resolved(
          leaf, _type_of(leaf)), value)


def _resolve(arg, where):
  """`arg` with each reference replaced by its value."""
  leaves = [leaf for _, leaf in structure.flatten_with_path(arg)
            if isinstance(leaf, value_reference.MaterializableValueReference)]
  if all(isinstance(leaf, value_reference.NativeValueReference) and
         leaf.is_resolved for leaf in leaves):
    return structure.map_structure(
        lambda _, leaf: leaf.value() if isinstance(
            leaf, value_reference.NativeValueReference) else leaf, arg)
  try:
    asyncio.get_running_loop()
  except RuntimeError:
    return asyncio.run(value_reference.materialize_value(arg))
  raise errors.InvalidValueError(
      f'{where}: an argument holds a value reference that this context did '
      'not make, and its value cannot be awaited inside a running event '
      'loop; pass `await tff.program.materialize_value(argument)` instead.')


class NativeFederatedContext(federated_context.FederatedContext):
  """A `FederatedContext` running computations by `context`: what
  `tff.backends.native.create_async_local_cpp_execution_context` (or its
  sync sibling) returns."""

  def __init__(self, context):
    if not isinstance(context, (framework.AsyncExecutionContext,
                                framework.ExecutionContext)):
      raise errors.InvalidTypeError(
          'NativeFederatedContext: context must be an execution context of '
          'tff.backends.native (create_async_local_cpp_execution_context()), '
          f'got {type(context).__name__}.')
    self._context = context

  def invoke(self, comp, arg):
    """`comp` on `arg`, its result as references (see the module)."""
    where = (comp.describe_for_error() if hasattr(comp, 'describe_for_error')
             else type(comp).__name__)
    result_type = comp.type_signature.result
    if not federated_context.contains_only_server_placed_data(result_type):
      raise errors.InvalidValueError(
          f'NativeFederatedContext: {where} returns {result_type}; a program '
          'can only be handed structures of tensors, sequences and SERVER '
          'values, not values at the CLIENTS or computations.')
    args = framework.unpack(comp, arg)
    args = tuple(_resolve(a, where) for a in args)
    from canonical.core import context  # pylint: disable=g-import-not-at-top
    result = framework.run_on(self._context.executor, comp, args)
    return _references(context.as_numpy(result))
