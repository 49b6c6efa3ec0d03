"""The federated context a program runs in (TFF's `FederatedContext`),
`contains_only_server_placed_data`, and `check_in_federated_context`, what
TFF's program logic calls first.

A `FederatedContext` is the `tff.framework` context (`canonical.framework`)
that a program's computations go through once installed; its `invoke`
returns what a program may hold: structures of server values, as value
references (`NativeFederatedContext`, `native_platform.py`).

`check_in_federated_context` passes wherever a federated computation called
from Python can run: under a `FederatedContext`, and also (unlike TFF, which
asks for one) under the executor `import canonical` installs, so program
logic runs as well without the platform lines.
"""

import collections.abc

import tensorflow as tf

from canonical import errors
from canonical import framework


class FederatedContext(framework.SyncContext):
  """A context whose `invoke(comp, arg)` takes server values (or value
  references) and client data an iterator's `select` returned, and returns
  the result as value references in the containers of its type."""


def _only_server(type_spec, where) -> bool:
  from canonical.core import types  # pylint: disable=g-import-not-at-top
  if isinstance(type_spec, types.FederatedType):
    return type_spec.placement == types.SERVER and _only_server(
        type_spec.member, where)
  if isinstance(type_spec, types.FunctionType):
    return False
  if isinstance(type_spec, (tf.TensorSpec, tf.data.DatasetSpec)):
    return True
  if isinstance(type_spec, collections.abc.Mapping):
    return all(_only_server(t, where) for t in type_spec.values())
  if isinstance(type_spec, (list, tuple)):
    return all(_only_server(t, where) for t in type_spec)
  # TFF-shaped type objects: a placement and a member, or a function.
  if hasattr(type_spec, 'placement') and hasattr(type_spec, 'member'):
    return str(type_spec.placement).upper().endswith('SERVER') and \
        _only_server(type_spec.member, where)
  if hasattr(type_spec, 'parameter') and hasattr(type_spec, 'result'):
    return False
  if hasattr(type_spec, 'dtype') or hasattr(type_spec, 'element'):
    return True
  if isinstance(type_spec, collections.abc.Iterable):
    return all(_only_server(t, where) for t in type_spec)
  raise errors.InvalidTypeError(
      f'{where}: expected a type (a computation\'s type_signature or a '
      f'part of one), got {type(type_spec).__name__} {type_spec!r}.')


def contains_only_server_placed_data(type_signature) -> bool:
  """Whether `type_signature` holds only structures, tensors, sequences and
  values placed at the SERVER (what a program can be handed back)."""
  return _only_server(type_signature, 'contains_only_server_placed_data')


def check_in_federated_context() -> None:
  """Raises FederatedError if calling a federated computation from Python
  would fail for want of an executor."""
  from canonical.core import context  # pylint: disable=g-import-not-at-top
  if getattr(context, '_executor', None) is None:
    raise errors.FederatedError(
        'Not in a federated context: no executor runs federated '
        'computations called from Python (import canonical installs the '
        'reference executor; a program installs tff.program.'
        'NativeFederatedContext).')
