"""TFF 0.87's `DistributeAggregateForm`: a round as five federated
computations, each at one place or one crossing,

  server_prepare               (S@SERVER -> <C@SERVER, T@SERVER>)
  server_to_client_broadcast   (C@SERVER -> C@CLIENTS)
  client_work                  (<{D}@CLIENTS, C@CLIENTS> -> {U}@CLIENTS)
  client_to_server_aggregation (<T@SERVER, {U}@CLIENTS> -> R@SERVER)
  server_result                (<T@SERVER, R@SERVER> -> <S@SERVER, X@SERVER>)

made here from the round's canonical form: server_prepare maps `prepare`
(T is the state, with the secure sums' parameters when the state gives
them), client_work maps `work`, the aggregation is `federated_aggregate` of
`zero`/`accumulate`/`merge`/`report` and the form's secure sums, and
server_result maps `update`. So the round it rebuilds
(`get_computation_for_distribute_aggregate_form`) is the form's round, and
the same rebuilding gives `get_computation_for_map_reduce_form`.

Where TFF zips several values into a piece's struct of federated values,
these pieces pass one federated value of that struct (U, R, T), since a
federated computation here takes one federated value per parameter.
"""

import collections
import inspect
import re

import tensorflow as tf

from canonical.backends.mapreduce import form_utils
from canonical.compiler import graph_walk
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import naming
from canonical.core import specs
from canonical.core import types as ft
from canonical import errors
from canonical import form as form_lib
from canonical.secagg import sums as secure_sums_lib

_SECURE_INTRINSICS = {
    secure_sums_lib.BITWIDTH: intrinsics.federated_secure_sum_bitwidth,
    secure_sums_lib.MAX_INPUT: intrinsics.federated_secure_sum,
    secure_sums_lib.MODULAR: intrinsics.federated_secure_modular_sum,
}
_PIECES = ('server_prepare', 'server_to_client_broadcast', 'client_work',
           'client_to_server_aggregation', 'server_result')

PrepareResult = collections.namedtuple(
    'PrepareResult', ['intrinsic_args_from_before_comp', 'intermediate_state'])


class DistributeAggregateForm:
  """TFF's five-piece form of a round (see the module docstring), checked
  to connect: each piece a federated computation at its place, the broadcast
  and aggregation pieces only crossing, and their types joining up."""

  def __init__(self, type_signature, server_prepare,
               server_to_client_broadcast, client_work,
               client_to_server_aggregation, server_result):
    pieces = dict(zip(_PIECES, (server_prepare, server_to_client_broadcast,
                                client_work, client_to_server_aggregation,
                                server_result)))
    for label, comp in pieces.items():
      if not isinstance(comp, computations.FederatedComputation):
        raise errors.InvalidTypeError(
            f'DistributeAggregateForm: {label} must be a '
            f'federated_computation, got {naming.describe_object(comp)}.')
    _check_pieces(pieces)
    self._type_signature = type_signature
    self._pieces = pieces
    round_type = str(get_computation_for_distribute_aggregate_form(
        self).type_signature)
    if _without_labels(round_type) != _without_labels(str(type_signature)):
      raise errors.InvalidTypeError(
          f'DistributeAggregateForm: type_signature is {type_signature}, but '
          f'the pieces make a round of type {round_type}.')

  @property
  def type_signature(self):
    return self._type_signature

  @property
  def server_prepare(self):
    return self._pieces['server_prepare']

  @property
  def server_to_client_broadcast(self):
    return self._pieces['server_to_client_broadcast']

  @property
  def client_work(self):
    return self._pieces['client_work']

  @property
  def client_to_server_aggregation(self):
    return self._pieces['client_to_server_aggregation']

  @property
  def server_result(self):
    return self._pieces['server_result']

  def summary(self, print_fn=print):
    """One line per piece, its name and type, as TFF prints them."""
    for label in _PIECES:
      print_fn(f'{label:<28}: {self._pieces[label].type_signature}')


def _without_labels(text):
  """A type's text without its element names (the rebuilt round names its
  parts as it may, TFF's leaves its result unnamed)."""
  return re.sub(r'\b\w+=', '', text)


def _check_pieces(pieces):
  """Each piece's parameters and places, and the types joining them."""
  where = 'DistributeAggregateForm'
  graphs = {label: comp.trace() for label, comp in pieces.items()}
  counts = dict(server_prepare=1, server_to_client_broadcast=1,
                client_work=2, client_to_server_aggregation=2,
                server_result=2)
  for label, count in counts.items():
    if len(graphs[label].parameters) != count:
      raise errors.InvalidTypeError(
          f'{where}: {label} must take {count} federated value(s); it has '
          f'type {pieces[label].type_signature}.')
  for label, allowed, what in (
      ('server_to_client_broadcast', graph_walk.is_broadcast, 'broadcasts'),
      ('client_to_server_aggregation', graph_walk.is_aggregation,
       'aggregations')):
    for op in graphs[label].ops:
      if graph_walk.is_boundary(op) and not allowed(op):
        raise errors.FederatedError(
            f'{where}: {label} may only hold {what}; it holds '
            f'{op.describe()}.')
  for label, placement in (('server_prepare', ft.SERVER),
                           ('client_work', ft.CLIENTS),
                           ('server_result', ft.SERVER)):
    for op in graphs[label].ops:
      if graph_walk.is_boundary(op) or op.output.placement != placement:
        raise errors.FederatedError(
            f'{where}: {label} runs at {placement} only; it holds '
            f'{op.describe()}.')
  prepared = pieces['server_prepare'].result_types
  joins = (
      ('server_to_client_broadcast', 0, prepared[0]),
      ('client_work', 1, pieces['server_to_client_broadcast'].result_types),
      ('client_to_server_aggregation', 0, prepared[1]),
      ('client_to_server_aggregation', 1, pieces['client_work'].result_types),
      ('server_result', 0, prepared[1]),
      ('server_result', 1,
       pieces['client_to_server_aggregation'].result_types),
  )
  for label, index, given in joins:
    taken = pieces[label].parameter_types[index]
    if not _same_type(taken, given):
      raise errors.InvalidTypeError(
          f'{where}: {label} takes {taken} as its parameter {index}, but is '
          f'given {ft.describe(given)}.')


def _same_type(taken, given):
  return (isinstance(given, ft.FederatedType) and
          given.placement == taken.placement and
          ft.same_member(given.member, taken.member))


def named(fn, names):
  """`fn` with its parameters named `names` (the round's labels), which a
  federated computation's type shows."""
  fn.__signature__ = inspect.Signature([
      inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD)
      for name in names])
  return fn


def _secure_sum(entry, index, temporary_state, value, value_member):
  """Secure sum `index` of the clients' `value`: its parameter is its
  constants, or the server value the state gave (in the temporary state),
  which for a noised sum also holds its local stddev."""
  given = temporary_state[1][index] if _from_server_state(entry) else None
  if entry.static_parameters is not None:
    parameter = tf.nest.pack_sequence_as(value_member,
                                         list(entry.static_parameters))
  else:
    parameter = given[0] if entry.noise else given
  if entry.noise:
    return intrinsics.federated_secure_modular_sum_with_client_noise(
        value, parameter, entry.noise, given[1])
  return _SECURE_INTRINSICS[entry.kind](value, parameter)


def _from_server_state(entry):
  """Whether the server state gives the secure sum's parameter or stddev."""
  return entry.static_parameters is None or entry.noise is not None


def distribute_aggregate_form_of(form: form_lib.CanonicalForm,
                                 where: str) -> DistributeAggregateForm:
  """The `DistributeAggregateForm` running `form`'s round; FederatedError
  for a form keeping client state or per-client outputs (beyond TFF's
  round type)."""
  for has, what in ((form.has_client_state, 'client state'),
                    (form.has_client_outputs, 'per-client outputs')):
    if has:
      raise errors.FederatedError(
          f'{where}: form {form.name!r} has {what}, which TFF\'s round '
          '(<S@SERVER,{D}@CLIENTS> -> <S@SERVER,X@SERVER>) does not take; '
          'run the form itself with canonical.run_round or the Beam runner.')

  def tf_of(piece, fn=None):
    return specs.tf_computation(fn or piece.function, *piece.input_specs)

  state_spec = form.state_spec
  secure = form.secure_sums
  from_state = any(_from_server_state(entry) for entry in secure)
  prepare = tf_of(form.prepare)
  parameters = tf_of(form.secure_parameters) if from_state else None
  work = tf_of(form.work, lambda d, c: form.work.function(d, c)[0])
  update = tf_of(form.update)
  updated_spec = (state_spec, form.update.output_spec[1])
  new_state = specs.tf_computation(lambda u: u[0], updated_spec)
  server_output = specs.tf_computation(lambda u: u[1], updated_spec)
  aggregation = [tf_of(getattr(form, name))
                 for name in ('zero', 'accumulate', 'merge', 'report')]
  at_server = ft.server
  temporary = (at_server((state_spec, form.secure_parameters.output_spec))
               if from_state else at_server(state_spec))
  update_member = form.work.output_spec[0]
  labels = form.result_labels
  # The round's result named as the round names it (`state`, `metrics`).
  result_type = (collections.namedtuple('RoundResult', labels)
                 if len(labels) == 2 and all(labels) else
                 lambda *parts: parts)

  def server_prepare(server_state):
    context = intrinsics.federated_map(prepare, server_state)
    state = server_state
    if from_state:
      state = intrinsics.federated_zip(
          (server_state, intrinsics.federated_map(parameters, server_state)))
    return PrepareResult(context, state)

  def server_to_client_broadcast(context_at_server):
    return intrinsics.federated_broadcast(context_at_server)

  def client_work(client_data, context_at_clients):
    return intrinsics.federated_map(work, (client_data, context_at_clients))

  def client_to_server_aggregation(temporary_state, client_updates):
    plain = client_updates.plain if secure else client_updates
    reported = intrinsics.federated_aggregate(plain, *aggregation)
    if not secure:
      return reported
    sums = tuple(
        _secure_sum(entry, i, temporary_state, client_updates.secure[i],
                    update_member.secure[i])
        for i, entry in enumerate(secure))
    return intrinsics.federated_zip((reported, sums))

  def server_result(temporary_state, aggregate):
    state = temporary_state[0] if from_state else temporary_state
    updated = intrinsics.federated_map(update, (state, aggregate))
    return result_type(intrinsics.federated_map(new_state, updated),
                       intrinsics.federated_map(server_output, updated))

  def federated(fn, *parameter_types):
    return computations.FederatedComputation(fn, parameter_types,
                                             name=fn.__name__)

  prepare_comp = federated(server_prepare, at_server(state_spec))
  broadcast_comp = federated(server_to_client_broadcast,
                             at_server(form.broadcast_spec))
  work_comp = federated(client_work, ft.clients(form.client_data_spec),
                        ft.clients(form.broadcast_spec))
  aggregation_comp = federated(client_to_server_aggregation, temporary,
                               ft.clients(update_member))
  aggregate_member = form.server_aggregate(form.report.output_spec,
                                           form.secure_update_spec)
  result_comp = federated(server_result, temporary,
                          at_server(aggregate_member))
  return DistributeAggregateForm(
      form.type_signature, prepare_comp, broadcast_comp, work_comp,
      aggregation_comp, result_comp)


def get_distribute_aggregate_form_for_computation(
    comp, *, tff_internal_preprocessing=None) -> DistributeAggregateForm:
  """The `DistributeAggregateForm` of `comp`, a round of TFF's MapReduce
  shape, made from its canonical form (so a round the form cannot express
  is refused naming why, as `get_map_reduce_form_for_computation` does)."""
  where = 'get_distribute_aggregate_form_for_computation'
  form = form_utils.form_of(where, comp, tff_internal_preprocessing)
  return distribute_aggregate_form_of(form, where)


def get_computation_for_distribute_aggregate_form(
    daf: DistributeAggregateForm):
  """The federated computation `(<S@SERVER,{D}@CLIENTS> ->
  <S@SERVER,X@SERVER>)` running `daf`'s five pieces in turn."""
  if not isinstance(daf, DistributeAggregateForm):
    raise errors.InvalidTypeError(
        'get_computation_for_distribute_aggregate_form: expected a '
        f'DistributeAggregateForm, got {naming.describe_object(daf)}.')
  prepare, broadcast, work, aggregation, result = (
      daf.server_prepare, daf.server_to_client_broadcast, daf.client_work,
      daf.client_to_server_aggregation, daf.server_result)

  def round_fn(server_state, client_data):
    context_at_server, temporary_state = prepare(server_state)
    context_at_clients = broadcast(context_at_server)
    client_updates = work(client_data, context_at_clients)
    aggregate = aggregation(temporary_state, client_updates)
    updated_state, server_output = result(temporary_state, aggregate)
    return updated_state, server_output

  labels = form_utils.labels_of(getattr(daf.type_signature, 'parameter',
                                        None))
  if len(labels) != 2:
    labels = ('server_state', 'client_data')
  return computations.FederatedComputation(
      named(round_fn, labels), (prepare.parameter_types[0],
                                 work.parameter_types[0]),
      name='distribute_aggregate_round', location=naming.user_location())
