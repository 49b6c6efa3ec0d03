"""TFF 0.87's Federated Reconstruction (Singhal et al., 2021):
`build_fed_recon` and `build_fed_recon_eval`.

The model is a `tff.learning.models.ReconstructionModel`: its global
weights are broadcast, trained and aggregated as FedAvg's; its local
weights never leave a client. Each round a client splits its data
(`dataset_split_fn`, default: even batches, then odd ones); it first
reconstructs the local weights from their initial values on the first part
(global ones frozen), then trains the global weights on the second (local
ones frozen) and sends `initial - trained` global trainable weights,
weighted by the examples it trained on (or uniformly). Evaluation
reconstructs the same way, then evaluates.

Local weights start every round from the values the model had when the
process was built (TFF makes the model afresh in every client call, so its
local initializers draw again; give them deterministic initializers, or a
seeded model, to have the same starting point everywhere). The loss and
metrics are Keras objects, run through Keras's stateless API as pure
functions of their variables' values: the metric `loss` is, as TFF's, a
`MeanMetricWrapper` of `loss_fn()` (the mean over batches of each batch's
loss), and the unfinalized metrics are each metric's variables, summed over
clients and finalized by the metric's own `result`.
"""

import collections
import functools

import keras
import tensorflow as tf

from canonical import aggregators
from canonical import errors
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import specs
from canonical.core import types as ft
from canonical.learning import metrics as metrics_lib
from canonical.learning import optimizers
from canonical.learning import templates
from canonical.learning.algorithms import averaging
from canonical.learning.algorithms import fed_eval
from canonical.learning.model_weights import ModelWeights
from canonical.learning.reconstruction_model import ReconstructionModel
from canonical.learning.templates import model_delta
from canonical.templates import measured

ClientWeighting = model_delta.ClientWeighting


def build_fed_recon(model_fn, *, loss_fn, metrics_fn=None,
                    server_optimizer_fn=optimizers.build_sgdm(
                        learning_rate=1.0),
                    client_optimizer_fn=optimizers.build_sgdm(
                        learning_rate=0.1),
                    reconstruction_optimizer_fn=optimizers.build_sgdm(
                        learning_rate=0.1),
                    dataset_split_fn=None, client_weighting=None,
                    model_distributor=None, model_aggregator_factory=None,
                    metrics_aggregator=metrics_lib.sum_then_finalize):
  """Federated Reconstruction training as a `LearningProcess`: the state's
  model weights are the global ones; the metrics are `train` (the Keras
  metrics of `metrics_fn()` and `loss`, over the post-reconstruction
  batches, before each step)."""
  who = 'build_fed_recon'
  metrics_aggregator = model_delta.check_metrics_aggregator(
      metrics_aggregator, who)
  model = _model(model_fn, who)
  client_weighting = client_weighting or ClientWeighting.NUM_EXAMPLES
  if not (isinstance(client_weighting, ClientWeighting) or
          callable(client_weighting)):
    raise errors.InvalidTypeError(
        f'{who}: client_weighting must be a tff.learning.ClientWeighting or '
        'a function of the unfinalized metrics, got '
        f'{client_weighting!r}.')
  unweighted = isinstance(model_aggregator_factory,
                          aggregators.UnweightedAggregationFactory)
  if unweighted and client_weighting is not ClientWeighting.UNIFORM:
    raise errors.InvalidValueError(
        f'{who}: an unweighted model_aggregator_factory needs '
        'client_weighting=tff.learning.ClientWeighting.UNIFORM, got '
        f'{client_weighting}.')
  client_work = _training_client_work(
      who, model, _loss(loss_fn, who), _metrics(loss_fn, metrics_fn, who),
      _optimizer(client_optimizer_fn, who, 'client_optimizer_fn'),
      _optimizer(reconstruction_optimizer_fn, who,
                 'reconstruction_optimizer_fn'),
      _split_fn(dataset_split_fn), client_weighting, metrics_aggregator)
  return averaging.compose(
      who, model.initial_global_weights, client_work,
      _optimizer(server_optimizer_fn, who, 'server_optimizer_fn'),
      model_aggregator_factory, not unweighted, model_distributor)


def build_fed_recon_eval(model_fn, *, loss_fn, metrics_fn=None,
                         reconstruction_optimizer_fn=optimizers.build_sgdm(
                             learning_rate=0.1),
                         dataset_split_fn=None, model_distributor=None,
                         metrics_aggregation_process=None):
  """Federated Reconstruction evaluation as a `LearningProcess` (set the
  global weights with `set_model_weights`): each client reconstructs its
  local weights, then evaluates; the metrics are `eval`'s
  `current_round_metrics` and `total_rounds_metrics`, whose unfinalized sums
  the state keeps, as TFF's."""
  who = 'build_fed_recon_eval'
  model = _model(model_fn, who)
  metrics = _metrics(loss_fn, metrics_fn, who)
  evaluate_tf = _evaluation(
      model, _loss(loss_fn, who), metrics,
      _optimizer(reconstruction_optimizer_fn, who,
                 'reconstruction_optimizer_fn'),
      _split_fn(dataset_split_fn))
  return fed_eval.compose_evaluation(
      who, model.initial_global_weights, evaluate_tf, metrics.finalizers(),
      model_distributor, metrics_aggregation_process)


def _model(model_fn, who):
  if not callable(model_fn):
    raise errors.InvalidTypeError(
        f'{who}: model_fn must be a no-argument function returning a '
        f'tff.learning.models.ReconstructionModel, got {model_fn!r}.')
  model = model_fn()
  if not isinstance(model, ReconstructionModel):
    raise errors.InvalidTypeError(
        f'{who}: model_fn must return a tff.learning.models.'
        f'ReconstructionModel, it returned {type(model).__name__}.')
  return model


def _optimizer(optimizer, who, what):
  if not isinstance(optimizer, optimizers.Optimizer):
    raise errors.InvalidTypeError(
        f'{who}: {what} must be a tff.learning.optimizers.Optimizer (e.g. '
        'tff.learning.optimizers.build_sgdm(learning_rate=0.1)), got '
        f'{type(optimizer).__name__}.')
  return optimizer


def _loss(loss_fn, who):
  if not callable(loss_fn):
    raise errors.InvalidTypeError(
        f'{who}: loss_fn must be a no-argument function returning a Keras '
        f'loss, got {loss_fn!r}.')
  return loss_fn()


def _split_fn(dataset_split_fn):
  if dataset_split_fn is None:
    return ReconstructionModel.build_dataset_split_fn(split_dataset=True)
  return dataset_split_fn


class _KerasMetrics:
  """Keras metrics (`metrics_fn()` then `loss`) as pure functions of their
  variables' values, through Keras's stateless API."""

  def __init__(self, metrics, who):
    self._metrics = collections.OrderedDict()
    for metric in metrics:
      if not isinstance(metric, keras.metrics.Metric):
        raise errors.InvalidTypeError(
            f'{who}: metrics_fn must return Keras metrics, got '
            f'{type(metric).__name__}.')
      if metric.name in self._metrics:
        raise errors.InvalidValueError(
            f'{who}: two metrics are named {metric.name!r} (already: '
            f'{list(self._metrics)}).')
      self._metrics[metric.name] = metric
    self._initial = collections.OrderedDict(
        (name, [keras.ops.convert_to_numpy(v) for v in metric.variables])
        for name, metric in self._metrics.items())

  def initial(self):
    return collections.OrderedDict(
        (name, tuple(tf.constant(v) for v in values))
        for name, values in self._initial.items())

  def update(self, state, labels, predictions):
    return collections.OrderedDict(
        (name, tuple(metric.stateless_update_state(
            list(state[name]), y_true=labels, y_pred=predictions)))
        for name, metric in self._metrics.items())

  def finalizers(self):
    """TFF's metric finalizers: each metric's `result` of its values."""
    return collections.OrderedDict(
        (name, functools.partial(_result, metric))
        for name, metric in self._metrics.items())


def _result(metric, values):
  return metric.stateless_result(list(values))


def _metrics(loss_fn, metrics_fn, who):
  metrics = [] if metrics_fn is None else list(metrics_fn())
  return _KerasMetrics(
      metrics + [keras.metrics.MeanMetricWrapper(loss_fn(), name='loss')],
      who)


def _as_lists(unfinalized):
  """TFF's unfinalized metrics: each metric's variables as a list."""
  return collections.OrderedDict(
      (name, list(values)) for name, values in unfinalized.items())


def _reconstruct(model, initial, loss, optimizer, global_weights, dataset):
  """The local weights trained from their `initial` values on `dataset`,
  the global ones frozen; `(global non-trainable, local weights)`."""
  local = ModelWeights(tuple(tf.constant(w) for w in initial.trainable),
                       tuple(tf.constant(w) for w in initial.non_trainable))
  global_trainable = tuple(global_weights.trainable)
  if not local.trainable:
    return tuple(global_weights.non_trainable), local

  def step(state, batch):
    trainable, global_nt, local_nt, optimizer_state = state
    with tf.GradientTape() as tape:
      tape.watch(trainable)
      output, global_nt, local_nt = model.functional_forward(
          ModelWeights(global_trainable, global_nt),
          ModelWeights(trainable, local_nt), batch, training=True)
      batch_loss = loss(output.labels, output.predictions)
    gradients = tape.gradient(batch_loss, trainable)
    optimizer_state, trainable = optimizer.next(optimizer_state, trainable,
                                                tuple(gradients))
    return tuple(trainable), global_nt, local_nt, optimizer_state

  trainable, global_nt, local_nt, _ = dataset.reduce(
      (local.trainable, tuple(global_weights.non_trainable),
       local.non_trainable,
       optimizer.initialize(tf.nest.map_structure(tf.TensorSpec.from_tensor,
                                                  local.trainable))), step)
  return global_nt, ModelWeights(trainable, local_nt)


def _training_client_work(who, model, loss, metrics, client_optimizer,
                          reconstruction_optimizer, dataset_split_fn,
                          client_weighting, metrics_aggregator):
  """TFF's reconstruction client work: no state; `ClientResult(initial -
  trained global trainable weights, weight)`; `OrderedDict(train=...)`."""
  del who
  initial_local = model.initial_local_weights
  weights_type = specs.plain(model.global_weights_spec)
  data_type = tf.data.DatasetSpec(specs.plain(model.input_spec))

  def train(global_weights, dataset):
    recon_data, train_data = dataset_split_fn(dataset)
    global_nt, local = _reconstruct(model, initial_local, loss,
                                    reconstruction_optimizer, global_weights,
                                    recon_data)
    initial = tuple(global_weights.trainable)

    def step(state, batch):
      trainable, global_nt, local_nt, optimizer_state, sums, count = state
      with tf.GradientTape() as tape:
        tape.watch(trainable)
        output, global_nt, local_nt = model.functional_forward(
            ModelWeights(trainable, global_nt),
            ModelWeights(local.trainable, local_nt), batch, training=True)
        batch_loss = loss(output.labels, output.predictions)
      gradients = tape.gradient(batch_loss, trainable)
      optimizer_state, trainable = client_optimizer.next(
          optimizer_state, trainable, tuple(gradients))
      sums = metrics.update(sums, output.labels, output.predictions)
      count += tf.cast(output.num_examples, tf.int32)
      return (tuple(trainable), global_nt, local_nt, optimizer_state, sums,
              count)

    trained, _, _, _, sums, count = train_data.reduce(
        (initial, global_nt, local.non_trainable,
         client_optimizer.initialize(tf.nest.map_structure(
             tf.TensorSpec.from_tensor, initial)),
         metrics.initial(), tf.constant(0, tf.int32)), step)
    delta = tuple(a - b for a, b in zip(initial, trained))
    finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(d))
                            for d in delta])
    delta = tuple(tf.where(finite, d, tf.zeros_like(d)) for d in delta)
    unfinalized = _as_lists(sums)
    if client_weighting is ClientWeighting.NUM_EXAMPLES:
      weight = tf.cast(count, tf.float32)
    elif client_weighting is ClientWeighting.UNIFORM:
      weight = tf.constant(1.0)
    else:
      weight = tf.cast(client_weighting(unfinalized), tf.float32)
    weight = tf.where(finite, weight, 0.0)
    return templates.ClientResult(delta, weight), unfinalized

  train_tf = specs.tf_computation(train, weights_type, data_type)
  aggregate_metrics = metrics_aggregator(
      metrics.finalizers(), specs.plain(train_tf.result_spec)[1])

  @computations.federated_computation()
  def init_fn():
    return intrinsics.federated_value((), ft.SERVER)

  @computations.federated_computation(
      ft.server(()), ft.clients(weights_type), ft.clients(data_type))
  def next_fn(state, weights, client_data):
    trained = intrinsics.federated_map(train_tf, (weights, client_data))
    measurements = intrinsics.federated_zip(collections.OrderedDict(
        train=aggregate_metrics(trained[1])))
    return measured.MeasuredProcessOutput(state, trained[0], measurements)

  return templates.ClientWorkProcess(init_fn, next_fn)


def _evaluation(model, loss, metrics, reconstruction_optimizer,
                dataset_split_fn):
  """The `(global weights, dataset) -> unfinalized metrics` computation of
  TFF's reconstruction evaluation: reconstruct, then evaluate."""
  initial_local = model.initial_local_weights

  def evaluate(global_weights, dataset):
    recon_data, eval_data = dataset_split_fn(dataset)
    global_nt, local = _reconstruct(model, initial_local, loss,
                                    reconstruction_optimizer, global_weights,
                                    recon_data)
    global_trainable = tuple(global_weights.trainable)

    def step(sums, batch):
      output, _, _ = model.functional_forward(
          ModelWeights(global_trainable, global_nt), local, batch,
          training=False)
      return metrics.update(sums, output.labels, output.predictions)

    return _as_lists(eval_data.reduce(metrics.initial(), step))

  return specs.tf_computation(
      evaluate, specs.plain(model.global_weights_spec),
      tf.data.DatasetSpec(specs.plain(model.input_spec)))
