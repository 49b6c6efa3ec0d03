"""TFF 0.87's `build_fed_eval`: federated evaluation as a `LearningProcess`,
and the composition it shares with `build_fed_recon_eval`.

Each round the model weights (set them with `set_model_weights`) reach the
clients through the distributor; every client evaluates them on its data
and sends its unfinalized metrics; the metrics aggregation process
(default TFF's `SumThenFinalizeFactory` of the model's finalizers) sums
them, keeps the sum over all rounds in its state, and reports both
finalized. Composed as TFF composes it: the evaluation client work, a mean
over an empty update and a finalizer that keeps the weights.
"""

import collections

import tensorflow as tf

from canonical import errors
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import naming
from canonical.core import specs
from canonical.core import types as ft
from canonical.learning import evaluation
from canonical.learning import loop_builder
from canonical.learning import metrics
from canonical.learning import model_fns
from canonical.learning import templates
from canonical.learning.model_weights import ModelWeights
from canonical.templates import aggregation_process
from canonical.templates import measured

_REDUCE = loop_builder.LoopImplementation.DATASET_REDUCE


def build_fed_eval(model_fn, model_distributor=None,
                   metrics_aggregation_process=None,
                   loop_implementation=_REDUCE):
  """Federated evaluation of the state's model weights on client data;
  `metrics_aggregation_process` a `tff.templates.AggregationProcess` of the
  model's unfinalized metrics returning `(current round, total rounds)`
  finalized metrics."""
  who = 'build_fed_eval'
  loop_builder.check_loop_implementation(loop_implementation, who)
  model = model_fns.functional_model_of(model_fn, who)

  def evaluate(weights, dataset):
    sums = evaluation.evaluate(model, weights, dataset, count_batches=True)
    return model.unfinalized_metrics(sums)

  evaluate_tf = specs.tf_computation(
      evaluate, specs.plain(model.weights_spec),
      tf.data.DatasetSpec(model.batch_spec))
  return compose_evaluation(who, model.initial_model_weights, evaluate_tf,
                            model.metric_finalizers(), model_distributor,
                            metrics_aggregation_process)


def compose_evaluation(who, initial_weights, evaluate_tf, metric_finalizers,
                       model_distributor=None,
                       metrics_aggregation_process=None):
  """The evaluation `LearningProcess` of `evaluate_tf` (`(weights, dataset)
  -> unfinalized metrics`) from `initial_weights` (`ModelWeights` of
  arrays)."""
  weights_type, data_type = (specs.plain(s)
                             for s in evaluate_tf.parameter_specs)
  unfinalized_type = specs.plain(evaluate_tf.result_spec)
  if metrics_aggregation_process is None:
    metrics_aggregation_process = metrics.SumThenFinalizeFactory(
        metric_finalizers).create(unfinalized_type)
  elif not isinstance(metrics_aggregation_process,
                      aggregation_process.AggregationProcess):
    raise errors.InvalidTypeError(
        f'{who}: metrics_aggregation_process must be a tff.templates.'
        'AggregationProcess (e.g. tff.learning.metrics.'
        'SumThenFinalizeFactory(finalizers).create(unfinalized_type)), got '
        f'{naming.describe_object(metrics_aggregation_process)}.')
  process = metrics_aggregation_process
  no_update = specs.tf_computation(lambda: templates.ClientResult((), ()))

  @computations.federated_computation()
  def init_fn():
    return process.initialize()

  @computations.federated_computation(
      process.next.parameter_types[0], ft.clients(weights_type),
      ft.clients(data_type))
  def next_fn(state, weights, client_data):
    output = process.next(
        state, intrinsics.federated_map(evaluate_tf, (weights, client_data)))
    measurements = intrinsics.federated_zip(collections.OrderedDict(
        eval=collections.OrderedDict(
            current_round_metrics=output.result[0],
            total_rounds_metrics=output.result[1])))
    return measured.MeasuredProcessOutput(
        output.state, intrinsics.federated_eval(no_update, ft.CLIENTS),
        measurements)

  initial_weights_fn = specs.tf_computation(lambda: ModelWeights(
      *tf.nest.map_structure(tf.constant, initial_weights)))
  if model_distributor is None:
    model_distributor = templates.build_broadcast_process(weights_type)
  elif not isinstance(model_distributor, templates.DistributionProcess):
    raise errors.InvalidTypeError(
        f'{who}: model_distributor must be a tff.learning.templates.'
        'DistributionProcess, got '
        f'{naming.describe_object(model_distributor)}.')
  return templates.compose_learning_process(
      initial_weights_fn, model_distributor,
      templates.ClientWorkProcess(init_fn, next_fn), _empty_mean_process(),
      _identity_finalizer(weights_type))


def _empty_mean_process():
  """What TFF's `MeanFactory().create((), ())` makes for an evaluation's
  empty update: its state and measurements, nothing to average."""
  empty = collections.OrderedDict(value_sum_process=(), weight_sum_process=())
  nothing = collections.OrderedDict(mean_value=(), mean_weight=())

  @computations.federated_computation()
  def init_fn():
    return intrinsics.federated_value(empty, ft.SERVER)

  @computations.federated_computation(
      ft.server(empty), ft.clients(()), ft.clients(()))
  def next_fn(state, value, weight):
    del value, weight
    return measured.MeasuredProcessOutput(
        state, intrinsics.federated_value((), ft.SERVER),
        intrinsics.federated_value(nothing, ft.SERVER))

  return aggregation_process.AggregationProcess(init_fn, next_fn)


def _identity_finalizer(weights_type):
  """A finalizer that keeps the model weights as they are (evaluation
  updates nothing): no state, no measurements."""

  @computations.federated_computation()
  def init_fn():
    return intrinsics.federated_value((), ft.SERVER)

  @computations.federated_computation(
      ft.server(()), ft.server(weights_type), ft.server(()))
  def next_fn(state, weights, update):
    del update
    return measured.MeasuredProcessOutput(
        state, weights, intrinsics.federated_value((), ft.SERVER))

  return templates.FinalizerProcess(init_fn, next_fn)
