"""DP-FedAvg's aggregation: clip each client's update, noise the sum once.

The whole update (every tensor, flattened into one vector) goes through one
`AdaptiveL2ClippingEncodingStage`: `encode` at each client clips it to L2 norm
C (and reports whether its norm was at most C), `decode` at the server adds
N(0, (z C)^2) once to the sum, and `update_state` moves C toward a quantile
of the norms when clipping adapts (Andrew et al. 2021; with a fixed clip its
learning rate is 0). The mean divides by the public `expected_clients`, not
by the clients that came: each client counts once and can change the mean by
at most C / expected_clients, the sensitivity the noise is scaled to
(McMahan et al. 2018). Everything runs inside the form's pieces, its noise
seeded purely from the stage's secret seed and the round.
"""

import tensorflow as tf

from canonical.aggregators import factory
from canonical.aggregators import mean as mean_lib
from canonical.aggregators import sum_factory
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import ir
from canonical.core import specs
from canonical.core import types as ft
from canonical.core import privacy_releases
from canonical.templates import aggregation_process
from canonical.templates import measured
from canonical.templates import measured_process
from encoders.core import seeds
from encoders.stages import clipping

tf_computation = specs.tf_computation
federated_computation = computations.federated_computation

WEIGHT_SPEC = mean_lib.WEIGHT_SPEC
_KEY = clipping.AdaptiveL2ClippingEncodingStage.ENCODED_VALUES_KEY


def default_indicator_stddev(expected_clients):
  """The adaptive clip's count noise by default: Andrew et al.'s privacy."""
  return expected_clients / 10.0


def round_noise_multiplier(noise_multiplier, expected_clients, adaptive,
                           indicator_stddev=None):
  """The noise multiplier of one round for accounting: the update's, with
  adaptive clipping combined with its count's."""
  if not adaptive:
    return noise_multiplier
  if indicator_stddev is None:
    indicator_stddev = default_indicator_stddev(expected_clients)
  return privacy_releases.combined_noise_multiplier([noise_multiplier,
                                            indicator_stddev])


class DPMeanFactory(factory.WeightedAggregationFactory):
  """DP-FedAvg's unweighted, differentially private mean (see the module
  docstring), through the clipping encoder stage.

  Args:
    noise_multiplier: z; the sum gets N(0, (z C)^2) per coordinate.
    clip: C, the L2 norm each client's whole update is clipped to (the
      initial C when `adaptive`).
    expected_clients: the public expected number of clients per round (the
      runner's sampling probability times the population): the denominator.
    adaptive: let C follow the `target_quantile` of the update norms, by
      `learning_rate` per round, from a count noised at `indicator_stddev`
      (default expected_clients / 10, as Andrew et al.).
    seed: the noise's seed; None draws a secret one at each `create`, baked
      into the compiled form (keep saved forms as private as the data).

  A client of weight 0 (FedAvg's non-finite update) sends zeros. The
  process's state is the stage's, its measurements empty; its
  `noise_multiplier` attribute is the round's for accounting (with adaptive
  clipping, the update's and the count's combined).
  """

  def __init__(self, noise_multiplier, clip, expected_clients, adaptive=False,
               target_quantile=0.5, learning_rate=0.2, indicator_stddev=None,
               seed=None):
    if adaptive and indicator_stddev is None:
      indicator_stddev = default_indicator_stddev(expected_clients)
    self._noise_multiplier, self._clip = noise_multiplier, clip
    self._expected_clients, self._adaptive = expected_clients, adaptive
    self._target_quantile, self._learning_rate = target_quantile, learning_rate
    self._indicator_stddev, self._seed = indicator_stddev, seed
    self._stage()  # Bad arguments are refused here, not at `create`.

  def _stage(self):
    return clipping.AdaptiveL2ClippingEncodingStage(
        self._clip, target_quantile=self._target_quantile,
        learning_rate=self._learning_rate if self._adaptive else 0.0,
        noise_multiplier=self._noise_multiplier,
        indicator_stddev=self._indicator_stddev if self._adaptive else 0.0,
        expected_clients=self._expected_clients, seed=self._seed)

  def create(self, value_type, weight_type):
    where = 'DPMeanFactory.create'
    value_spec = factory.float_value_type(value_type, where)
    weight_type = factory.value_type_of(weight_type, where, 'weight_type')
    stage, expected_clients = self._stage(), self._expected_clients
    leaves = tf.nest.flatten(value_spec)
    sizes = [spec.shape.num_elements() for spec in leaves]

    initialize = tf_computation(stage.initial_state)
    state_spec = specs.plain(initialize.result_spec)

    def clip_params(state):
      with seeds.noise_round(state[stage.ROUND_STATE_KEY]):
        return stage.get_params(state)[0]

    params = tf_computation(clip_params, state_spec)

    def clip_at_client(value, weight, encode_params):
      counted = tf.cast(weight > 0, tf.float32)
      flat = tf.concat([tf.reshape(tf.cast(x, tf.float32), [-1])
                        for x in tf.nest.flatten(value)], 0)
      flat = tf.where(tf.math.is_finite(flat), flat, tf.zeros_like(flat))
      encoded, updates = stage.encode(flat, encode_params)
      return (encoded[_KEY] * counted,
              {k: v * counted for k, v in updates.items()})

    encode = tf_computation(clip_at_client, value_spec, weight_type,
                            specs.plain(params.result_spec))

    def finish_at_server(state, total):
      summed, updates = total
      with seeds.noise_round(state[stage.ROUND_STATE_KEY]):
        _, decode_params = stage.get_params(state)
        noisy = stage.decode({_KEY: summed}, decode_params)
        new_state = stage.update_state(state, updates)
      mean = noisy / float(expected_clients)
      parts = tf.split(mean, sizes)
      return new_state, tf.nest.pack_sequence_as(value_spec, [
          tf.cast(tf.reshape(part, spec.shape), spec.dtype)
          for part, spec in zip(parts, leaves)])

    finish = tf_computation(finish_at_server, state_spec,
                            specs.plain(encode.result_spec))

    init_fn = aggregation_process.initialize_at_server(initialize)
    release = privacy_releases.Release('DPMeanFactory', round_noise_multiplier(
        self._noise_multiplier, expected_clients, self._adaptive,
        self._indicator_stddev))

    @federated_computation(ft.server(state_spec), ft.clients(value_spec),
                           ft.clients(weight_type))
    def next_fn(state, value, weight):
      clipped = intrinsics.federated_map(
          encode, (value, weight, intrinsics.federated_broadcast(
              intrinsics.federated_map(params, state))))
      new_state, mean = intrinsics.federated_map(
          finish, (state, intrinsics.federated_sum(clipped)))
      ir.note(mean, release)
      return measured.MeasuredProcessOutput(new_state, mean,
                                            sum_factory.empty_at_server())

    process = aggregation_process.AggregationProcess(init_fn, next_fn)
    process.noise_multiplier = release.noise_multiplier
    process.encoders = measured_process.treatments(value_spec, 32,
                                                   self._description())
    return process

  def _description(self):
    clip = self._clip
    clipping_text = (f'adaptive L2 clip (from {clip:g}, to the '
                     f'{self._target_quantile:g} quantile)' if self._adaptive
                     else f'L2 clip {clip:g}')
    return (f'DP: whole update to {clipping_text}, Gaussian noise '
            f'z={self._noise_multiplier:g} once on the sum, unweighted mean '
            f'over {self._expected_clients:g} expected clients')


def build_dp_mean_process(value_spec, noise_multiplier, clip,
                          expected_clients, adaptive=False,
                          target_quantile=0.5, learning_rate=0.2,
                          indicator_stddev=None, seed=None):
  """`DPMeanFactory(...)`'s mean of values like `value_spec` (a model's
  trainable weights), as the older building block of
  `build_federated_averaging_process`: `next(state, value, weight) ->
  (state, mean)`, with the round's `noise_multiplier` for accounting."""
  value_spec = specs.check_value_spec(value_spec, 'build_dp_mean_process')
  return mean_lib.older_block(
      DPMeanFactory(noise_multiplier, clip, expected_clients, adaptive,
                    target_quantile, learning_rate, indicator_stddev, seed),
      value_spec, 'dp_mean')
