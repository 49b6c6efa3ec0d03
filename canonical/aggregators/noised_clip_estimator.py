"""The adaptive clip of `DistributedDpSumFactory` (`auto_l2_clip`): a
quantile estimate of the clients' norms whose count is summed securely and
noised at the server: the clip's own Gaussian release, apart from the
value's. Kept apart from the factory because it is a second DP mechanism,
with its own noise and seed, that the factory only plugs into its clipping.
"""

import collections

import tensorflow as tf

from canonical.aggregators import quantile_estimation
from canonical.aggregators import secure
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import specs
from canonical.core import types as ft
from canonical.templates import estimation_process
from encoders.core import seeds
from encoders.stages import clipping as clipping_stage

F32 = tf.TensorSpec([], tf.float32)
ROUND_SPEC = tf.TensorSpec([], tf.int64)


def build_clip_estimator(initial_clip, target_quantile, learning_rate,
                         count_stddev, expected_clients, secret):
  """TFF's `PrivateQuantileEstimationProcess` of tensorflow_privacy's
  `QuantileEstimatorQuery` (geometric updates): each client reports
  whether its norm is at most C, centred to +-1/2, summed by
  `SecureSumFactory(0.5, -0.5)`; the server adds N(0, count_stddev**2),
  divides by the expected clients and moves C. State `(query_state,
  record_state, noise_round)`."""
  state_type = quantile_estimation.QuantileEstimatorState

  def initial():
    return state_type(
        tf.constant(initial_clip, tf.float32),
        tf.constant(target_quantile, tf.float32),
        tf.constant(learning_rate, tf.float32),
        collections.OrderedDict(
            stddev=tf.constant(count_stddev, tf.float32),
            denominator=tf.constant(expected_clients, tf.float32)))

  initial_state = specs.tf_computation(initial)
  query_spec = specs.plain(initial_state.result_spec)
  record = specs.tf_computation(
      lambda clip, norm: tf.cast(norm <= clip, tf.float32) - 0.5, F32, F32)
  record_process = secure.SecureSumFactory(0.5, -0.5).create(F32)

  def update(total, state, round_number):
    count = state.below_estimate_state
    noised = clipping_stage.add_gaussian_noise(
        total, count['stddev'],
        seeds.fold_in(seeds.initial_seed(secret), round_number))
    below = tf.clip_by_value(noised / count['denominator'] + 0.5, 0.0, 1.0)
    estimate = clipping_stage.geometric_quantile_step(
        state.current_estimate, below, state.target_quantile,
        state.learning_rate)
    return state._replace(current_estimate=estimate), round_number + 1

  move = specs.tf_computation(update, F32, query_spec, ROUND_SPEC)
  start = specs.tf_computation(lambda: tf.constant(0, tf.int64))

  @computations.federated_computation()
  def init_fn():
    return intrinsics.federated_zip((
        intrinsics.federated_eval(initial_state, ft.SERVER),
        record_process.initialize(),
        intrinsics.federated_eval(start, ft.SERVER)))

  @computations.federated_computation(init_fn.type_signature.result,
                                      ft.clients(F32))
  def next_fn(state, norms):
    query_state, record_state, noise_round = state
    clip = intrinsics.federated_broadcast(query_state.current_estimate)
    reports = intrinsics.federated_map(record, (clip, norms))
    output = record_process.next(record_state, reports)
    new_query_state, new_round = intrinsics.federated_map(
        move, (output.result, query_state, noise_round))
    return intrinsics.federated_zip((new_query_state, output.state,
                                     new_round))

  report_fn = computations.federated_computation(
      lambda state: state[0].current_estimate, init_fn.type_signature.result)
  return estimation_process.EstimationProcess(init_fn, next_fn, report_fn)
