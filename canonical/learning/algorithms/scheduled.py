"""TFF 0.87's `build_weighted_fed_avg_with_optimizer_schedule`: FedAvg whose
clients train, in round `r` (from 0), with `client_optimizer_fn(
client_learning_rate_fn(r))`.

The client work is FedAvg's, whose state is the round number (int32),
broadcast every round: each client builds its optimizer from the scheduled
rate inside its piece, trains with it from a fresh state and sends `initial
- trained` weighted by its example count. Its measurements are TFF's:
`OrderedDict(train=metrics, client_learning_rate=rate)`.
"""

import collections

import tensorflow as tf

from canonical import errors
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import specs
from canonical.learning import keras_optimizers
from canonical.learning import loop_builder
from canonical.learning import model_fns
from canonical.learning import templates
from canonical.learning.algorithms import averaging
from canonical.learning.templates import model_delta
from canonical.templates import measured

_REDUCE = loop_builder.LoopImplementation.DATASET_REDUCE
_ROUND_SPEC = tf.TensorSpec([], tf.int32)


def build_weighted_fed_avg_with_optimizer_schedule(
    model_fn, client_learning_rate_fn, client_optimizer_fn,
    server_optimizer_fn=None, model_distributor=None, model_aggregator=None,
    metrics_aggregator=None, loop_implementation=_REDUCE):
  """FedAvg, weighted by example counts, with the client optimizer's
  learning rate scheduled by round: `client_learning_rate_fn(round_num)`
  (traced with an int32 tensor) gives the rate, `client_optimizer_fn(rate)`
  the `tff.learning.optimizers.Optimizer`."""
  who = 'build_weighted_fed_avg_with_optimizer_schedule'
  for name, fn in (('client_learning_rate_fn', client_learning_rate_fn),
                   ('client_optimizer_fn', client_optimizer_fn)):
    if not callable(fn):
      raise errors.InvalidTypeError(
          f'{who}: {name} must be a function, got {fn!r}.')
  loop_builder.check_loop_implementation(loop_implementation, who)
  metrics_aggregator = model_delta.check_metrics_aggregator(
      metrics_aggregator, who)
  model = model_fns.functional_model_of(model_fn, who)
  client_work = _scheduled_client_work(
      who, model, client_learning_rate_fn,
      _optimizer_at_rate(who, client_optimizer_fn), metrics_aggregator)
  return averaging.compose(who, model.initial_model_weights, client_work,
                           server_optimizer_fn, model_aggregator,
                           weighted=True, model_distributor=model_distributor)


def _optimizer_at_rate(who, client_optimizer_fn):
  """`rate -> pure optimizer` (the rate a tensor, inside the clients'
  piece). As TFF does, one optimizer is built up front, at rate 1.0, so a
  wrong kind fails here; a Keras optimizer is translated from that one's
  settings, at each round's rate (its variables cannot be read in a
  piece)."""
  what = f'{who}: client_optimizer_fn'
  probe = client_optimizer_fn(1.0)
  if keras_optimizers.is_keras_optimizer(probe):
    build, settings = keras_optimizers.translation(probe, what)
    return lambda rate: build(**dict(settings, learning_rate=rate))
  model_fns.optimizer_of(probe, f'{what}(1.0)')
  return lambda rate: model_fns.optimizer_of(client_optimizer_fn(rate), what)


def _scheduled_client_work(who, model, learning_rate_fn, optimizer_at_rate,
                           metrics_aggregator):
  """FedAvg's client work (`model_delta.client_work_of`) whose state, the
  round number, builds each client's optimizer; after the round the state
  counts one more and the measurements add the round's rate."""

  def rate_of(round_num):
    return tf.cast(learning_rate_fn(round_num), tf.float32)

  def first_round(trainable_specs):
    del trainable_specs
    return tf.constant(0, tf.int32)

  def train(model, dataset, weights, round_num):
    step = model_delta.training_step(optimizer_at_rate(rate_of(round_num)),
                                     hparams_in_state=False)
    return step.run(model, dataset, weights, None)

  inner = model_delta.client_work_of(
      model, model_delta.ClientStep(first_round, train),
      model_delta.ClientWeighting.NUM_EXAMPLES, metrics_aggregator)
  state_type, weights_type, data_type = inner.next.parameter_types
  rate_tf = specs.tf_computation(rate_of, _ROUND_SPEC)
  add_one = specs.tf_computation(lambda round_num: round_num + 1,
                                 _ROUND_SPEC)

  @computations.federated_computation()
  def init_fn():
    return inner.initialize()

  @computations.federated_computation(state_type, weights_type, data_type)
  def next_fn(state, weights, client_data):
    output = inner.next(state, weights, client_data)
    measurements = intrinsics.federated_zip(collections.OrderedDict(
        train=output.measurements['train'],
        client_learning_rate=intrinsics.federated_map(rate_tf, state)))
    return measured.MeasuredProcessOutput(
        intrinsics.federated_map(add_one, state), output.result,
        measurements)

  return templates.ClientWorkProcess(init_fn, next_fn)
