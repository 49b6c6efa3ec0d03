"""TFF 0.87's `get_computation_for_map_reduce_form` and
`get_computation_for_broadcast_form`: a form back to the federated
computation it runs, so a TFF program can check that the lowering kept the
computation's meaning (run both, compare).

A MapReduce form's round is rebuilt through its `DistributeAggregateForm`
(`distribute_aggregate`): broadcast what `prepare` makes, `work` at each
client, aggregate by `zero`/`accumulate`/`merge`/`report` and the secure
sums, `update` at the server. A form keeping client state or per-client
outputs (ours, beyond TFF's form) is refused by name: it runs as a form,
by `canonical.run_round` or the Beam runner.
"""

from canonical.backends.mapreduce import broadcast_form as broadcast_lib
from canonical.backends.mapreduce import distribute_aggregate
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import naming
from canonical.core import types as ft
from canonical import errors
from canonical import form as form_lib


def get_computation_for_map_reduce_form(mrf):
  """The federated computation `(<S@SERVER,{D}@CLIENTS> ->
  <S@SERVER,X@SERVER>)` running one round of `mrf` by its pieces."""
  where = 'get_computation_for_map_reduce_form'
  if not isinstance(mrf, form_lib.CanonicalForm):
    raise errors.InvalidTypeError(
        f'{where}: expected a MapReduceForm, got '
        f'{naming.describe_object(mrf)}.')
  return distribute_aggregate.get_computation_for_distribute_aggregate_form(
      distribute_aggregate.distribute_aggregate_form_of(mrf, where))


def get_computation_for_broadcast_form(bf):
  """The federated computation `(<S@SERVER,{D}@CLIENTS> -> {R}@CLIENTS)` of
  `bf`: its server context broadcast, and `client_processing` at each
  client on the context and the client's data."""
  if not isinstance(bf, broadcast_lib.BroadcastForm):
    raise errors.InvalidTypeError(
        'get_computation_for_broadcast_form: expected a BroadcastForm, got '
        f'{naming.describe_object(bf)}.')
  server_context = bf.compute_server_context
  client_processing = bf.client_processing

  def computation(server_data, client_data):
    context_at_server = intrinsics.federated_map(server_context, server_data)
    context_at_clients = intrinsics.federated_broadcast(context_at_server)
    return intrinsics.federated_map(client_processing,
                                    (context_at_clients, client_data))

  labels = (bf.server_data_label or 'server_data',
            bf.client_data_label or 'client_data')
  return computations.FederatedComputation(
      distribute_aggregate.named(computation, labels),
      (ft.server(server_context.parameter_specs[0]),
       ft.clients(client_processing.parameter_specs[1])),
      name='broadcast_round', location=naming.user_location())
