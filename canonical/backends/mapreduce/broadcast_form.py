"""TFF 0.87's `BroadcastForm`: a computation `(<S@SERVER,{D}@CLIENTS> ->
{R}@CLIENTS)` with no aggregation, as a server context sent to every client
and a client computation of it and the client's data.

It is a round of the canonical form with nothing aggregated and R as the
per-client outputs, so the compiler makes it: `compute_server_context` runs
the form's prepare, `client_processing` its work.
"""

import tensorflow as tf

from canonical.backends.mapreduce import form_utils
from canonical import compiler
from canonical.core import computations
from canonical.core.intrinsics import registry
from canonical.core import types as ft
from canonical import errors
from canonical.templates import iterative_process

_SHAPE = '(<S@SERVER,{D}@CLIENTS> -> {R}@CLIENTS)'


class BroadcastForm:
  """`compute_server_context (S -> C)` and `client_processing (<C, D> ->
  R)`, tf_computations."""

  def __init__(self, compute_server_context, client_processing,
               server_data_label=None, client_data_label=None):
    self.compute_server_context = compute_server_context
    self.client_processing = client_processing
    self.server_data_label = server_data_label
    self.client_data_label = client_data_label

  def summary(self, print_fn=print):
    for label, comp in (('compute_server_context',
                         self.compute_server_context),
                        ('client_processing', self.client_processing)):
      print_fn(f'{label:<22}: {comp.type_signature}')


def get_broadcast_form_for_computation(
    comp, grappler_config=form_utils.GRAPPLER_DEFAULT_CONFIG, *,
    tff_internal_preprocessing=None):
  """The `BroadcastForm` of `comp`; raises `FederatedError` naming why it
  has none (its signature, an aggregation, a value no form can send)."""
  where = 'get_broadcast_form_for_computation'
  form_utils.check_options(where, grappler_config,
                           tff_internal_preprocessing)
  _check(where, comp)
  server_type, client_type = comp.parameter_types

  def broadcast_round(server_data, client_data):
    return server_data, (), comp(server_data, client_data)

  round_fn = computations.FederatedComputation(
      broadcast_round, (server_type, client_type), name=comp.name,
      location=comp.location)
  initialize = form_utils.zeros(where, comp, server_type.member)
  form = compiler.compile(iterative_process.IterativeProcess(initialize,
                                                             round_fn))
  context = form.broadcast_spec
  server = computations.TFComputation(
      form.prepare, (server_type.member,), name='compute_server_context',
      location=comp.location)
  client = computations.TFComputation(
      lambda context, data: form.work(data, context)[1],
      (context, client_type.member), name='client_processing',
      location=comp.location)
  labels = [v.name for v in comp.trace().parameters]
  return BroadcastForm(server, client, *labels)


def _check(where, comp):
  what = form_utils.server_and_clients_computation(
      where, comp, _SHAPE, 'server data', 'client data')
  graph = comp.trace()
  leaves = tf.nest.flatten(graph.result)
  if not leaves or any(v.placement != ft.CLIENTS for v in leaves):
    raise errors.FederatedError(
        f'{what} must return a value placed at CLIENTS, {_SHAPE}; it returns '
        f'{form_utils.describe_result(graph.result)}.')
  for op in graph.ops:
    if registry.of(op).aggregates:
      raise errors.FederatedError(
          f'{what} aggregates ({op.describe()}); a BroadcastForm only sends '
          'from the server to the clients (get_map_reduce_form_for_'
          'computation takes rounds that aggregate).')
