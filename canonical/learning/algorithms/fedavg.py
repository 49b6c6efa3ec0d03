"""Federated averaging as an `IterativeProcess`, with TFF's builder and its names.

One round: the server broadcasts the model (through the broadcast process,
possibly encoded), every client trains it on its data with a fresh client
optimizer (`canonical.learning.client_update`), the deltas are averaged
weighted by the clients' example counts (through the aggregation process,
possibly encoded, possibly with error feedback kept at the clients), and the
server optimizer takes the negated mean delta as its gradient.
"""

from typing import NamedTuple

import tensorflow as tf

from canonical.aggregators import broadcast
from canonical.aggregators import mean
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import specs
from canonical.core import types as ft
from canonical import errors
from canonical.learning.client_update import client_update
from canonical.learning import model_fns
from canonical.learning import optimizers
from canonical.learning.server_update import server_update
from canonical.templates import iterative_process as process_lib
from canonical.templates import measured_process

tf_computation = specs.tf_computation
federated_computation = computations.federated_computation


class ServerState(NamedTuple):
  """What the server keeps between rounds."""
  model: object  # ModelWeights
  optimizer_state: object  # the server optimizer's state
  broadcast_state: object  # the broadcast process's (encoders') state
  aggregation_state: object  # the aggregation process's (encoders') state
  round_num: object  # int32 scalar: rounds done


def _default_server_optimizer():
  return optimizers.sgd(1.0)


def _check_process(process, expected_spec, role, builder, model_part):
  if not isinstance(process, measured_process.MeasuredProcess):
    raise errors.InvalidTypeError(
        f'build_federated_averaging_process: {role} must be a MeasuredProcess '
        f'(e.g. from {builder}), got {type(process).__name__}.')
  if not ft.same_member(process.value_spec, expected_spec):
    raise errors.FederatedError(
        f'build_federated_averaging_process: {role} {process.name!r} works on '
        f'{ft.describe(process.value_spec)}, but the model\'s {model_part} '
        f'are {ft.describe(expected_spec)}: build it from the same model_fn.')


def build_federated_averaging_process(
    model_fn, client_optimizer_fn,
    server_optimizer_fn=_default_server_optimizer, broadcast_process=None,
    aggregation_process=None, client_epochs=1):
  """Federated averaging as a `canonical.IterativeProcess`.

  Args:
    model_fn: no-argument function returning a `canonical.learning
      .FunctionalModel` (or a built `keras.Model`, wrapped with sparse
      cross-entropy on logits and accuracy); a `FunctionalModel` itself works too.
    client_optimizer_fn: no-argument function returning a pure optimizer
      (`canonical.learning.sgd(...)`); every client starts it afresh.
    server_optimizer_fn: the same, for the server (sgd(1.0): plain FedAvg;
      momentum or `adam` give FedAvgM / FedAdam).
    broadcast_process: a `MeasuredProcess` over the model weights, e.g.
      `build_encoded_broadcast_process_from_model`; default: plain broadcast.
    aggregation_process: a `MeasuredProcess` over the trainable weights, e.g.
      `build_encoded_mean_process_from_model`; default: plain weighted mean.
      If it keeps client state (error feedback), so does the returned process.
    client_epochs: passes over its data each client makes per round.

  The server state is a `ServerState`; client data is a `tf.data.Dataset` of
  `model.batch_spec` batches; metrics are 'loss' and 'accuracy' (means over
  every example trained on, across clients), 'num_examples', 'clients' and
  'non_finite_updates' (clients whose update was dropped as not finite).
  """
  who = 'build_federated_averaging_process'
  model = model_fns.functional_model_of(model_fn, who)
  client_optimizer = model_fns.optimizer_of(client_optimizer_fn,
                                        f'{who}: client_optimizer_fn')
  server_optimizer = model_fns.optimizer_of(server_optimizer_fn,
                                        f'{who}: server_optimizer_fn')
  client_epochs = model_fns.client_epochs_of(client_epochs, who)
  weights_spec = specs.plain(model.weights_spec)
  if broadcast_process is None:
    broadcast_process = broadcast.build_broadcast_process(weights_spec)
  if aggregation_process is None:
    aggregation_process = mean.build_weighted_mean_process(
        weights_spec.trainable)
  _check_process(broadcast_process, weights_spec, 'broadcast_process',
                 'build_encoded_broadcast_process_from_model', 'weights')
  _check_process(aggregation_process, weights_spec.trainable,
                 'aggregation_process', 'build_encoded_mean_process_from_model',
                 'trainable weights')
  if broadcast_process.has_client_state:
    raise errors.FederatedError(
        f'{who}: the broadcast process keeps client '
        'state; only the aggregation process may.')
  error_feedback = aggregation_process.has_client_state

  initial_weights = model.initial_model_weights

  def initial_server_state():
    weights = tf.nest.map_structure(tf.constant, initial_weights)
    return ServerState(weights, server_optimizer.init(weights.trainable),
                       broadcast_process.initialize(),
                       aggregation_process.initialize(),
                       tf.constant(0, tf.int32))

  initialize = tf_computation(initial_server_state)
  state_spec = specs.plain(initialize.result_spec)
  data_spec = tf.data.DatasetSpec(model.batch_spec)

  def train(dataset, weights):
    return client_update(model, client_optimizer, weights, dataset,
                         epochs=client_epochs)

  client_work = tf_computation(train, data_spec, weights_spec)
  client_output_spec = specs.plain(client_work.result_spec)

  def metric_sums(output):
    return dict(output.metrics, clients=tf.constant(1.0))

  client_metrics = tf_computation(metric_sums, client_output_spec)

  def server_step(state, mean_delta, new_broadcast_state,
                  new_aggregation_state):
    optimizer_state, weights = server_update(
        server_optimizer, state.optimizer_state, state.model, mean_delta)
    return ServerState(weights, optimizer_state, new_broadcast_state,
                       new_aggregation_state, state.round_num + 1)

  update_server = tf_computation(
      server_step, state_spec, weights_spec.trainable,
      broadcast_process.state_spec, aggregation_process.state_spec)

  def round_metrics(sums):
    means = model.mean_metrics(sums)
    means['num_examples'] = sums['num_examples'] / float(client_epochs)
    means['clients'] = sums['clients']
    means['non_finite_updates'] = sums['non_finite_updates']
    return means

  finish_metrics = tf_computation(round_metrics, client_metrics.result_spec)

  def one_round(state, data, residual=None):
    new_broadcast_state, weights = broadcast_process.next(
        state.broadcast_state, state.model)
    output = intrinsics.federated_map(client_work, (data, weights))
    delta, weight = output.weights_delta, output.num_examples
    if error_feedback:
      new_aggregation_state, mean_delta, new_residual = (
          aggregation_process.next(state.aggregation_state, delta, weight,
                                   residual))
    else:
      new_aggregation_state, mean_delta = aggregation_process.next(
          state.aggregation_state, delta, weight)
    sums = intrinsics.federated_sum(
        intrinsics.federated_map(client_metrics, output))
    new_state = intrinsics.federated_map(
        update_server,
        (state, mean_delta, new_broadcast_state, new_aggregation_state))
    metrics = intrinsics.federated_map(finish_metrics, sums)
    if error_feedback:
      return new_state, metrics, new_residual
    return new_state, metrics

  encoders = measured_process.describe_encoders(
      'broadcast', broadcast_process.value_spec, broadcast_process.encoders)
  encoders.update(measured_process.describe_encoders(
      'aggregation', aggregation_process.value_spec,
      aggregation_process.encoders))
  if error_feedback:

    @federated_computation(ft.server(state_spec), ft.clients(data_spec),
                           ft.clients(aggregation_process.value_spec))
    def federated_averaging(state, data, residual):
      return one_round(state, data, residual)

    return process_lib.IterativeProcess(
        initialize, federated_averaging,
        client_state_initializer=aggregation_process.client_state_initializer,
        encoders=encoders)

  @federated_computation(ft.server(state_spec), ft.clients(data_spec))
  def federated_averaging(state, data):  # pylint: disable=function-redefined
    return one_round(state, data)

  return process_lib.IterativeProcess(initialize, federated_averaging,
                                      encoders=encoders)
