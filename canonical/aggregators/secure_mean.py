"""A mean through secure aggregation, compressed: integers that add modulo 2**b.

Each client rotates every tensor by a randomized Hadamard transform (the same
signs at every client, drawn from the round), clips it to [-clip, clip] and
rounds it stochastically (unbiased) to integers in [0, 2**bits - 1]. Those
integers go through `federated_secure_sum_bitwidth`: the aggregation tier only
adds masked integers, and the server decodes the sum once, since rotation and
the affine quantization commute with summing:

    mean = (sum of levels * step - clip * clients) / clients,  then unrotate.

Each client counts once (secure aggregation hides per-client weights too, so
the mean is unweighted); a client whose weight is 0 (FedAvg drops a non-finite
update that way) sends zeros and is not counted. The range adapts through the
server state: clients also securely sum how many of their coordinates the
clip cut, and the server widens the range when more than `clipped_target` of
all coordinates were cut, narrows it otherwise.
"""

import math

import tensorflow as tf

from canonical.aggregators import factory
from canonical.aggregators import mean as mean_lib
from canonical.aggregators import sum_factory
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import specs
from canonical.core import types as ft
from canonical import errors
from canonical.templates import aggregation_process
from canonical.templates import measured
from canonical.templates import measured_process
from encoders.core import seeds
from encoders.stages import rotation as rotation_lib

tf_computation = specs.tf_computation
federated_computation = computations.federated_computation
WEIGHT_SPEC = mean_lib.WEIGHT_SPEC  # A name this module had, kept.

# How fast the range follows the clipped fraction: exp(rate * (f - target)).
_ADAPT_RATE = 10.0


def _check(bits, clip, clipped_target, who):
  if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= 16:
    raise errors.InvalidValueError(
        f'{who}: bits must be an int in [1, 16], got {bits!r}.')
  if not (isinstance(clip, (int, float)) and math.isfinite(clip) and clip > 0):
    raise errors.InvalidValueError(
        f'{who}: clip must be a positive number, got {clip!r}.')
  if not (isinstance(clipped_target, (int, float)) and
          0 < clipped_target < 1):
    raise errors.InvalidValueError(
        f'{who}: clipped_target must be in (0, 1), got '
        f'{clipped_target!r}.')


class SecureMeanFactory(factory.WeightedAggregationFactory):
  """An unweighted mean of float values through secure sums of `bits`-bit
  integers (see the module docstring); the weight only says whether a client
  counts (a weight of 0: FedAvg dropped its update).

  Args:
    bits: levels per coordinate, 2**bits of them in [-clip, clip].
    clip: the initial range; it then adapts round by round.
    rotate: rotate each tensor first (spreads a few large coordinates over
      all of them, so the clip cuts less).
    clipped_target: the fraction of coordinates the range aims to cut.
    seed: the rotation's seed (with the round number).
    max_block_size: the rotation's largest Hadamard block.

  The process's state is (round, clip); its measurements are empty.
  """

  def __init__(self, bits=8, clip=0.1, rotate=True, clipped_target=0.01,
               seed=0, max_block_size=2**14):
    _check(bits, clip, clipped_target, 'SecureMeanFactory')
    self._bits, self._clip, self._rotate = bits, clip, rotate
    self._clipped_target, self._seed = clipped_target, seed
    self._max_block_size = max_block_size

  def create(self, value_type, weight_type):
    where = 'SecureMeanFactory.create'
    value_spec = factory.float_value_type(value_type, where)
    weight_type = factory.value_type_of(weight_type, where, 'weight_type')
    bits, clip, rotate = self._bits, self._clip, self._rotate
    clipped_target, seed = self._clipped_target, self._seed
    max_block_size = self._max_block_size
    leaves = tf.nest.flatten(value_spec)
    levels = float(2**bits - 1)
    sizes = [spec.shape.num_elements() for spec in leaves]
    total_size = sum(sizes)

    initialize = tf_computation(lambda: (tf.constant(0, tf.int64),
                                         tf.constant(clip, tf.float32)))
    state_spec = specs.plain(initialize.result_spec)

    def rotation_seed(round_number, index):
      """The same at every client of a round; new each round and tensor."""
      return seeds.fold_in(seeds.fold_in(seeds.initial_seed(seed),
                                         round_number), index)

    def encode_at_client(value, weight, state):
      round_number, clip_now = state
      counted = weight > 0
      quantized, clipped = [], tf.constant(0, tf.int32)
      for index, x in enumerate(tf.nest.flatten(value)):
        flat = tf.reshape(tf.cast(x, tf.float32), [-1])
        flat = tf.where(tf.math.is_finite(flat), flat, tf.zeros_like(flat))
        if rotate:
          flat = rotation_lib.rotate(flat, rotation_seed(round_number, index),
                                     max_block_size)
        clipped += tf.reduce_sum(tf.cast(tf.abs(flat) > clip_now, tf.int32))
        scaled = (tf.clip_by_value(flat, -clip_now, clip_now) + clip_now) * (
            levels / (2.0 * clip_now))
        noise = tf.random.stateless_uniform(
            tf.shape(scaled), seeds.client_seed(
                rotation_seed(round_number, index), flat), alg=seeds.ALGORITHM)
        level = tf.clip_by_value(tf.floor(scaled + noise), 0.0, levels)
        quantized.append(tf.where(counted, tf.cast(level, tf.int32),
                                  tf.zeros_like(level, tf.int32)))
      one = tf.cast(counted, tf.int32)
      return tuple(quantized), one, clipped * one

    quantized_spec = tuple(tf.TensorSpec([n], tf.int32) for n in sizes)
    encode = tf_computation(encode_at_client, value_spec, weight_type,
                            state_spec)

    def finish_at_server(state, level_sums, clients, clipped):
      round_number, clip_now = state
      count = tf.cast(clients, tf.float32)
      step = 2.0 * clip_now / levels
      means = []
      for index, (spec, total) in enumerate(zip(leaves, level_sums)):
        flat = tf.math.divide_no_nan(
            tf.cast(total, tf.float32) * step - clip_now * count, count)
        if rotate:
          flat = rotation_lib.unrotate(flat, rotation_seed(round_number, index),
                                       max_block_size)
        means.append(tf.cast(tf.reshape(flat, spec.shape), spec.dtype))
      fraction = tf.math.divide_no_nan(tf.cast(clipped, tf.float32),
                                       count * float(total_size))
      new_clip = tf.where(clients > 0, clip_now * tf.exp(
          _ADAPT_RATE * (fraction - clipped_target)), clip_now)
      return ((round_number + 1, new_clip),
              tf.nest.pack_sequence_as(value_spec, means))

    finish = tf_computation(finish_at_server, state_spec, quantized_spec,
                            tf.TensorSpec([], tf.int32),
                            tf.TensorSpec([], tf.int32))

    init_fn = aggregation_process.initialize_at_server(initialize)

    @federated_computation(ft.server(state_spec), ft.clients(value_spec),
                           ft.clients(weight_type))
    def next_fn(state, value, weight):
      levels_at_clients, one, clipped = intrinsics.federated_map(
          encode, (value, weight, intrinsics.federated_broadcast(state)))
      level_sums = intrinsics.federated_secure_sum_bitwidth(levels_at_clients,
                                                            bits)
      clients = intrinsics.federated_secure_sum(one, 1)
      clipped_sum = intrinsics.federated_secure_sum(clipped, total_size)
      new_state, mean = intrinsics.federated_map(
          finish, (state, level_sums, clients, clipped_sum))
      return measured.MeasuredProcessOutput(new_state, mean,
                                            sum_factory.empty_at_server())

    process = aggregation_process.AggregationProcess(init_fn, next_fn)
    rotation = 'Hadamard-rotated, ' if rotate else ''
    process.encoders = measured_process.treatments(
        value_spec, bits, f'secure aggregation of {rotation}{bits}-bit '
        'stochastic levels in an adaptive range '
        '(federated_secure_sum_bitwidth)')
    return process


def build_secure_mean_process(value_spec, bits=8, clip=0.1, rotate=True,
                              clipped_target=0.01, seed=0,
                              max_block_size=2**14):
  """`SecureMeanFactory(...)`'s mean of values like `value_spec`, as the
  older building block of `build_federated_averaging_process`:
  `next(state@SERVER, value@CLIENTS, weight@CLIENTS) -> (state@SERVER,
  mean@SERVER)`; the state is (round, clip)."""
  who = 'build_secure_mean_process'
  value_spec = specs.check_value_spec(value_spec, who)
  return mean_lib.older_block(
      SecureMeanFactory(bits, clip, rotate, clipped_target, seed,
                        max_block_size), value_spec, 'secure_mean')
