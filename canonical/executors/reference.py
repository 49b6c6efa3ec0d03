"""The reference executor: runs a federated computation by its plain meaning.

No compilation: the traced graph is interpreted op by op, each by its
intrinsic's `reference` meaning, with a SERVER value held as a plain structure
and a CLIENTS value as a list, one entry per client. Aggregations fold clients
in order (sums are not reordered). It is the yardstick the compiled form is
tested against, and what calling a federated computation from Python runs
(`canonical` installs it as the language's executor, `canonical.core.context`).
"""

import tensorflow as tf
from tensorflow.python.util import nest

from canonical.core import computations
from canonical.core.intrinsics import registry
from canonical.core import ir
from canonical.core import naming
from canonical.core import types as ft
from canonical import errors


def run(computation, *args, default_num_clients=0):
  """Runs a `FederatedComputation`; CLIENTS arguments are lists, one per
  client; with none, there are `default_num_clients` clients (TFF's
  execution context option of that name)."""
  if not isinstance(computation, computations.FederatedComputation):
    raise errors.InvalidTypeError(
        f'reference.run expects a federated_computation, got '
        f'{naming.describe_object(computation)}.')
  graph = computation.trace()
  if len(args) != len(graph.parameters):
    raise errors.FederatedError(
        f'{computation.name!r} takes '
        f'{len(graph.parameters)} arguments, got {len(args)}.')
  num_clients = None
  args = [_with_sequences(param, arg)
          for param, arg in zip(graph.parameters, args)]
  for number, (param, arg) in enumerate(zip(graph.parameters, args)):
    if param.placement == ft.CLIENTS:
      if num_clients not in (None, len(arg)):
        raise errors.FederatedError(
            'CLIENTS arguments must have one entry per '
            f'client: got lengths {num_clients} and '
            f'{len(arg)}.')
      num_clients = len(arg)
    _check_datasets(computation, number, param, arg)
  env = {id(p): a for p, a in zip(graph.parameters, args)}
  for op in graph.ops:
    inputs = [env[id(v)] for v in op.inputs]
    env[id(op.output)] = registry.of(op).reference(op, inputs,
                                                   num_clients or
                                                   default_num_clients)
  # An unplaced result (a constant, as TFF allows) is computed here.
  return tf.nest.map_structure(
      lambda v: (v.computation.invoke() if isinstance(v, ir.Unplaced) else
                 env[id(v)]), graph.result)


def _with_sequences(param, arg):
  """`arg` as values of the parameter's type: Python lists where sequences
  go made datasets, as TFF accepts (`[[1.0, 2.0], [3.0]]` for
  `{float32*}@CLIENTS`), Python numbers where tensors go tensors of their
  declared dtype."""

  def one_place(value):
    value = ft.with_sequences(param.member, ft.by_name(param.member, value))
    try:
      return nest.map_structure_up_to(param.member, _tensor_of, param.member,
                                      value, check_types=False)
    except (TypeError, ValueError):
      return value  # Not this conversion's business: the checks name it.

  if param.placement == ft.CLIENTS:
    return [one_place(value) for value in arg]
  return one_place(arg)


def _tensor_of(spec, value):
  if isinstance(spec, tf.TensorSpec) and not tf.is_tensor(value):
    return tf.convert_to_tensor(value, spec.dtype)
  return value


def _check_datasets(computation, number, param, arg):
  """A FederatedError naming the computation, argument and client whose
  dataset has elements of another type than the parameter's."""
  if not ft.has_dataset(param.member):
    return
  per_client = param.placement == ft.CLIENTS
  for client, value in enumerate(arg if per_client else [arg]):
    mismatch = ft.dataset_mismatch(param.member, value)
    if mismatch:
      whose = f' (client {client})' if per_client else ''
      raise errors.FederatedError(
          f'{computation.name!r} argument {number}{whose}: expected '
          f'{mismatch[0]}, got {mismatch[1]}.')


def run_round(process, state, client_data, client_states=None):
  """One round of an `IterativeProcess` by its plain meaning.

  Returns `(state, metrics)`, then `client_states` with client state, then
  `client_outputs` (one per client) if `next` returns them; a client state of
  None is a new client's (the process's
  `client_state_initializer` makes it). The new server state and client
  states have the structures `next` declares for them.
  """
  client_data = list(client_data)
  args = [state, client_data]
  params = process.next.parameter_types
  if process.has_client_state:
    client_states = list(client_states if client_states is not None else
                         [None] * len(client_data))
    if len(client_states) != len(client_data):
      raise errors.InvalidValueError(
          f'reference.run_round: {len(client_data)} clients but '
          f'{len(client_states)} client states.')
    args.append([
        process.client_state_initializer.invoke() if s is None else s
        for s in client_states])
  result = run(process.next, *args)
  new_state = _repack(result[0], params[0].member)
  returned = (new_state, result[1])
  returned_values = process.next.trace().result
  if process.has_client_state:
    returned += ([_repack(s, params[2].member) for s in _per_client(
        returned_values[2], result[2], len(client_data))],)
  if process.has_client_outputs:
    returned += (_per_client(returned_values[-1], result[-1],
                             len(client_data)),)
  return returned


def _per_client(values, value, num_clients):
  """`value`, a structure shaped like the CLIENTS `values` with one list
  (one entry per client) at each value, as one structure per client."""
  lists = nest.flatten_up_to(values, value)
  return [tf.nest.pack_sequence_as(values, [entries[i] for entries in lists])
          for i in range(num_clients)]


def _repack(value, member):
  return tf.nest.pack_sequence_as(member, tf.nest.flatten(value))
