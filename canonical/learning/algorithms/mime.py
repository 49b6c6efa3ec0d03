"""TFF 0.87's Mime Lite (Karimireddy et al., 2021): `build_weighted_mime_lite`,
`build_unweighted_mime_lite` and `build_mime_lite_with_optimizer_schedule`.

The base optimizer's state (momentum, Adam's moments) is global: the server
keeps it and broadcasts it every round. Each client first takes the full
gradient of its mean loss at the broadcast model, then trains with the base
optimizer *applied with that state and never updating it*, and sends
`initial - trained` weights (weighted by examples, or uniformly). The
server averages the full gradients (`full_gradient_aggregator`) and steps
the optimizer state along them; the model update goes through
`model_aggregator` and the server optimizer's finalizer, as FedAvg's.

Composed as TFF composes it: a client work whose state is `(optimizer
state, full-gradient aggregator state)`, the broadcast distributor, the
model aggregator and `build_apply_optimizer_finalizer`.
"""

import collections

import tensorflow as tf

from canonical import errors
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import specs
from canonical.core import types as ft
from canonical.learning.client_update import client_gradient
from canonical.learning.client_update import client_update
from canonical.learning import loop_builder
from canonical.learning import metrics
from canonical.learning import model_fns
from canonical.learning import optimizers
from canonical.learning import templates
from canonical.learning.algorithms import averaging
from canonical.learning.templates import model_delta
from canonical.templates import measured

ClientWeighting = model_delta.ClientWeighting
_REDUCE = loop_builder.LoopImplementation.DATASET_REDUCE
DEFAULT_SERVER_OPTIMIZER = optimizers.build_sgdm(1.0)


def build_weighted_mime_lite(model_fn, base_optimizer,
                             server_optimizer=DEFAULT_SERVER_OPTIMIZER,
                             client_weighting=ClientWeighting.NUM_EXAMPLES,
                             model_distributor=None, model_aggregator=None,
                             full_gradient_aggregator=None,
                             metrics_aggregator=None,
                             loop_implementation=_REDUCE):
  """Mime Lite with the model updates and full gradients both averaged by
  `client_weighting`; both aggregators are `WeightedAggregationFactory`s
  (default `MeanFactory()`)."""
  who = 'build_weighted_mime_lite'
  return _build(who, model_fn, base_optimizer, server_optimizer,
                client_weighting, model_distributor, model_aggregator,
                full_gradient_aggregator, metrics_aggregator,
                loop_implementation, weighted=True)


def build_unweighted_mime_lite(model_fn, base_optimizer,
                               server_optimizer=DEFAULT_SERVER_OPTIMIZER,
                               model_distributor=None, model_aggregator=None,
                               full_gradient_aggregator=None,
                               metrics_aggregator=metrics.sum_then_finalize,
                               loop_implementation=_REDUCE):
  """Mime Lite with every client counting the same; both aggregators are
  `UnweightedAggregationFactory`s (default `UnweightedMeanFactory()`)."""
  who = 'build_unweighted_mime_lite'
  return _build(who, model_fn, base_optimizer, server_optimizer,
                ClientWeighting.UNIFORM, model_distributor, model_aggregator,
                full_gradient_aggregator, metrics_aggregator,
                loop_implementation, weighted=False)


def build_mime_lite_with_optimizer_schedule(
    model_fn, learning_rate_fn, base_optimizer,
    server_optimizer=DEFAULT_SERVER_OPTIMIZER,
    client_weighting=ClientWeighting.NUM_EXAMPLES, model_distributor=None,
    model_aggregator=None, full_gradient_aggregator=None,
    metrics_aggregator=None, loop_implementation=_REDUCE):
  """Weighted Mime Lite whose base optimizer's learning rate is
  `learning_rate_fn(round_num)`: the client work's state is `(round_num,
  Mime Lite's state)`, the rate set in the optimizer state at
  initialization (round 0) and after every round (for the next one)."""
  who = 'build_mime_lite_with_optimizer_schedule'
  if not callable(learning_rate_fn):
    raise errors.InvalidTypeError(
        f'{who}: learning_rate_fn must map a round number to a learning '
        f'rate, got {learning_rate_fn!r}.')
  return _build(who, model_fn, base_optimizer, server_optimizer,
                client_weighting, model_distributor, model_aggregator,
                full_gradient_aggregator, metrics_aggregator,
                loop_implementation, weighted=True,
                learning_rate_fn=learning_rate_fn)


def _build(who, model_fn, base_optimizer, server_optimizer, client_weighting,
           model_distributor, model_aggregator, full_gradient_aggregator,
           metrics_aggregator, loop_implementation, weighted,
           learning_rate_fn=None):
  base_optimizer = _tff_optimizer(base_optimizer, who, 'base_optimizer')
  _tff_optimizer(server_optimizer, who, 'server_optimizer')
  model_delta.check_weighting(client_weighting, who)
  loop_builder.check_loop_implementation(loop_implementation, who)
  metrics_aggregator = model_delta.check_metrics_aggregator(
      metrics_aggregator, who)
  model = model_fns.functional_model_of(model_fn, who)
  weights_type = specs.plain(model.weights_spec)
  gradient_process = averaging.aggregation_process(
      who, full_gradient_aggregator, weights_type.trainable, weighted,
      'full_gradient_aggregator')
  client_work = _mime_client_work(model, base_optimizer, client_weighting,
                                  gradient_process, metrics_aggregator)
  if learning_rate_fn is not None:
    client_work = _scheduled(client_work, learning_rate_fn)
  return averaging.compose(who, model.initial_model_weights, client_work,
                           server_optimizer, model_aggregator, weighted,
                           model_distributor)


def _tff_optimizer(optimizer, who, what):
  """Mime Lite applies the optimizer with a state it does not update,
  which a Keras optimizer cannot do: TFF takes only its own."""
  if not isinstance(optimizer, optimizers.Optimizer):
    raise errors.InvalidTypeError(
        f'{who}: {what} must be a tff.learning.optimizers.Optimizer (such '
        'as tff.learning.optimizers.build_sgdm(learning_rate=0.1)), got '
        f'{type(optimizer).__name__}; Mime Lite applies it with a state '
        'kept fixed during local training, which Keras optimizers cannot.')
  return optimizer


class _WithStateKept(optimizers.Optimizer):
  """`optimizer` stepping the weights with a state it leaves as it was:
  Mime Lite's clients train with the server's optimizer state."""

  def __init__(self, optimizer):
    self._optimizer = optimizer

  def initialize(self, specs):
    return self._optimizer.initialize(specs)

  def next(self, state, weights, gradients):
    _, weights = self._optimizer.next(state, weights, gradients)
    return state, weights


def _mime_client_work(model, optimizer, client_weighting, gradient_process,
                      metrics_aggregator):
  """TFF's Mime Lite `ClientWorkProcess`: state `(optimizer state,
  full-gradient aggregator state)` at the server; measurements
  `OrderedDict(train=metrics)`, the training metrics aggregated by
  `metrics_aggregator` (a dropped update's too: TFF's Mime Lite does not
  reset them)."""
  weights_type = specs.plain(model.weights_spec)
  trainable_type = weights_type.trainable
  data_type = tf.data.DatasetSpec(model.batch_spec)
  by_examples = client_weighting is ClientWeighting.NUM_EXAMPLES
  frozen = _WithStateKept(optimizer)

  initial_optimizer_state = specs.tf_computation(
      lambda: optimizer.initialize(trainable_type))
  optimizer_state_type = specs.plain(initial_optimizer_state.result_spec)

  def train(optimizer_state, weights, dataset):
    full_gradient, _, _ = client_gradient(
        model, weights, dataset)
    output = client_update(
        model, frozen, weights, dataset, optimizer_state=optimizer_state,
        count_batches=True)
    update = tuple(-d for d in output.weights_delta)  # initial - trained
    if by_examples:
      weight = output.num_examples  # Zero for a dropped update.
    else:
      weight = 1.0 - output.metrics['non_finite_updates']
    return (templates.ClientResult(update, weight),
            model.unfinalized_metrics(output.metrics), full_gradient)

  train_tf = specs.tf_computation(train, optimizer_state_type, weights_type,
                                  data_type)
  aggregate_metrics = metrics_aggregator(
      model.metric_finalizers(), specs.plain(train_tf.result_spec)[1])

  def step_optimizer_state(optimizer_state, mean_gradient):
    zeros = tf.nest.map_structure(tf.zeros_like, tuple(mean_gradient))
    new_state, _ = optimizer.next(optimizer_state, zeros,
                                  tuple(mean_gradient))
    return new_state

  step_tf = specs.tf_computation(step_optimizer_state, optimizer_state_type,
                                 trainable_type)

  @computations.federated_computation()
  def init_fn():
    return intrinsics.federated_zip((
        intrinsics.federated_eval(initial_optimizer_state, ft.SERVER),
        gradient_process.initialize()))

  @computations.federated_computation(
      init_fn.type_signature.result, ft.clients(weights_type),
      ft.clients(data_type))
  def next_fn(state, weights, client_data):
    optimizer_state, gradient_state = state[0], state[1]
    trained = intrinsics.federated_map(
        train_tf, (intrinsics.federated_broadcast(optimizer_state), weights,
                   client_data))
    client_result, unfinalized, full_gradient = (trained[0], trained[1],
                                                 trained[2])
    gradient = gradient_process.next(gradient_state, full_gradient,
                                     client_result.update_weight)
    new_state = intrinsics.federated_zip((
        intrinsics.federated_map(step_tf,
                                 (optimizer_state, gradient.result)),
        gradient.state))
    measurements = intrinsics.federated_zip(collections.OrderedDict(
        train=aggregate_metrics(unfinalized)))
    return measured.MeasuredProcessOutput(new_state, client_result,
                                          measurements)

  return templates.ClientWorkProcess(init_fn, next_fn)


def _scheduled(client_work, learning_rate_fn):
  """`client_work` (Mime Lite's) with its optimizer's learning rate
  following `learning_rate_fn` of the round number, kept beside its state
  as `(round_num, state)`."""
  state_param, weights_param, data_param = client_work.next.parameter_types
  mime_state_type = state_param.member

  def with_rate(mime_state, round_num):
    optimizer_state = collections.OrderedDict(mime_state[0])
    if optimizers.LEARNING_RATE_KEY not in optimizer_state:
      raise errors.InvalidValueError(
          'build_mime_lite_with_optimizer_schedule: the base optimizer\'s '
          f'state has no \'{optimizers.LEARNING_RATE_KEY}\' to schedule '
          f'(it has {list(optimizer_state)}).')
    rate = optimizer_state[optimizers.LEARNING_RATE_KEY]
    optimizer_state[optimizers.LEARNING_RATE_KEY] = tf.cast(
        learning_rate_fn(round_num), rate.dtype)
    return (optimizer_state,) + tuple(mime_state[1:])

  first_rate = specs.tf_computation(lambda state: with_rate(state, 0),
                                    mime_state_type)

  @computations.federated_computation()
  def init_fn():
    return intrinsics.federated_zip((
        intrinsics.federated_value(0, ft.SERVER),
        intrinsics.federated_map(first_rate, client_work.initialize())))

  state_type = init_fn.type_signature.result

  def next_round(state):
    round_num = state[0] + 1
    return round_num, with_rate(state[1], round_num)

  next_rate = specs.tf_computation(next_round, specs.plain(state_type.member))

  @computations.federated_computation(state_type, weights_param, data_param)
  def next_fn(state, weights, client_data):
    output = client_work.next(state[1], weights, client_data)
    new_state = intrinsics.federated_map(
        next_rate, intrinsics.federated_zip((state[0], output.state)))
    return measured.MeasuredProcessOutput(new_state, output.result,
                                          output.measurements)

  return templates.ClientWorkProcess(init_fn, next_fn)
