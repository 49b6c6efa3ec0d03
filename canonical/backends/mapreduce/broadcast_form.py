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
from canonical.core import naming
from canonical.core.intrinsics import registry
from canonical.core import types as ft
from canonical import errors
from canonical.templates import iterative_process

_SHAPE = '(<S@SERVER,{D}@CLIENTS> -> {R}@CLIENTS)'


class BroadcastForm:
  """`compute_server_context (S -> C)` and `client_processing (<C, D> ->
  R)`, tf_computations whose types connect; the labels name the round's
  server and client data parameters."""

  def __init__(self, compute_server_context, client_processing,
               server_data_label=None, client_data_label=None):
    for label, comp, arity in (
        ('compute_server_context', compute_server_context, 1),
        ('client_processing', client_processing, 2)):
      if not isinstance(comp, computations.TFComputation) or len(
          comp.parameter_specs) != arity:
        raise errors.InvalidTypeError(
            f'BroadcastForm: {label} must be a tensorflow.computation of '
            f'{arity} parameter(s), got {naming.describe_object(comp)}.')
    context = compute_server_context.result_spec
    if not ft.same_member(client_processing.parameter_specs[0], context):
      raise errors.InvalidTypeError(
          'BroadcastForm: client_processing takes the context as '
          f'{ft.describe(client_processing.parameter_specs[0])}, but '
          f'compute_server_context makes {ft.describe(context)}.')
    for label, value in (('server_data_label', server_data_label),
                         ('client_data_label', client_data_label)):
      if value is not None and not isinstance(value, str):
        raise errors.InvalidTypeError(
            f'BroadcastForm: {label} must be a string or None, got '
            f'{naming.describe_object(value)}.')
    self._compute_server_context = compute_server_context
    self._client_processing = client_processing
    self._server_data_label = server_data_label
    self._client_data_label = client_data_label

  @property
  def compute_server_context(self):
    return self._compute_server_context

  @property
  def client_processing(self):
    return self._client_processing

  @property
  def server_data_label(self):
    return self._server_data_label

  @property
  def client_data_label(self):
    return self._client_data_label

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
