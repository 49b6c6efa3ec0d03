"""Federated computations called from Python, run as their compiled form.

TFF compiles a computation when Python first calls it; so does this. A call
of a round-shaped computation (server state and client data in, and client
state where it keeps one; the new state, metrics and, if it has them, client
states and per-client outputs out: what `process.next` is) compiles it once,
cached with the computation, into a `CanonicalForm`, and runs the form's
pieces in `run_round`: clients' datasets read once as element lists
(`dataset_elements`), and their work batched into one TensorFlow call
where the form allows (`batched_work`). The result is what the reference
executor gives, in its structures, bit for bit: clients fold in order, as
the reference folds them. A computation the compiler refuses (another
shape, say) runs by the reference executor.
"""

import warnings
import weakref

import tensorflow as tf
from tensorflow.python.util import nest

from canonical import compiler
from canonical.core import computations
from canonical.core import ir
from canonical.core import types as ft
from canonical import errors
from canonical.executors import dataset_elements
from canonical.executors import local
from canonical.executors import reference
from canonical.templates import iterative_process

# Per computation: its `_CompiledRound`, or None where it runs by the
# reference executor.
_ROUNDS = weakref.WeakKeyDictionary()

# From this many clients in a call, their datasets are read as elements and
# their work batched: that costs a trace of about a second, once per form,
# and then about a millisecond a client. Fewer clients run work on their
# datasets as given, one call each (tens of milliseconds a client, no trace).
BATCH_FROM = 8


def run(computation, *args, default_num_clients=0):
  """Runs `computation` on `args` (as `reference.run` takes them): by its
  compiled form where it has one, else by the reference executor."""
  compiled = compiled_round(computation)
  if compiled is None:
    return reference.run(computation, *args,
                         default_num_clients=default_num_clients)
  return compiled(computation, args)


def compiled_round(computation):
  """The `_CompiledRound` of `computation` (compiled on first use), or None
  if it is not a round the compiler takes."""
  try:
    return _ROUNDS[computation]
  except (KeyError, TypeError):
    pass
  compiled = _CompiledRound.of(computation)
  try:
    _ROUNDS[computation] = compiled
  except TypeError:
    pass  # Not weakly referenceable: compiled again at the next call.
  return compiled


def _zeros(member, name):
  """A no-argument tf_computation of zeros of `member`: the form's
  initialize and new-client state, which a call from Python never runs
  (the caller gives the state)."""

  def zero(spec):
    return tf.zeros([d or 0 for d in spec.shape.as_list()], spec.dtype)

  return computations.TFComputation(
      lambda: tf.nest.map_structure(zero, member), (), name=name)


def _is_round_shaped(computation):
  if not isinstance(computation, computations.FederatedComputation):
    return False
  placements = [t.placement for t in computation.parameter_types]
  if placements not in ([ft.SERVER, ft.CLIENTS],
                        [ft.SERVER, ft.CLIENTS, ft.CLIENTS]):
    return False
  members = [t.member for t in computation.parameter_types]
  if ft.has_dataset(members[0]) or (len(members) == 3 and
                                    ft.has_dataset(members[2])):
    return False
  return all(isinstance(s, tf.TensorSpec) and s.shape.rank is not None
             for m in members[::2] for s in tf.nest.flatten(m))


class _CompiledRound:
  """A round-shaped computation's form, and how its results map onto the
  values the computation returns. (It holds no reference to the
  computation, which keys it in a weak dictionary.)"""

  def __init__(self, computation, form, process):
    self._form = form
    self._graph = computation.trace()
    # `next` as compiled: a computation returning only the state is a
    # round with empty metrics to the compiler.
    self._state_only = isinstance(process.next,
                                  iterative_process.StateOnlyNext) and (
                                      process.next is not computation)
    parts = process.next.trace().result
    self._parts = list(parts)

  @classmethod
  def of(cls, computation):
    if not _is_round_shaped(computation):
      return None
    if any(isinstance(v, ir.Unplaced)
           for v in tf.nest.flatten(computation.trace().result)):
      return None
    state_member = computation.parameter_types[0].member
    client_state = None
    if len(computation.parameter_types) == 3:
      client_state = _zeros(computation.parameter_types[2].member,
                            f'zeros_of_{computation.name}_client_state')
    try:
      process = iterative_process.IterativeProcess(
          _zeros(state_member, f'zeros_of_{computation.name}'), computation,
          client_state_initializer=client_state)
      form = compiler.compile(process)
    except errors.Error:
      return None  # Not a round the form expresses: the reference runs it.
    except Exception as e:  # pylint: disable=broad-except
      # A fault of the compiler's, not the user's: say so, and still run.
      warnings.warn(
          f'{computation.describe_for_error()} failed to compile '
          f'({type(e).__name__}: {e}); it runs by the reference executor.',
          RuntimeWarning, stacklevel=4)
      return None
    return cls(computation, form, process)

  def __call__(self, computation, args):
    form = self._form
    args, _ = reference.arguments(computation, self._graph, args,
                                  element_lists=True)
    data = args[1]
    if len(data) >= BATCH_FROM:
      data = [self._client_input(d) for d in data]
    client_states = args[2] if form.has_client_state else None
    result = local.run_round(form, args[0], data, client_states)
    return self._returned(result, len(data))

  def _client_input(self, data):
    """A client's data as work takes it fastest: a dataset's elements
    (read once) where work reads them unrolled."""
    if not isinstance(data, tf.data.Dataset) or (
        self._form.work.unrolled() is None):
      return data
    read = dataset_elements.encoded(data)
    return data if read is None else read

  def _returned(self, result, num_clients):
    """`run_round`'s result as the reference executor returns the
    computation's: each federated value in its own structure, a CLIENTS
    one as a list over clients."""
    form = self._form
    values = [result[0], result[1]]
    position = 2
    if form.has_client_state:
      values.append(result[position])
      position += 1
    if form.has_client_outputs:
      values.append(result[position])
    parts = [_server_part(part, value)
             for part, value in zip(self._parts[:2], values[:2])]
    parts += [_clients_part(part, value, num_clients)
              for part, value in zip(self._parts[2:], values[2:])]
    returned = _like(self._parts_container(), parts)
    return returned[0] if self._state_only else returned

  def _parts_container(self):
    result = self._graph.result
    if self._state_only:
      return (result, ())
    return result


def _like(container, parts):
  if isinstance(container, tuple) and hasattr(container, '_fields'):
    return type(container)(*parts)
  if isinstance(container, (tuple, list)):
    return type(container)(parts)
  raise errors.FederatedError(
      f'unexpected round result container {type(container).__name__}')


def _split(values, flat):
  """`flat` leaves dealt to the federated `values` (a structure), each
  packed in its member's structure (attrs classes included, as the
  reference gives them)."""
  packed, position = [], 0
  for value in tf.nest.flatten(values):
    count = len(tf.nest.flatten(value.member))
    member = tf.nest.pack_sequence_as(value.member,
                                      flat[position:position + count])
    packed.append(ft.with_attrs_containers(value.member, member))
    position += count
  return tf.nest.pack_sequence_as(values, packed)


def _server_part(values, value):
  return _split(values, tf.nest.flatten(value))


def _clients_part(values, per_client, num_clients):
  """One structure per client (`per_client`) as the reference returns a
  CLIENTS part: a list over clients at each federated value."""
  split = [_split(values, tf.nest.flatten(v)) for v in per_client]
  if not split:
    return tf.nest.map_structure(lambda _: [], values)
  return nest.map_structure_up_to(values, lambda *entries: list(entries),
                                  *split)
