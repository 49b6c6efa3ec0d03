"""TFF 0.87's federated averaging and its kin: `build_weighted_fed_avg`,
`build_unweighted_fed_avg`, `build_weighted_fed_prox` and `build_fed_sgd`,
as `LearningProcess`es with TFF's state and metrics.

Each is composed as TFF composes it (`tff.learning.templates`): the
distributor broadcasts the model (or `model_distributor` sends it); the
client work trains from a fresh client optimizer with the state's
hyperparameters and sends `initial - trained` trainable weights; the model
aggregator (any `tff.aggregators` factory: encoded, clipped, private,
secure) averages them, weighted by example counts or not; the finalizer's
server optimizer takes that mean as its gradient, unless it is not finite
(then the model stays, and its `update_non_finite` says 1). FedProx adds a
proximal term to the clients' loss; FedSGD's clients send their mean
gradient instead of training.
"""

import tensorflow as tf

from canonical import aggregators
from canonical import errors
from canonical.core import naming
from canonical.core import specs
from canonical.learning.client_update import client_gradient
from canonical.learning import functional
from canonical.learning import loop_builder
from canonical.learning import metrics
from canonical.learning import model_fns
from canonical.learning import optimizers
from canonical.learning import templates
from canonical.learning.model import ModelWeights
from canonical.learning.templates import model_delta

WEIGHT_SPEC = tf.TensorSpec([], tf.float32)
ClientWeighting = model_delta.ClientWeighting


DEFAULT_SERVER_OPTIMIZER = optimizers.build_sgdm(learning_rate=1.0)
FED_SGD_SERVER_OPTIMIZER = optimizers.build_sgdm(learning_rate=0.1)
_REDUCE = loop_builder.LoopImplementation.DATASET_REDUCE


def build_weighted_fed_avg(
    model_fn, client_optimizer_fn, server_optimizer_fn=None, *,
    client_weighting=ClientWeighting.NUM_EXAMPLES, model_distributor=None,
    model_aggregator=None, metrics_aggregator=None,
    loop_implementation=_REDUCE, client_epochs=1):
  """FedAvg with client updates weighted by their example counts (TFF's
  default); `model_aggregator` a `WeightedAggregationFactory` (default
  `MeanFactory()`), `model_distributor` a `DistributionProcess` (default
  the plain broadcast). `client_epochs` (ours) is the passes each client
  makes over its data."""
  who = 'build_weighted_fed_avg'
  metrics_aggregator = _check_common(who, metrics_aggregator,
                                     loop_implementation)
  return _build(who, model_fn,
                _training(who, model_fn, client_optimizer_fn, client_epochs),
                server_optimizer_fn, model_aggregator, weighted=True,
                by_examples=_by_examples(who, client_weighting),
                model_distributor=model_distributor,
                metrics_aggregator=metrics_aggregator)


def build_unweighted_fed_avg(model_fn, client_optimizer_fn,
                             server_optimizer_fn=None, model_distributor=None,
                             model_aggregator=None,
                             metrics_aggregator=metrics.sum_then_finalize,
                             loop_implementation=_REDUCE, client_epochs=1):
  """FedAvg with every client's update counting the same;
  `model_aggregator` an `UnweightedAggregationFactory` (default
  `UnweightedMeanFactory()`); `client_epochs` as `build_weighted_fed_avg`'s."""
  who = 'build_unweighted_fed_avg'
  metrics_aggregator = _check_common(who, metrics_aggregator,
                                     loop_implementation)
  return _build(who, model_fn,
                _training(who, model_fn, client_optimizer_fn, client_epochs),
                server_optimizer_fn, model_aggregator, weighted=False,
                by_examples=False, model_distributor=model_distributor,
                metrics_aggregator=metrics_aggregator)


def build_weighted_fed_prox(model_fn, proximal_strength, client_optimizer_fn,
                            server_optimizer_fn=DEFAULT_SERVER_OPTIMIZER,
                            client_weighting=ClientWeighting.NUM_EXAMPLES,
                            model_distributor=None, model_aggregator=None,
                            metrics_aggregator=None,
                            loop_implementation=_REDUCE):
  """FedProx: FedAvg whose clients' loss adds `proximal_strength` / 2 times
  the squared distance to the broadcast model. As TFF's, the client work
  keeps no state: clients train with the optimizer as it was built."""
  who = 'build_weighted_fed_prox'
  metrics_aggregator = _check_common(who, metrics_aggregator,
                                     loop_implementation)
  return _build(who, model_fn,
                _proximal_training(who, proximal_strength,
                                   client_optimizer_fn),
                server_optimizer_fn, model_aggregator, weighted=True,
                by_examples=_by_examples(who, client_weighting),
                model_distributor=model_distributor,
                metrics_aggregator=metrics_aggregator)


def build_unweighted_fed_prox(model_fn, proximal_strength,
                              client_optimizer_fn,
                              server_optimizer_fn=DEFAULT_SERVER_OPTIMIZER,
                              model_distributor=None, model_aggregator=None,
                              metrics_aggregator=metrics.sum_then_finalize,
                              loop_implementation=_REDUCE):
  """FedProx with every client's update counting the same;
  `model_aggregator` an `UnweightedAggregationFactory` (default
  `UnweightedMeanFactory()`)."""
  who = 'build_unweighted_fed_prox'
  metrics_aggregator = _check_common(who, metrics_aggregator,
                                     loop_implementation)
  return _build(who, model_fn,
                _proximal_training(who, proximal_strength,
                                   client_optimizer_fn),
                server_optimizer_fn, model_aggregator, weighted=False,
                by_examples=False, model_distributor=model_distributor,
                metrics_aggregator=metrics_aggregator)


def build_fed_sgd(model_fn, server_optimizer_fn=FED_SGD_SERVER_OPTIMIZER,
                  model_distributor=None, model_aggregator=None,
                  metrics_aggregator=None, loop_implementation=_REDUCE):
  """FedSGD: each client sends the gradient of its mean loss at the
  broadcast model, weighted by its example count; the server optimizer
  (default `build_sgdm(learning_rate=0.1)`) takes the mean gradient."""
  who = 'build_fed_sgd'
  metrics_aggregator = _check_common(who, metrics_aggregator,
                                     loop_implementation)
  return _build(who, model_fn, _gradient, server_optimizer_fn,
                model_aggregator, weighted=True, by_examples=True,
                model_distributor=model_distributor,
                metrics_aggregator=metrics_aggregator)


def _check_common(who, metrics_aggregator, loop_implementation):
  """The metrics aggregator (TFF's default for None), once the loop is
  known to be TFF's."""
  loop_builder.check_loop_implementation(loop_implementation, who)
  return model_delta.check_metrics_aggregator(metrics_aggregator, who)


def _by_examples(who, client_weighting):
  client_weighting = model_delta.check_weighting(client_weighting, who)
  return client_weighting is ClientWeighting.NUM_EXAMPLES


def _training(who, model_fn, client_optimizer_fn, client_epochs):
  """Local training from a fresh client optimizer, the update initial minus
  trained weights. The optimizer's hyperparameters are the client work's
  state, except for a `FunctionalModel` given itself, whose client work
  keeps none (TFF 0.87's `client_work=<>`). TFF's users repeat each
  client's dataset for more epochs; `client_epochs` does it in the client
  work, weighting the client by the examples of one pass."""
  optimizer = model_fns.optimizer_of(client_optimizer_fn,
                                     f'{who}: client_optimizer_fn')
  return model_delta.training_step(
      optimizer,
      hparams_in_state=not isinstance(model_fn, functional.FunctionalModel),
      epochs=model_fns.client_epochs_of(client_epochs, who))


def _proximal_training(who, proximal_strength, client_optimizer_fn):
  """FedProx's local training: a fresh client optimizer as it was built
  (TFF's FedProx client work has no state), the proximal term added."""
  if isinstance(proximal_strength, bool) or not isinstance(
      proximal_strength, (int, float)) or proximal_strength < 0:
    raise errors.InvalidValueError(
        f'{who}: proximal_strength must be a non-negative number, got '
        f'{proximal_strength!r}.')
  optimizer = model_fns.optimizer_of(client_optimizer_fn,
                                     f'{who}: client_optimizer_fn')
  return model_delta.training_step(optimizer, float(proximal_strength),
                                   hparams_in_state=False)


def _run_gradient(model, dataset, weights, hparams):
  del hparams  # FedSGD's clients have none.
  return client_gradient(model, weights, dataset)


_gradient = model_delta.ClientStep(None, _run_gradient)


def aggregation_process(who, factory, value_type, weighted,
                        what='model_aggregator'):
  """The weighted process that averages client values of `value_type` (an
  unweighted factory's, through `as_weighted_aggregator`, ignores the
  weight)."""
  if factory is None:
    factory = (aggregators.MeanFactory() if weighted else
               aggregators.UnweightedMeanFactory())
  kind = (aggregators.WeightedAggregationFactory if weighted else
          aggregators.UnweightedAggregationFactory)
  if not isinstance(factory, kind):
    if weighted:
      hint = (' (an unweighted factory: wrap it in '
              'tff.aggregators.as_weighted_aggregator')
      if 'weighted' in who:
        hint += f', or use {who.replace("weighted", "unweighted")}'
    else:
      hint = (' (a weighted factory: use '
              f'{who.replace("unweighted", "weighted")}')
    raise errors.InvalidTypeError(
        f'{who}: {what} must be a tff.aggregators.{kind.__name__}, got '
        f'{type(factory).__name__}{hint}).')
  if not weighted:
    factory = aggregators.as_weighted_aggregator(factory)
  return factory.create(value_type, WEIGHT_SPEC)


def _build(who, model_fn, client_step, server_optimizer_fn,
           model_aggregator, weighted, by_examples, model_distributor=None,
           metrics_aggregator=None):
  model = model_fns.functional_model_of(model_fn, who)
  client_work = model_delta.client_work_of(
      model, client_step, ClientWeighting.NUM_EXAMPLES if by_examples else
      ClientWeighting.UNIFORM, metrics_aggregator)
  return compose(who, model.initial_model_weights, client_work,
                 server_optimizer_fn, model_aggregator, weighted,
                 model_distributor)


def compose(who, initial_weights, client_work, server_optimizer_fn,
            model_aggregator, weighted, model_distributor=None):
  """TFF's composition of a model-update algorithm around `client_work`:
  the model's `initial_weights` (`ModelWeights` of arrays),
  `model_distributor` (default: the plain broadcast), the model aggregator
  (default: the mean, weighted or not) and the server optimizer's finalizer
  (default: `build_sgdm(1.0)`)."""
  server_optimizer = model_fns.optimizer_of(
      server_optimizer_fn or DEFAULT_SERVER_OPTIMIZER,
      f'{who}: server_optimizer_fn')
  def initial_model_weights():
    return ModelWeights(*tf.nest.map_structure(tf.constant, initial_weights))

  initial_model_weights_fn = specs.tf_computation(initial_model_weights)
  weights_type = specs.plain(initial_model_weights_fn.result_spec)
  if model_distributor is None:
    model_distributor = templates.build_broadcast_process(weights_type)
  elif not isinstance(model_distributor, templates.DistributionProcess):
    raise errors.InvalidTypeError(
        f'{who}: model_distributor must be a tff.learning.templates.'
        'DistributionProcess, got '
        f'{naming.describe_object(model_distributor)}.')
  aggregator = aggregation_process(who, model_aggregator,
                                   weights_type.trainable, weighted)
  finalizer = templates.build_apply_optimizer_finalizer(server_optimizer,
                                                        weights_type)
  return templates.compose_learning_process(
      initial_model_weights_fn, model_distributor, client_work, aggregator,
      finalizer)
