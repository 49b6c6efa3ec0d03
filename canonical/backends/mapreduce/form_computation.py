"""TFF 0.87's `get_computation_for_map_reduce_form`: a form back to the
federated computation of its round, so a TFF program can check that the
lowering kept the round's meaning (run both, compare).

The round is the form's pieces joined by the intrinsics they stand for:
broadcast what `prepare` makes, `work` at each client, aggregate its U by
`zero`/`accumulate`/`merge`/`report`, `update` at the server. A form with
secure sums, client state or per-client outputs (the last two are ours,
beyond TFF's form) is refused by name: it runs as a form, by
`canonical.run_round` or the Beam runner, which run the secure sums'
masking protocol and keep the clients' state.
"""

from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import naming
from canonical.core import specs
from canonical.core import types as ft
from canonical import errors
from canonical import form as form_lib

_WHERE = 'get_computation_for_map_reduce_form'


def get_computation_for_map_reduce_form(mrf):
  """The federated computation `(<S@SERVER,{D}@CLIENTS> ->
  <S@SERVER,X@SERVER>)` running one round of `mrf` by its pieces."""
  if not isinstance(mrf, form_lib.CanonicalForm):
    raise errors.InvalidTypeError(
        f'{_WHERE}: expected a MapReduceForm, got '
        f'{naming.describe_object(mrf)}.')
  for has, what in ((mrf.has_secure_sums, 'secure sums'),
                    (mrf.has_client_state, 'client state'),
                    (mrf.has_client_outputs, 'per-client outputs')):
    if has:
      raise errors.FederatedError(
          f'{_WHERE}: form {mrf.name!r} has {what}, which this round '
          'computation does not rebuild; run the form itself with '
          'canonical.run_round or the Beam runner.')

  def computation(piece, fn=None):
    return specs.tf_computation(fn or piece.function, *piece.input_specs)

  prepare = computation(mrf.prepare)
  work = computation(mrf.work, lambda d, c: mrf.work.function(d, c)[0])
  zero = computation(mrf.zero)
  accumulate = computation(mrf.accumulate)
  merge = computation(mrf.merge)
  report = computation(mrf.report)
  update = computation(mrf.update)
  state_spec = mrf.state_spec
  updated_spec = (state_spec, mrf.update.output_spec[1])
  new_state = specs.tf_computation(lambda updated: updated[0], updated_spec)
  server_output = specs.tf_computation(lambda updated: updated[1],
                                       updated_spec)

  def round_fn(state, client_data):
    broadcast = intrinsics.federated_broadcast(
        intrinsics.federated_map(prepare, state))
    client_updates = intrinsics.federated_map(work, (client_data, broadcast))
    aggregate = intrinsics.federated_aggregate(client_updates, zero,
                                               accumulate, merge, report)
    updated = intrinsics.federated_map(update, (state, aggregate))
    return (intrinsics.federated_map(new_state, updated),
            intrinsics.federated_map(server_output, updated))

  round_fn.__name__ = mrf.name
  return computations.federated_computation(
      ft.server(state_spec), ft.clients(mrf.client_data_spec))(round_fn)

