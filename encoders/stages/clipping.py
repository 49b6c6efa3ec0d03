"""Clipping and Gaussian noise for differentially private aggregation (DP-FedAvg).

DP-FedAvg (McMahan et al. 2018) bounds each client's contribution by clipping
its update to L2 norm C, sums the clipped updates, and adds Gaussian noise of
standard deviation z * C (z, the noise multiplier) once to the sum. Adaptive
clipping (Andrew et al. 2021) lets C follow a target quantile of the clients'
update norms, estimated privately from noisy counts.

Where each piece runs:

- Clipping is `encode` (on each client): `basic.ClipByNormEncodingStage` for a
  fixed clip, `AdaptiveL2ClippingEncodingStage` for one that adapts; decode is
  the identity, so both commute with sum.
- Noise is `decode` (`GaussianNoiseEncodingStage`, or
  `AdaptiveL2ClippingEncodingStage` with `noise_multiplier > 0`). A stage that
  commutes with sum, with every ancestor commuting too, is decoded by
  `GatherEncoder.decode_after_sum`, which runs once per round on the sum: so
  the noise is added once, to the aggregate. Placed under a stage that does
  not commute, it would be decoded per client before the sum, adding noise
  to every client (more noise than needed, never less); `check_noise_after_sum`
  refuses such a tree. Noise in `decode` means these stages commute with sum
  only in expectation: `decode(sum)` carries one draw, the sum of decodings
  one per client.
- Noise is drawn statelessly (`add_gaussian_noise`) from a seed made by
  `seeds`: run directly, fresh on every call; inside a form, a pure function
  of the stage's seed, the round and the bits of the aggregate. The noise
  protects only while its seed is unknown: with `seed=None` a stage draws a
  secret 63-bit seed when it is built, used only inside forms (so it is baked
  into a compiled form: keep saved forms as private as the data); an explicit
  `seed` makes the noise reproducible and is for tests and simulations.
  Philox and TF's float sampling are not cryptographically secure:
  research-grade privacy, not audited.
"""

import numbers
import secrets

import numpy as np
import tensorflow as tf

from encoders import errors
from encoders.core import core_encoder
from encoders.core import encoding_stage
from encoders.core import seeds
from encoders.stages import basic

# The adaptive clip never leaves this range, so it stays positive and finite.
MIN_ADAPTIVE_CLIP = 1e-20
MAX_ADAPTIVE_CLIP = 1e20

# Fold-in tags that keep a round's two noise draws apart.
_AGGREGATE_NOISE = 0
_INDICATOR_NOISE = 1


def _check_real(stage_name, arg_name, value, low, high, low_open=True,
                high_open=True):
  """`value` as a float in the interval, or a ValueError/TypeError naming it."""
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    raise errors.InvalidTypeError(
        f'{stage_name}: {arg_name} must be a number, got '
        f'{value!r}.')
  value = float(value)
  above = value > low if low_open else value >= low
  below = value < high if high_open else value <= high
  if not (above and below):
    interval = (('(' if low_open else '[') + f'{low}, {high}' +
                (')' if high_open else ']'))
    raise errors.InvalidValueError(
        f'{stage_name}: {arg_name} must be in {interval}, got '
        f'{value!r}.')
  return value


class _NoiseSeeds:
  """Where a noisy stage's seeds come from (see the module docstring)."""

  def __init__(self, stage_name, seed):
    self._seed = seeds.check_seed(stage_name, seed)
    self._secret = secrets.randbits(63) if self._seed is None else None

  def round_seed(self):
    """`[2]` int64: fresh when run directly; inside a form, seed and round."""
    if seeds.is_pure() and self._seed is None:
      return seeds.params_seed(self._secret)
    return seeds.params_seed(self._seed)


def add_gaussian_noise(aggregate, stddev, seed):
  """`aggregate + N(0, stddev**2)` per element, drawn statelessly from `seed`.

  Pure: the same `seed` ([2] int tensor, or a Python int) gives the same
  bits. Half-precision values are noised in float32 and cast back.
  """
  aggregate = tf.convert_to_tensor(aggregate)
  basic.check_float_input('add_gaussian_noise', aggregate)
  if not tf.is_tensor(stddev):
    stddev = _check_real('add_gaussian_noise', 'stddev', stddev, 0.0, np.inf,
                         low_open=False)
  if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
    seed = seeds.initial_seed(seed)
  wide = basic.wide_dtype(aggregate.dtype)
  noise = tf.random.stateless_normal(tf.shape(aggregate),
                                     seed=tf.cast(seed, tf.int64), dtype=wide,
                                     alg=seeds.ALGORITHM)
  noised = tf.cast(aggregate, wide) + tf.cast(stddev, wide) * noise
  return tf.cast(noised, aggregate.dtype)


def geometric_quantile_step(estimate, fraction_below, target_quantile,
                            learning_rate):
  """Andrew et al.'s step of a quantile estimate (an adaptive clip):
  `estimate * exp(-learning_rate * (fraction_below - target_quantile))`.
  The one rule of every adaptive clip and quantile estimate here (this
  stage, TFF's `DifferentiallyPrivateFactory.gaussian_adaptive` and
  `PrivateQuantileEstimationProcess`); each keeps its own bounds."""
  return estimate * tf.math.exp(
      -learning_rate * (fraction_below - target_quantile))


def _noised_sum(values, decode_params, stddev_key, seed_key):
  """Adds the stage's noise to `values`, seeded by the params and its bits.

  Folding in a fingerprint of the aggregate gives two tensors noised in the
  same round independent draws even when their stages share a seed.
  """
  seed = seeds.client_seed(seeds.fold_in(decode_params[seed_key], _AGGREGATE_NOISE),
                           values)
  return add_gaussian_noise(values, decode_params[stddev_key], seed)


def check_noise_after_sum(encoder):
  """A ValueError if a noisy stage of `encoder` would decode before the sum.

  `encoder` is an `Encoder` (`EncoderComposer(...).make()`). Noise stages
  must sit where every ancestor commutes with sum; then `decode_after_sum`
  adds their noise once, to the aggregate.
  """
  def visit(node, commuting, path):
    stage = node.stage
    stage = getattr(stage, 'wrapped_stage', stage)
    if (getattr(stage, 'adds_noise_on_decode', False)
        and not commuting[core_encoder.COMMUTE]):
      raise errors.InvalidValueError(
          f'check_noise_after_sum: stage {stage.name!r} at {path or "root"} '
          'adds noise on decode but sits under a stage that does not commute '
          'with sum, so it would be decoded (and noised) per client before '
          'the sum; move it up to where every ancestor commutes with sum.')
    for key, child in node.children.items():
      visit(child, commuting[core_encoder.CHILDREN][key],
            f'{path}/{key}'.lstrip('/'))

  visit(encoder, encoder.commuting_structure, '')


@encoding_stage.tf_style_encoding_stage
class GaussianNoiseEncodingStage(encoding_stage.EncodingStageInterface):
  """Adds N(0, (noise_multiplier * clip_norm)**2) once to the aggregate.

  Encode sends the value unchanged; decode adds the noise. In a
  `GatherEncoder` the stage, placed at the root or under stages that all
  commute with sum (such as `ClipByNormEncodingStage(clip_norm)`), is decoded
  once per round after the sum, so the sum gets one draw: the Gaussian
  mechanism of DP-FedAvg with sensitivity `clip_norm`. `clip_norm` must bound
  every client's contribution to this tensor's sum. With one encoder per
  tensor and per-tensor clips C_l, pass the overall clip sqrt(sum_l C_l**2)
  so that `noise_multiplier` is the round's (`canonical.privacy`).

  Seeds: see the module docstring. `noise_multiplier=0` adds nothing.
  """

  ENCODED_VALUES_KEY = 'values'
  NOISE_STDDEV_PARAMS_KEY = 'noise_stddev'
  SEED_PARAMS_KEY = 'seed'

  def __init__(self, noise_multiplier, clip_norm, seed=None):
    name = 'GaussianNoiseEncodingStage'
    self._noise_multiplier = _check_real(name, 'noise_multiplier',
                                         noise_multiplier, 0.0, np.inf,
                                         low_open=False)
    self._clip_norm = _check_real(name, 'clip_norm', clip_norm, 0.0, np.inf)
    self._seeds = _NoiseSeeds(name, seed)

  @property
  def noise_multiplier(self):
    return self._noise_multiplier

  @property
  def clip_norm(self):
    return self._clip_norm

  @property
  def stddev(self):
    return self._noise_multiplier * self._clip_norm

  @property
  def adds_noise_on_decode(self):
    return self._noise_multiplier > 0

  @property
  def name(self):
    return 'gaussian_noise'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_VALUES_KEY]

  @property
  def commutes_with_sum(self):
    return True  # In expectation; declared so that decoding follows the sum.

  @property
  def decode_needs_input_shape(self):
    return False

  def get_params(self):
    if not self.adds_noise_on_decode:
      return {}, {}
    return {}, {self.NOISE_STDDEV_PARAMS_KEY: self.stddev,
                self.SEED_PARAMS_KEY: self._seeds.round_seed()}

  def encode(self, x, encode_params):
    del encode_params  # Unused.
    basic.check_float_input('GaussianNoiseEncodingStage', x)
    return {self.ENCODED_VALUES_KEY: tf.identity(x)}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del num_summands, shape  # One draw, however many summands.
    values = encoded_tensors[self.ENCODED_VALUES_KEY]
    if not self.adds_noise_on_decode:
      return tf.identity(values)
    return _noised_sum(values, decode_params, self.NOISE_STDDEV_PARAMS_KEY,
                       self.SEED_PARAMS_KEY)


@encoding_stage.tf_style_adaptive_encoding_stage
class AdaptiveL2ClippingEncodingStage(
    encoding_stage.AdaptiveEncodingStageInterface):
  """L2 clipping whose clip follows a quantile of the clients' update norms.

  The state is the clip C (and a round counter that seeds the noise). Each
  client clips to C and reports whether its norm was at most C (`below_clip`,
  0 or 1) and a 1 (`clients`), both summed over clients. `update_state`
  moves C geometrically toward the `target_quantile` of the norms (Andrew et
  al. 2021): `C <- C * exp(-learning_rate * (fraction_below - target))`,
  kept in [1e-20, 1e20]; a round with no clients leaves C unchanged.

  Privacy of the quantile estimate: C is released every round, so for DP the
  count must be noised. With `indicator_stddev > 0`, N(0, indicator_stddev**2)
  is added to the `below_clip` sum, and `fraction_below` = noisy sum /
  `expected_clients` (public, e.g. sampling probability * population),
  clipped to [0, 1]; the exact client count is not used. Adding or removing
  one client changes the sum by at most 1, so this is a Gaussian mechanism of
  noise multiplier `indicator_stddev`, composed each round with the update's
  (`noise_multiplier`): together one Gaussian mechanism of multiplier
  `(noise_multiplier**-2 + indicator_stddev**-2) ** -0.5`
  (`canonical.privacy.combined_noise_multiplier`). Andrew et al. noise a
  centred count (reports of +-1/2, sensitivity 1/2) at stddev
  expected_clients / 20; the same privacy here, with 0/1 reports, takes
  `indicator_stddev = expected_clients / 10`. Without indicator noise the
  clip leaks the norms: not private.

  `noise_multiplier > 0` also adds N(0, (noise_multiplier * C)**2) to the
  aggregate on decode, once after the sum as `GaussianNoiseEncodingStage`
  does, with the clip of the round. With one encoder per tensor (L tensors,
  each clipped to its own C), the round's mechanism has noise multiplier
  `noise_multiplier / sqrt(L)` (`combined_noise_multiplier`).

  Seeds: see the module docstring.
  """

  ENCODED_VALUES_KEY = 'clipped_values'
  CLIP_NORM_STATE_KEY = 'clip_norm'
  ROUND_STATE_KEY = 'round'
  BELOW_CLIP_STATE_UPDATE_KEY = 'below_clip'
  CLIENTS_STATE_UPDATE_KEY = 'clients'
  CLIP_NORM_PARAMS_KEY = 'clip_norm'
  NOISE_STDDEV_PARAMS_KEY = 'noise_stddev'
  SEED_PARAMS_KEY = 'seed'

  def __init__(self, initial_clip, target_quantile=0.5, learning_rate=0.2,
               noise_multiplier=0.0, indicator_stddev=0.0,
               expected_clients=None, seed=None):
    name = 'AdaptiveL2ClippingEncodingStage'
    self._initial_clip = _check_real(name, 'initial_clip', initial_clip,
                                     MIN_ADAPTIVE_CLIP, MAX_ADAPTIVE_CLIP,
                                     low_open=False, high_open=False)
    self._target_quantile = _check_real(name, 'target_quantile',
                                        target_quantile, 0.0, 1.0,
                                        low_open=False, high_open=False)
    self._learning_rate = _check_real(name, 'learning_rate', learning_rate,
                                      0.0, np.inf, low_open=False)
    self._noise_multiplier = _check_real(name, 'noise_multiplier',
                                         noise_multiplier, 0.0, np.inf,
                                         low_open=False)
    self._indicator_stddev = _check_real(name, 'indicator_stddev',
                                         indicator_stddev, 0.0, np.inf,
                                         low_open=False)
    if expected_clients is not None:
      expected_clients = _check_real(name, 'expected_clients',
                                     expected_clients, 0.0, np.inf)
    elif self._indicator_stddev > 0:
      raise errors.InvalidValueError(
          f'{name}: indicator_stddev > 0 needs expected_clients '
          '(the public expected number of clients per round), '
          'since the exact count would leak.')
    self._expected_clients = expected_clients
    self._seeds = _NoiseSeeds(name, seed)

  @property
  def initial_clip(self):
    return self._initial_clip

  @property
  def target_quantile(self):
    return self._target_quantile

  @property
  def learning_rate(self):
    return self._learning_rate

  @property
  def noise_multiplier(self):
    return self._noise_multiplier

  @property
  def indicator_stddev(self):
    return self._indicator_stddev

  @property
  def expected_clients(self):
    return self._expected_clients

  @property
  def adds_noise_on_decode(self):
    return self._noise_multiplier > 0

  @property
  def name(self):
    return 'adaptive_l2_clipping'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_VALUES_KEY]

  @property
  def commutes_with_sum(self):
    # Exactly without noise; with it, in expectation (see the module docstring).
    return True

  @property
  def decode_needs_input_shape(self):
    return False

  @property
  def state_update_aggregation_modes(self):
    return {
        self.BELOW_CLIP_STATE_UPDATE_KEY:
            encoding_stage.StateAggregationMode.SUM,
        self.CLIENTS_STATE_UPDATE_KEY: encoding_stage.StateAggregationMode.SUM,
    }

  def initial_state(self):
    return {self.CLIP_NORM_STATE_KEY: tf.constant(self._initial_clip,
                                                  tf.float32),
            self.ROUND_STATE_KEY: tf.constant(0, tf.int64)}

  def update_state(self, state, state_update_tensors):
    clip = tf.cast(state[self.CLIP_NORM_STATE_KEY], tf.float32)
    round_number = tf.cast(state[self.ROUND_STATE_KEY], tf.int64)
    below = tf.cast(state_update_tensors[self.BELOW_CLIP_STATE_UPDATE_KEY],
                    tf.float32)
    if self._indicator_stddev > 0:
      seed = seeds.fold_in(self._round_seed(round_number), _INDICATOR_NOISE)
      noisy = add_gaussian_noise(below, self._indicator_stddev, seed)
      fraction = tf.clip_by_value(noisy / self._expected_clients, 0.0, 1.0)
    else:
      clients = tf.cast(state_update_tensors[self.CLIENTS_STATE_UPDATE_KEY],
                        tf.float32)
      fraction = tf.where(clients > 0,
                          below / tf.maximum(clients, 1.0),
                          self._target_quantile)
    new_clip = tf.clip_by_value(
        geometric_quantile_step(clip, fraction, self._target_quantile,
                                self._learning_rate), MIN_ADAPTIVE_CLIP,
                                MAX_ADAPTIVE_CLIP)
    return {self.CLIP_NORM_STATE_KEY: new_clip,
            self.ROUND_STATE_KEY: round_number + 1}

  def get_params(self, state):
    clip = state[self.CLIP_NORM_STATE_KEY]
    decode_params = {}
    if self.adds_noise_on_decode:
      decode_params = {
          self.NOISE_STDDEV_PARAMS_KEY: self._noise_multiplier * clip,
          self.SEED_PARAMS_KEY: self._round_seed(state[self.ROUND_STATE_KEY]),
      }
    return {self.CLIP_NORM_PARAMS_KEY: clip}, decode_params

  def encode(self, x, encode_params):
    basic.check_float_input('AdaptiveL2ClippingEncodingStage', x)
    clip = encode_params[self.CLIP_NORM_PARAMS_KEY]
    clipped, norm = basic.clip_by_l2_norm(x, clip)
    below = tf.cast(norm <= tf.cast(clip, norm.dtype), tf.float32)
    return ({self.ENCODED_VALUES_KEY: clipped},
            {self.BELOW_CLIP_STATE_UPDATE_KEY: below,
             self.CLIENTS_STATE_UPDATE_KEY: tf.constant(1.0)})

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del num_summands, shape  # One draw, however many summands.
    values = encoded_tensors[self.ENCODED_VALUES_KEY]
    if not self.adds_noise_on_decode:
      return tf.identity(values)
    return _noised_sum(values, decode_params, self.NOISE_STDDEV_PARAMS_KEY,
                       self.SEED_PARAMS_KEY)

  def _round_seed(self, round_number):
    """Differs every round even where the process sets no `noise_round`."""
    return seeds.fold_in(self._seeds.round_seed(), round_number)
