"""TFF 0.87's `build_fed_eval`: federated evaluation as a `LearningProcess`.

Each round the server broadcasts its model weights (set them with
`set_model_weights`), every client evaluates them on its data, and the
metrics of the round and of all rounds so far (whose sums the state keeps)
come back as TFF reports them.
"""

import collections

import tensorflow as tf

from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import specs
from canonical.core import types as ft
from canonical import errors
from canonical.learning import evaluation
from canonical.learning import model_fns
from canonical.learning import templates
from canonical.learning.model import ModelWeights

tf_computation = specs.tf_computation


def build_fed_eval(model_fn, model_distributor=None, metrics_aggregator=None,
                   loop_implementation=None):
  """Federated evaluation of the state's model weights on client data."""
  del loop_implementation
  who = 'build_fed_eval'
  for name, value in (('model_distributor', model_distributor),
                      ('metrics_aggregator', metrics_aggregator)):
    if value is not None:
      raise errors.InvalidValueError(
          f'{who}: {name} is not supported here yet: the model is broadcast '
          'as it is and metrics are summed over clients.')
  model = model_fns.functional_model_of(model_fn, who)
  weights_spec = specs.plain(model.weights_spec)
  data_spec = tf.data.DatasetSpec(model.batch_spec)

  def evaluate(dataset, weights):
    return evaluation.evaluate(model, weights, dataset, count_batches=True)

  client_eval = tf_computation(evaluate, data_spec, weights_spec)
  sums_spec = specs.plain(client_eval.result_spec)
  initial_weights = model.initial_model_weights

  def initial_state():
    return templates.LearningAlgorithmState(
        global_model_weights=ModelWeights(*tf.nest.map_structure(
            tf.constant, initial_weights)),
        distributor=(),
        client_work={name: tf.constant(0.0) for name in sums_spec},
        aggregator=(), finalizer=())

  initialize = tf_computation(initial_state)
  state_spec = specs.plain(initialize.result_spec)

  def report(state, sums):
    totals = {name: state.client_work[name] + sums[name] for name in sums}
    metrics = collections.OrderedDict(
        current_round_metrics=evaluation.reported_metrics(model, sums),
        total_rounds_metrics=evaluation.reported_metrics(model, totals))
    return state._replace(client_work=totals), metrics

  finish = tf_computation(report, state_spec, sums_spec)

  @computations.federated_computation(ft.server(state_spec),
                                      ft.clients(data_spec))
  def next_fn(state, client_data):
    weights = intrinsics.federated_broadcast(state.global_model_weights)
    sums = intrinsics.federated_sum(
        intrinsics.federated_map(client_eval, (client_data, weights)))
    reported = intrinsics.federated_map(finish, (state, sums))
    metrics = collections.OrderedDict(
        distributor=(),
        client_work=collections.OrderedDict(eval=reported[1]),
        aggregator=(), finalizer=())
    return templates.LearningProcessOutput(reported[0], metrics)

  get, put = templates.model_weights_computations(state_spec, weights_spec)
  return templates.LearningProcess(initialize, next_fn, get, put)
