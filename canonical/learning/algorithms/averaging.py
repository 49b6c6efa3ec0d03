"""TFF 0.87's federated averaging and its kin: `build_weighted_fed_avg`,
`build_unweighted_fed_avg`, `build_weighted_fed_prox` and `build_fed_sgd`,
as `LearningProcess`es with TFF's state and metrics.

One round: the server broadcasts the model and the client optimizer's
hyperparameters; each client trains from a fresh client optimizer state
and sends `initial - trained` trainable weights; the model aggregator (any
`tff.aggregators` factory: encoded, clipped, private, secure) averages them,
weighted by example counts or not; the server optimizer takes that mean as
its gradient, unless it is not finite (then the model stays, and the
finalizer's `update_non_finite` says 1). FedProx adds a proximal term to
the clients' loss; FedSGD's clients send their mean gradient instead of
training.
"""

import collections
import enum
from typing import Callable, NamedTuple

import tensorflow as tf

from canonical import aggregators
from canonical import errors
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import specs
from canonical.core import types as ft
from canonical.learning.client_update import client_gradient
from canonical.learning.client_update import client_update
from canonical.learning import evaluation
from canonical.learning import model_fns
from canonical.learning import optimizers
from canonical.learning import templates
from canonical.learning.model import ModelWeights

tf_computation = specs.tf_computation
WEIGHT_SPEC = tf.TensorSpec([], tf.float32)


class ClientWeighting(enum.Enum):
  """TFF's `tff.learning.ClientWeighting`: how a client's update counts."""
  UNIFORM = 1
  NUM_EXAMPLES = 2


def build_weighted_fed_avg(model_fn, client_optimizer_fn,
                           server_optimizer_fn=None, client_weighting=None,
                           model_distributor=None, model_aggregator=None,
                           metrics_aggregator=None, loop_implementation=None):
  """FedAvg with client updates weighted by their example counts (TFF's
  default); `model_aggregator` a `WeightedAggregationFactory` (default
  `MeanFactory()`)."""
  del loop_implementation  # Clients always loop with Dataset.reduce here.
  who = 'build_weighted_fed_avg'
  _refuse_unsupported(who, model_distributor, metrics_aggregator)
  return _build(who, model_fn, _training(who, client_optimizer_fn),
                server_optimizer_fn, model_aggregator, weighted=True,
                by_examples=_by_examples(who, client_weighting))


def build_unweighted_fed_avg(model_fn, client_optimizer_fn,
                             server_optimizer_fn=None, model_distributor=None,
                             model_aggregator=None, metrics_aggregator=None,
                             loop_implementation=None):
  """FedAvg with every client's update counting the same;
  `model_aggregator` an `UnweightedAggregationFactory` (default
  `UnweightedMeanFactory()`)."""
  del loop_implementation
  who = 'build_unweighted_fed_avg'
  _refuse_unsupported(who, model_distributor, metrics_aggregator)
  return _build(who, model_fn, _training(who, client_optimizer_fn),
                server_optimizer_fn, model_aggregator, weighted=False,
                by_examples=False)


def build_weighted_fed_prox(model_fn, proximal_strength, client_optimizer_fn,
                            server_optimizer_fn=None, client_weighting=None,
                            model_distributor=None, model_aggregator=None,
                            metrics_aggregator=None, loop_implementation=None):
  """FedProx: FedAvg whose clients' loss adds `proximal_strength` / 2 times
  the squared distance to the broadcast model."""
  del loop_implementation
  who = 'build_weighted_fed_prox'
  if isinstance(proximal_strength, bool) or not isinstance(
      proximal_strength, (int, float)) or proximal_strength < 0:
    raise errors.InvalidValueError(
        f'{who}: proximal_strength must be a non-negative number, got '
        f'{proximal_strength!r}.')
  _refuse_unsupported(who, model_distributor, metrics_aggregator)
  return _build(who, model_fn,
                _training(who, client_optimizer_fn, float(proximal_strength)),
                server_optimizer_fn, model_aggregator, weighted=True,
                by_examples=_by_examples(who, client_weighting))


def build_fed_sgd(model_fn, server_optimizer_fn=None, model_distributor=None,
                  model_aggregator=None, metrics_aggregator=None,
                  loop_implementation=None):
  """FedSGD: each client sends the gradient of its mean loss at the
  broadcast model, weighted by its example count; the server optimizer
  (default `build_sgdm(learning_rate=0.1)`) takes the mean gradient."""
  del loop_implementation
  who = 'build_fed_sgd'
  _refuse_unsupported(who, model_distributor, metrics_aggregator)
  return _build(who, model_fn, _gradient,
                server_optimizer_fn or optimizers.build_sgdm(
                    learning_rate=0.1),
                model_aggregator, weighted=True, by_examples=True)


def _by_examples(who, client_weighting):
  client_weighting = client_weighting or ClientWeighting.NUM_EXAMPLES
  if not isinstance(client_weighting, ClientWeighting):
    raise errors.InvalidValueError(
        f'{who}: client_weighting must be a tff.learning.ClientWeighting '
        f'(UNIFORM or NUM_EXAMPLES), got {client_weighting!r}.')
  return client_weighting is ClientWeighting.NUM_EXAMPLES


class _ClientStep(NamedTuple):
  """What a client does with the broadcast model: `hparams(specs)` is the
  client_work state (broadcast every round), `run(model, dataset, weights,
  hparams)` gives `(update, num_examples, metric sums)`."""
  hparams: Callable
  run: Callable


def _training(who, client_optimizer_fn, proximal_strength=0.0):
  """Local training from a fresh client optimizer with the state's
  hyperparameters; the update is initial minus trained weights."""
  optimizer = model_fns.optimizer_of(client_optimizer_fn,
                                     f'{who}: client_optimizer_fn')

  def hparams(trainable_specs):
    return optimizer.get_hparams(optimizer.initialize(trainable_specs))

  def run(model, dataset, weights, hparams):
    fresh = optimizer.initialize(
        tf.nest.map_structure(tf.TensorSpec.from_tensor, weights.trainable))
    output = client_update(
        model, optimizer, weights, dataset,
        optimizer_state=optimizer.set_hparams(fresh, hparams),
        count_batches=True, proximal_strength=proximal_strength)
    # TFF sends initial minus trained: the server optimizer descends it.
    update = tuple(-d for d in output.weights_delta)
    return update, output.num_examples, output.metrics

  return _ClientStep(hparams, run)


def _run_gradient(model, dataset, weights, hparams):
  del hparams  # FedSGD's clients have none.
  return client_gradient(model, weights, dataset)


_gradient = _ClientStep(lambda trainable_specs: (), _run_gradient)


def _refuse_unsupported(who, model_distributor, metrics_aggregator):
  for name, value in (('model_distributor', model_distributor),
                      ('metrics_aggregator', metrics_aggregator)):
    if value is not None:
      raise errors.InvalidValueError(
          f'{who}: {name} is not supported here yet: the model is broadcast '
          'as it is and metrics are summed over clients.')


def _aggregation_process(who, factory, trainable_spec, weighted):
  if factory is None:
    factory = (aggregators.MeanFactory() if weighted else
               aggregators.UnweightedMeanFactory())
  kind = (aggregators.WeightedAggregationFactory if weighted else
          aggregators.UnweightedAggregationFactory)
  if not isinstance(factory, kind):
    raise errors.InvalidTypeError(
        f'{who}: model_aggregator must be a tff.aggregators.{kind.__name__}'
        f', got {type(factory).__name__}'
        + (' (an unweighted factory: use build_unweighted_fed_avg, or wrap '
           'it in MeanFactory)' if weighted else
           ' (a weighted factory: use build_weighted_fed_avg)') + '.')
  if weighted:
    return factory.create(trainable_spec, WEIGHT_SPEC)
  return factory.create(trainable_spec)


def _build(who, model_fn, client_step, server_optimizer_fn,
           model_aggregator, weighted, by_examples):
  model = model_fns.functional_model_of(model_fn, who)
  server_optimizer = model_fns.optimizer_of(
      server_optimizer_fn or optimizers.build_sgdm(learning_rate=1.0),
      f'{who}: server_optimizer_fn')
  weights_spec = specs.plain(model.weights_spec)
  trainable_spec = weights_spec.trainable
  aggregation = _aggregation_process(who, model_aggregator, trainable_spec,
                                     weighted)
  initial_weights = model.initial_weights()

  def initial_state():
    weights = tf.nest.map_structure(tf.constant, initial_weights)
    trainable_specs = tf.nest.map_structure(tf.TensorSpec.from_tensor,
                                            weights.trainable)
    return templates.LearningAlgorithmState(
        global_model_weights=ModelWeights(*weights),
        distributor=(),
        client_work=client_step.hparams(trainable_specs),
        aggregator=aggregation.initialize(),
        finalizer=server_optimizer.initialize(trainable_specs))

  initialize = tf_computation(initial_state)
  state_spec = specs.plain(initialize.result_spec)
  data_spec = tf.data.DatasetSpec(model.batch_spec)

  def train(dataset, weights, hparams):
    update, num_examples, sums = client_step.run(model, dataset, weights,
                                                 hparams)
    weight = num_examples if by_examples else tf.constant(1.0)
    return templates.ClientResult(update, weight), sums

  client_work = tf_computation(train, data_spec, weights_spec,
                               state_spec.client_work)
  metric_sums_spec = specs.plain(client_work.result_spec)[1]

  def train_metrics(sums):
    return evaluation.reported_metrics(model, sums)

  finish_train = tf_computation(train_metrics, metric_sums_spec)

  def apply_update(state, mean_update, aggregator_state):
    trainable = tuple(state.global_model_weights.trainable)
    finalizer_state, new_trainable = server_optimizer.next(
        state.finalizer, trainable, tuple(mean_update))
    finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(u))
                            for u in tf.nest.flatten(mean_update)])
    new_trainable = tuple(tf.where(finite, new, old)
                          for new, old in zip(new_trainable, trainable))
    finalizer_state = tf.nest.map_structure(
        lambda new, old: tf.where(finite, new, old), finalizer_state,
        state.finalizer)
    new_state = state._replace(
        global_model_weights=ModelWeights(
            new_trainable, state.global_model_weights.non_trainable),
        aggregator=aggregator_state, finalizer=finalizer_state)
    return new_state, collections.OrderedDict(
        update_non_finite=1 - tf.cast(finite, tf.int32))

  finalize = tf_computation(apply_update, state_spec, trainable_spec,
                            state_spec.aggregator)

  @computations.federated_computation(ft.server(state_spec),
                                      ft.clients(data_spec))
  def next_fn(state, client_data):
    weights = intrinsics.federated_broadcast(state.global_model_weights)
    hparams = intrinsics.federated_broadcast(state.client_work)
    result = intrinsics.federated_map(client_work,
                                      (client_data, weights, hparams))
    update = result[0]
    if weighted:
      aggregated = aggregation.next(state.aggregator, update.update,
                                    update.update_weight)
    else:
      aggregated = aggregation.next(state.aggregator, update.update)
    sums = intrinsics.federated_sum(result[1])
    finalized = intrinsics.federated_map(
        finalize, (state, aggregated.result, aggregated.state))
    metrics = collections.OrderedDict(
        distributor=(),
        client_work=collections.OrderedDict(
            train=intrinsics.federated_map(finish_train, sums)),
        aggregator=aggregated.measurements,
        finalizer=finalized[1])
    return templates.LearningProcessOutput(finalized[0], metrics)

  get, put = templates.model_weights_computations(state_spec, weights_spec)
  return templates.LearningProcess(initialize, next_fn, get, put)
