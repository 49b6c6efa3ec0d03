"""DP-FedAvg through secure aggregation: clipped, compressed, noised once.

Each client clips its whole update (every tensor, one vector) to L2 norm C,
rotates it by a randomized Hadamard transform (signs shared by the round) and
rounds every coordinate stochastically to a level j * s with |j| <= K =
2**(bits-1) - 1, on a range r = `range_stddevs` * C / sqrt(block) fixed by C
(a rotated coordinate of a norm-C vector spreads about C / sqrt(block)).
Rounding can lengthen a vector, which would break the noise's calibration, so
a client keeps the first of `tries` roundings whose norm is at most Delta
(conditional rounding, as in Kairouz et al., ICML 2021), and sends zeros if
none is: no client's decoded contribution is longer than Delta, the sum's
sensitivity, whatever its update.

The integers j go through `federated_secure_modular_sum` (signed values mod a
power of two, so no count of clients is needed to decode, and none is
released). The server decodes the sum once, adds N(0, (z Delta)^2) per
coordinate (the rotation is orthogonal, so the noise is the same on either
side of it), unrotates, and divides by the public expected number of clients.
A round's privacy is then DP-FedAvg's with noise multiplier z
(`canonical.privacy`), and each coordinate costs `bits` bits before masking.
"""

import math
import secrets

import tensorflow as tf

from canonical.aggregators import factory
from canonical.aggregators import mean as mean_lib
from canonical.aggregators import sum_factory
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import ir
from canonical.core import specs
from canonical.core import types as ft
from canonical import errors
from canonical.core import privacy_releases
from canonical.templates import aggregation_process
from canonical.templates import measured
from canonical.templates import measured_process
from encoders.core import seeds
from encoders.stages import basic
from encoders.stages import clipping
from encoders.stages import rotation as rotation_lib

tf_computation = specs.tf_computation
federated_computation = computations.federated_computation
WEIGHT_SPEC = mean_lib.WEIGHT_SPEC  # A name this module had, kept.

# Conditional rounding's slack: a rounding is longer than Delta with
# probability at most exp(-_LOG_INVERSE_BETA), so `tries` of them rarely fail.
_LOG_INVERSE_BETA = math.log(100.0)
# The modulus holds a sum of this many times the expected clients' levels.
_CLIENTS_HEADROOM = 4


def sensitivity(clip, size, step):
  """Delta: the longest decoded contribution a client may send. Stochastic
  rounding of a vector of norm <= C to a grid of `step` stays within Delta
  with probability >= 1 - 1/100 (the bound of Kairouz et al. 2021)."""
  slack = math.sqrt(2.0 * _LOG_INVERSE_BETA) * (
      step * clip + step**2 * math.sqrt(size) / 2.0)
  return math.sqrt(clip**2 + size * step**2 / 4.0 + slack)


def _check(noise_multiplier, clip, expected_clients, bits, tries, who):
  for name, value, least, kind in (
      ('noise_multiplier', noise_multiplier, 0.0, 'non-negative'),
      ('clip', clip, 1e-12, 'positive'),
      ('expected_clients', expected_clients, 1e-12, 'positive')):
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or
        not math.isfinite(value) or value < least):
      raise errors.InvalidValueError(
          f'{who}: {name} must be a {kind} number, got '
          f'{value!r}.')
  if isinstance(bits, bool) or not isinstance(bits, int) or not 2 <= bits <= 16:
    raise errors.InvalidValueError(
        f'{who}: bits must be an int in [2, 16], got {bits!r}.')
  if isinstance(tries, bool) or not isinstance(tries, int) or tries < 1:
    raise errors.InvalidValueError(
        f'{who}: tries must be a positive int, got {tries!r}.')


class DPSecureMeanFactory(factory.WeightedAggregationFactory):
  """An unweighted, differentially private mean of float values through
  secure sums of `bits`-bit levels (module docstring).

  Args:
    noise_multiplier: z; the decoded sum gets N(0, (z Delta)^2) per
      coordinate, Delta = `sensitivity(clip, size, step)`.
    clip: C, the L2 norm each client's whole update is clipped to.
    expected_clients: the public expected number of clients per round: the
      denominator, and (x4) what the modulus holds.
    bits: bits per coordinate: 2**bits - 1 levels in [-r, r].
    range_stddevs: r in standard deviations of a rotated coordinate.
    tries: roundings a client draws to find one no longer than Delta.
    seed: the noise's seed; None draws a secret one at each `create`, baked
      into the compiled form (keep saved forms as private as the data).
    max_block_size: the rotation's largest Hadamard block.

  The weight only says whether a client counts (0: FedAvg dropped its
  update). The process's state is the round number, its measurements empty;
  its `noise_multiplier`, `clip` and `sensitivity` attributes are the
  round's, for accounting.
  """

  def __init__(self, noise_multiplier, clip, expected_clients, bits=8,
               range_stddevs=4.0, tries=4, seed=None, max_block_size=2**14):
    who = 'DPSecureMeanFactory'
    _check(noise_multiplier, clip, expected_clients, bits, tries, who)
    self._noise_multiplier, self._clip = noise_multiplier, clip
    self._expected_clients, self._bits = expected_clients, bits
    self._range_stddevs, self._tries = range_stddevs, tries
    self._seed = None if seed is None else seeds.check_seed(who, seed)
    self._max_block_size = max_block_size

  def create(self, value_type, weight_type):
    where = 'DPSecureMeanFactory.create'
    value_spec = factory.float_value_type(value_type, where)
    weight_type = factory.value_type_of(weight_type, where, 'weight_type')
    noise_multiplier, clip = self._noise_multiplier, self._clip
    expected_clients, bits = self._expected_clients, self._bits
    range_stddevs, tries, seed = self._range_stddevs, self._tries, self._seed
    max_block_size = self._max_block_size
    leaves = tf.nest.flatten(value_spec)
    sizes = [spec.shape.num_elements() for spec in leaves]
    size = sum(sizes)
    most = 2**(bits - 1) - 1
    bound = clip * range_stddevs / math.sqrt(min(size, max_block_size))
    step = bound / most
    delta = sensitivity(clip, size, step)
    modulus = 2**(bits + math.ceil(math.log2(
        _CLIENTS_HEADROOM * max(expected_clients, 1))) + 1)
    if modulus > 2**31:
      raise errors.InvalidValueError(
          f'{where}: {bits} bits for {expected_clients:g} expected '
          'clients need a modulus above 2**31; use fewer bits.')
    noise_seed = secrets.randbits(63) if seed is None else seed

    initialize = tf_computation(lambda: tf.constant(0, tf.int64))
    state_spec = specs.plain(initialize.result_spec)

    def rotation_seed(round_number):
      """Public and the same at every client of a round; new each round."""
      return seeds.fold_in(seeds.initial_seed(0), round_number)

    def encode_at_client(value, weight, round_number):
      flat = tf.concat([tf.reshape(tf.cast(x, tf.float32), [-1])
                        for x in tf.nest.flatten(value)], 0)
      flat = tf.where(tf.math.is_finite(flat), flat, tf.zeros_like(flat))
      flat, _ = basic.clip_by_l2_norm(flat, clip)
      rotated = rotation_lib.rotate(flat, rotation_seed(round_number),
                                    max_block_size)
      scaled = tf.clip_by_value(rotated, -bound, bound) / step
      uniform = tf.random.stateless_uniform(
          [tries, size], seeds.client_seed(rotation_seed(round_number), flat),
          alg=seeds.ALGORITHM)
      levels = tf.clip_by_value(tf.floor(scaled + uniform), -most, most)
      norms = tf.norm(levels * step, axis=1)
      fits = norms <= delta
      first = tf.argmax(tf.cast(fits, tf.int32))
      chosen = tf.where(tf.reduce_any(fits) & (weight > 0), levels[first],
                        tf.zeros([size]))
      return tf.cast(chosen, tf.int32)

    encode = tf_computation(encode_at_client, value_spec, weight_type,
                            state_spec)

    def finish_at_server(round_number, level_sum):
      level_sum = tf.cast(level_sum, tf.int64)
      signed = tf.where(level_sum >= modulus // 2, level_sum - modulus,
                        level_sum)
      noise_round = seeds.fold_in(seeds.initial_seed(noise_seed), round_number)
      noisy = clipping.add_gaussian_noise(
          tf.cast(signed, tf.float32) * step, noise_multiplier * delta,
          noise_round)
      flat = rotation_lib.unrotate(tf.cast(noisy, tf.float32),
                                   rotation_seed(round_number), max_block_size)
      parts = tf.split(flat / float(expected_clients), sizes)
      return round_number + 1, tf.nest.pack_sequence_as(value_spec, [
          tf.cast(tf.reshape(part, spec.shape), spec.dtype)
          for part, spec in zip(parts, leaves)])

    finish = tf_computation(finish_at_server, state_spec,
                            tf.TensorSpec([size], tf.int32))

    init_fn = aggregation_process.initialize_at_server(initialize)

    @federated_computation(ft.server(state_spec), ft.clients(value_spec),
                           ft.clients(weight_type))
    def next_fn(state, value, weight):
      levels = intrinsics.federated_map(
          encode, (value, weight, intrinsics.federated_broadcast(state)))
      total = intrinsics.federated_secure_modular_sum(levels, modulus)
      new_state, mean = intrinsics.federated_map(finish, (state, total))
      ir.note(mean, privacy_releases.Release('DPSecureMeanFactory', noise_multiplier))
      return measured.MeasuredProcessOutput(new_state, mean,
                                            sum_factory.empty_at_server())

    process = aggregation_process.AggregationProcess(init_fn, next_fn)
    # What a round does, for accounting.
    process.noise_multiplier, process.clip = noise_multiplier, clip
    process.sensitivity = delta
    process.description = (
        f'DP through secure aggregation: whole update to L2 clip {clip:g}, '
        f'Hadamard-rotated {bits}-bit levels (conditional stochastic rounding, '
        f'sensitivity {delta:.4g}), Gaussian noise z={noise_multiplier:g} once '
        f'on the decoded sum, unweighted mean over {expected_clients:g} '
        'expected clients')
    process.encoders = measured_process.treatments(value_spec, bits,
                                                   process.description)
    return process


def build_dp_secure_mean_process(value_spec, noise_multiplier, clip,
                                 expected_clients, bits=8, range_stddevs=4.0,
                                 tries=4, seed=None, max_block_size=2**14):
  """`DPSecureMeanFactory(...)`'s mean of values like `value_spec`, as the
  older building block of `build_federated_averaging_process`: `next(state,
  value, weight) -> (state, mean)`, with the factory process's
  `noise_multiplier`, `clip` and `sensitivity`."""
  who = 'build_dp_secure_mean_process'
  value_spec = specs.check_value_spec(value_spec, who)
  _check(noise_multiplier, clip, expected_clients, bits, tries, who)
  return mean_lib.older_block(
      DPSecureMeanFactory(noise_multiplier, clip, expected_clients, bits,
                          range_stddevs, tries, seed, max_block_size),
      value_spec, 'dp_secure_mean')
