"""The reference executor: runs a federated computation by its plain meaning.

No compilation: the traced graph is interpreted op by op, each by its
intrinsic's `reference` meaning, with a SERVER value held as a plain structure
and a CLIENTS value as a list, one entry per client. Aggregations fold clients
in order (sums are not reordered). It is the yardstick the compiled form is
tested against, and what calling a federated computation from Python runs
(`canonical` installs it as the language's executor, `canonical.core.context`).
"""

import numpy as np
import tensorflow as tf
from tensorflow.python.util import nest

from canonical.core import computations
from canonical.core import given_datasets
from canonical.core.intrinsics import registry
from canonical.core import ir
from canonical.core import naming
from canonical.core import types as ft
from canonical.core import unrolled_datasets
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
  args, num_clients = arguments(computation, graph, args)
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


def arguments(computation, graph, args, element_lists=False):
  """`(args, number of clients or None)`: `args` as values of `graph`'s
  parameter types (see `_with_sequences`), after checking that there is
  one per parameter, that CLIENTS ones agree on the number of clients, and
  that datasets hold what the types say; raises `FederatedError` naming
  the computation otherwise. With `element_lists`, a list given for a
  sequence stays a list (of elements of the sequence's numpy dtypes), as
  a compiled form's pieces take them; without, it becomes a dataset of
  them, batches of several sizes included (as TFF 0.87 takes them)."""
  if len(args) != len(graph.parameters):
    raise errors.FederatedError(
        f'{computation.name!r} takes '
        f'{len(graph.parameters)} arguments, got {len(args)}.')
  num_clients = None
  args = [_element_lists(computation, number, param, arg, element_lists)
          for number, (param, arg) in enumerate(zip(graph.parameters, args))]
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
  return args, num_clients


class _Elements(list):
  """A sequence's elements given as a list, checked and kept as a list."""


def _element_lists(computation, number, param, arg, keep):
  """`arg` with each list given for a sequence parameter (whole) checked
  and made an `_Elements` of numpy structures of its element type (kept
  as such, or made a dataset of them), and each dataset as TFF gives it
  (`given_datasets.as_given`)."""
  if not isinstance(param.member, tf.data.DatasetSpec):
    return arg
  spec = param.member.element_spec
  per_client = param.placement == ft.CLIENTS
  values = list(arg) if per_client else [arg]
  for client, value in enumerate(values):
    if isinstance(value, tf.data.Dataset):
      values[client] = given_datasets.as_given(value)
      continue
    if not isinstance(value, (list, tuple)):
      continue
    converted = _Elements()
    for index, element in enumerate(value):
      try:
        converted.append(nest.map_structure_up_to(
            spec, _cast_element, spec, element, check_types=False))
      except (TypeError, ValueError) as e:
        whose = f' (client {client})' if per_client else ''
        raise errors.FederatedError(
            f'{computation.name!r} argument {number}{whose}: element '
            f'{index} is not a {ft.describe(spec)}: {e}') from None
    values[client] = converted if keep else _dataset_of(spec, converted)
  return values if per_client else values[0]


def _dataset_of(spec, elements):
  """A dataset of `elements` (numpy structures of `spec`): their slices
  where they are all of one shape, else one element after another."""
  if not elements:
    return tf.data.Dataset.from_tensor_slices(tf.nest.map_structure(
        lambda s: np.zeros([0] + [d or 0 for d in s.shape.as_list()],
                           s.dtype.as_numpy_dtype), spec))
  flat = [tf.nest.flatten(e) for e in elements]
  if all(len({leaves[i].shape for leaves in flat}) == 1
         for i in range(len(flat[0]))):
    return tf.data.Dataset.from_tensor_slices(tf.nest.pack_sequence_as(
        spec, [np.stack([leaves[i] for leaves in flat])
               for i in range(len(flat[0]))]))
  dataset = None
  for element in elements:
    one = tf.data.Dataset.from_tensors(element)
    dataset = one if dataset is None else dataset.concatenate(one)
  return dataset


def _cast_element(spec, leaf):
  return unrolled_datasets.element_array(spec, leaf, cast_numpy=True)


def _with_sequences(param, arg):
  """`arg` as values of the parameter's type: Python lists where sequences
  go made datasets, as TFF accepts (`[[1.0, 2.0], [3.0]]` for
  `{float32*}@CLIENTS`), Python numbers where tensors go tensors of their
  declared dtype."""

  def one_place(value):
    if isinstance(value, (tf.data.Dataset, _Elements)) and isinstance(
        param.member, tf.data.DatasetSpec):
      return value  # Already what the type says (checked after).
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
  fitting = []  # Element specs seen to fit: clients mostly share one.
  for client, value in enumerate(arg if per_client else [arg]):
    if isinstance(value, _Elements):
      continue  # Checked element by element already.
    spec = getattr(value, 'element_spec', None)
    if isinstance(value, tf.data.Dataset) and any(
        spec == seen for seen in fitting):
      continue
    mismatch = ft.dataset_mismatch(param.member, value)
    if not mismatch and isinstance(value, tf.data.Dataset):
      fitting.append(spec)
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
