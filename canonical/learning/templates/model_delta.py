"""TFF's model-delta client work: each client trains the model it is sent on
its data and sends `initial - trained` trainable weights, weighted by its
example count or not (`ClientWeighting`); the process measures the training
metrics summed over clients, as TFF reports them.

`client_work_of(model, step, weighting)` builds such a process around any
`ClientStep` (FedProx's training, FedSGD's gradient): the algorithms of
`canonical.learning.algorithms` are composed of it.
"""

import collections
import enum
from typing import Callable, NamedTuple, Optional

import tensorflow as tf

from canonical import errors
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import specs
from canonical.core import types as ft
from canonical.learning import loop_builder
from canonical.learning import model as model_lib
from canonical.learning import model_fns
from canonical.learning.client_update import client_update
from canonical.learning.metrics import aggregators as metrics_aggregators
from canonical.learning.templates import client_works
from canonical.templates import measured

_REDUCE = loop_builder.LoopImplementation.DATASET_REDUCE


class ClientWeighting(enum.Enum):
  """TFF's `tff.learning.ClientWeighting`: how a client's update counts."""
  UNIFORM = 1
  NUM_EXAMPLES = 2


class ClientStep(NamedTuple):
  """What a client does with the model it is sent. `hparams(trainable
  specs)` makes the client work's state, broadcast every round (None: the
  work has no state); `run(model, dataset, weights, hparams)` gives
  `(update, num_examples, metric sums)`, the sums with 'num_batches' (and
  'non_finite_updates' if an update can be dropped)."""
  hparams: Optional[Callable]
  run: Callable


def training_step(optimizer, proximal_strength=0.0, hparams_in_state=True,
                  epochs=1):
  """Local training from a fresh state of `optimizer` (with the work's
  hyperparameters if `hparams_in_state`); FedProx's term if
  `proximal_strength`; `epochs` passes over the data, weighted by the
  examples of one. The update is initial minus trained weights."""

  def hparams(trainable_specs):
    return optimizer.get_hparams(optimizer.initialize(trainable_specs))

  def run(model, dataset, weights, hparams):
    optimizer_state = None
    if hparams_in_state:
      fresh = optimizer.initialize(
          tf.nest.map_structure(tf.TensorSpec.from_tensor,
                                tuple(weights.trainable)))
      optimizer_state = optimizer.set_hparams(fresh, hparams)
    output = client_update(
        model, optimizer, weights, dataset, epochs=epochs,
        optimizer_state=optimizer_state, count_batches=True,
        proximal_strength=proximal_strength)
    # TFF sends initial minus trained: the server optimizer descends it.
    update = tuple(-d for d in output.weights_delta)
    return update, output.num_examples, output.metrics

  return ClientStep(hparams if hparams_in_state else None, run)


def check_weighting(client_weighting, who):
  if not isinstance(client_weighting, ClientWeighting):
    raise errors.InvalidTypeError(
        f'{who}: client_weighting must be a tff.learning.ClientWeighting '
        f'(UNIFORM or NUM_EXAMPLES), got {client_weighting!r}.')
  return client_weighting


def refuse_metrics_aggregator(metrics_aggregator, who):
  if metrics_aggregator is not None:
    raise errors.InvalidValueError(
        f'{who}: metrics_aggregator is not supported here: the training '
        'metrics are summed over clients, then finalized at the server '
        '(TFF\'s default, sum_then_finalize).')


def check_metrics_aggregator(metrics_aggregator, who):
  """`metrics_aggregator`, or TFF's default `sum_then_finalize` for None:
  a function of the model's metric finalizers (and, unused, the unfinalized
  metrics' type) returning the federated aggregation of the unfinalized
  metrics at CLIENTS into finalized metrics at SERVER."""
  if metrics_aggregator is None:
    return metrics_aggregators.sum_then_finalize
  if not callable(metrics_aggregator):
    raise errors.InvalidTypeError(
        f'{who}: metrics_aggregator must be a function such as '
        'tff.learning.metrics.sum_then_finalize, got '
        f'{type(metrics_aggregator).__name__}.')
  return metrics_aggregator


def build_model_delta_client_work(model_fn, optimizer, client_weighting,
                                  metrics_aggregator=None, *,
                                  loop_implementation=_REDUCE):
  """TFF's FedAvg client work: `model_fn` gives the model (see
  `model_fns.functional_model_of`); `optimizer` a `tff.learning.
  optimizers.Optimizer`, whose hyperparameters are the process's state
  (get_hparams / set_hparams), broadcast to the clients every round;
  `metrics_aggregator` aggregates the training metrics (default
  `tff.learning.metrics.sum_then_finalize`)."""
  who = 'build_model_delta_client_work'
  loop_builder.check_loop_implementation(loop_implementation, who)
  metrics_aggregator = check_metrics_aggregator(metrics_aggregator, who)
  check_weighting(client_weighting, who)
  model = model_fns.functional_model_of(model_fn, who)
  optimizer = model_fns.optimizer_of(optimizer, f'{who}: optimizer')
  return client_work_of(model, training_step(optimizer), client_weighting,
                        metrics_aggregator)


def build_functional_model_delta_client_work(*, model, optimizer,
                                             client_weighting,
                                             metrics_aggregator=None,
                                             loop_implementation=_REDUCE):
  """TFF's client work for a `FunctionalModel` itself: as
  `build_model_delta_client_work`, but stateless: the optimizer trains
  with the hyperparameters it was built with."""
  who = 'build_functional_model_delta_client_work'
  loop_builder.check_loop_implementation(loop_implementation, who)
  metrics_aggregator = check_metrics_aggregator(metrics_aggregator, who)
  check_weighting(client_weighting, who)
  if not isinstance(model, model_lib.FunctionalModel):
    raise errors.InvalidTypeError(
        f'{who}: model must be a tff.learning.models.FunctionalModel, got '
        f'{type(model).__name__}.')
  optimizer = model_fns.optimizer_of(optimizer, f'{who}: optimizer')
  return client_work_of(model, training_step(optimizer,
                                             hparams_in_state=False),
                        client_weighting, metrics_aggregator)


def client_work_of(model, step, client_weighting, metrics_aggregator=None):
  """The `ClientWorkProcess` running `step` (a `ClientStep`) at each client
  on the model it is sent; its measurements are TFF's
  `OrderedDict(train=metrics)`: the clients' unfinalized metrics
  (`model.unfinalized_metrics`; a client whose update was dropped sends the
  initial ones, as in TFF) aggregated by `metrics_aggregator` (default
  `sum_then_finalize`)."""
  metrics_aggregator = check_metrics_aggregator(metrics_aggregator,
                                                'client work')
  weights_type = specs.plain(model.weights_spec)
  trainable_specs = weights_type.trainable
  data_type = tf.data.DatasetSpec(model.batch_spec)
  by_examples = client_weighting is ClientWeighting.NUM_EXAMPLES

  def initial_state():
    return step.hparams(trainable_specs) if step.hparams else ()

  init_tf = specs.tf_computation(initial_state)
  state_type = specs.plain(init_tf.result_spec)

  def train(hparams, weights, dataset):
    update, num_examples, sums = step.run(model, dataset, weights, hparams)
    dropped = sums.get('non_finite_updates', tf.constant(0.0))
    if by_examples:
      weight = num_examples  # Zero for a client whose update was dropped.
    else:
      weight = 1.0 - dropped
    unfinalized = model.unfinalized_metrics(sums)
    initial = model.unfinalized_metrics(
        dict(model.zero_metrics(), num_batches=tf.constant(0.0)))
    unfinalized = tf.nest.map_structure(
        lambda first, last: tf.where(dropped > 0.0, first, last), initial,
        unfinalized)
    return client_works.ClientResult(update, weight), unfinalized

  train_tf = specs.tf_computation(train, state_type, weights_type,
                                  data_type)
  unfinalized_type = specs.plain(train_tf.result_spec)[1]
  aggregate_metrics = metrics_aggregator(model.metric_finalizers(),
                                         unfinalized_type)

  @computations.federated_computation()
  def init_fn():
    return intrinsics.federated_eval(init_tf, ft.SERVER)

  @computations.federated_computation(
      ft.server(state_type), ft.clients(weights_type), ft.clients(data_type))
  def next_fn(state, weights, client_data):
    hparams = intrinsics.federated_broadcast(state)
    result = intrinsics.federated_map(train_tf,
                                      (hparams, weights, client_data))
    measurements = intrinsics.federated_zip(collections.OrderedDict(
        train=aggregate_metrics(result[1])))
    return measured.MeasuredProcessOutput(state, result[0], measurements)

  if not step.hparams:
    return client_works.ClientWorkProcess(init_fn, next_fn)
  get_hparams = specs.tf_computation(lambda state: state, state_type)
  set_hparams = specs.tf_computation(lambda state, hparams: hparams,
                                     state_type, state_type)
  return client_works.ClientWorkProcess(
      init_fn, next_fn, get_hparams_fn=get_hparams,
      set_hparams_fn=set_hparams)
