"""TFF's `build_hierarchical_histogram_process`: a histogram of the clients'
float records over `[lower_bound, upper_bound)` in `num_bins` bins, as a
tree of sums (`tree`), with differential privacy as asked.

A round, as TFF composes it:

| where   | what                                                         |
| clients | records -> histogram (records out of range dropped) -> at    |
|         | most `max_records_per_user` records (`clipping`) -> the flat |
|         | tree (float32, clipped to the tree's L2 bound, for           |
|         | 'central-gaussian')                                          |
| sum     | `SumFactory`, or with `enable_secure_sum` `SecureSumFactory` |
|         | bounded by `max_records_per_user` ('no-noise',               |
|         | 'central-gaussian'), or a secure sum modulo 2**bits - 1      |
|         | ('distributed-discrete-gaussian', as TFF's symmetric         |
|         | `SecureModularSumFactory(2**(bits - 1))`)                    |
| server  | 'central-gaussian': N(0, (noise_multiplier * bound)**2) on    |
|         | every node; 'distributed-discrete-gaussian': discrete        |
|         | Gaussian noise, the sum of `expected_clients_per_round`      |
|         | draws of scale ceil(noise_multiplier * bound / sqrt(expected |
|         | clients)), what that many TFF clients add; the result and    |
|         | the round's timestamp become the state                       |

Differs from TFF: randomness (sub-sampling, noise) comes from stateless ops
seeded by a secret drawn when the process is built (or `seed`), the state's
timestamp and the data, so a form holds it and a replayed round gives the
same bits (TFF seeds sampling from the clock); and the distributed discrete
Gaussian noise is added at the server, after the secure sum, not by each
client before it, so its privacy holds against everyone but the server (as
for this project's other distributed-DP aggregators).
"""

import math
import secrets
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from canonical.aggregators import secure
from canonical.aggregators import sum_factory
from canonical.analytics.hierarchical_histogram import clipping
from canonical.analytics.hierarchical_histogram import tree
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import types as ft
from canonical import errors
from canonical.privacy import discrete_gaussian
from canonical.templates import iterative_process
from encoders.core import seeds
from encoders.stages import basic
from encoders.stages import clipping as dp_clipping

# Plain TensorFlow (no Python control flow over tensors): not for AutoGraph.
_plain = tf.autograph.experimental.do_not_convert

NO_NOISE = 'no-noise'
CENTRAL_GAUSSIAN = 'central-gaussian'
DISTRIBUTED_DISCRETE_GAUSSIAN = 'distributed-discrete-gaussian'
DP_MECHANISMS = (NO_NOISE, CENTRAL_GAUSSIAN, DISTRIBUTED_DISCRETE_GAUSSIAN)

RECORDS_TYPE = tf.data.DatasetSpec(tf.TensorSpec([], tf.float32))


class ServerOutput(NamedTuple):
  """A round's result, kept as the state: the hierarchical histogram
  (`{'flat_values', 'nested_row_splits'}`, TFF's ragged tensor) and the
  round's time in seconds since the epoch."""
  aggregated_hierarchical_histogram: object
  round_timestamp: object


def _fail(message):
  raise errors.InvalidValueError(
      f'build_hierarchical_histogram_process: {message}')


def _check(lower_bound, upper_bound, num_bins, arity, clip_mechanism,
           max_records_per_user, dp_mechanism, noise_multiplier,
           expected_clients_per_round, bits, enable_secure_sum):
  if upper_bound < lower_bound:
    _fail(f'upper_bound ({upper_bound}) must be at least lower_bound '
          f'({lower_bound}).')
  for name, value, least in (('num_bins', num_bins, 1), ('arity', arity, 2),
                             ('max_records_per_user', max_records_per_user, 1),
                             ('expected_clients_per_round',
                              expected_clients_per_round, 1)):
    if value < least:
      _fail(f'{name} must be at least {least}, got {value}.')
  if clip_mechanism not in clipping.CLIP_MECHANISMS:
    _fail(f'clip_mechanism must be one of {clipping.CLIP_MECHANISMS}, got '
          f'{clip_mechanism!r}.')
  if dp_mechanism not in DP_MECHANISMS:
    _fail(f'dp_mechanism must be one of {DP_MECHANISMS}, got '
          f'{dp_mechanism!r}.')
  if noise_multiplier < 0:
    _fail(f'noise_multiplier must be nonnegative, got {noise_multiplier}.')
  if not 1 <= bits <= 22 or bits < math.log2(expected_clients_per_round):
    _fail(f'bits must be in [1, 22] and at least log2('
          f'expected_clients_per_round), got {bits}.')
  if dp_mechanism == DISTRIBUTED_DISCRETE_GAUSSIAN and not enable_secure_sum:
    _fail(f'dp_mechanism {dp_mechanism!r} needs enable_secure_sum=True.')


def l2_norm_bound(num_bins, arity, clip_mechanism, max_records_per_user):
  """The L2 norm of a client's tree at most (TFF's bound): each of the
  tree's layers sums to at most `max_records_per_user`; with 'distinct'
  records a lower layer's norm is also at most sqrt(records * arity**k)."""
  depth = math.ceil(math.log(num_bins) / math.log(arity)) + 1
  if clip_mechanism == 'sub-sampling':
    return max_records_per_user * math.sqrt(depth)
  square, layer_square = 0.0, max_records_per_user
  for _ in range(depth):
    square += min(max_records_per_user**2, layer_square)
    layer_square *= arity
  return math.sqrt(square)


def _histogram_of(records, lower_bound, upper_bound, num_bins):
  """The int32 histogram of a dataset of float32 records (TFF's bins)."""
  width = (upper_bound - lower_bound) / num_bins

  def add(histogram, record):
    index = tf.cast(tf.math.floor((record - lower_bound) / width), tf.int32)
    inside = (record >= lower_bound) & (record < upper_bound)
    return tf.cond(inside, lambda: tf.tensor_scatter_nd_add(
        histogram, [[index]], [1]), lambda: histogram)

  return records.reduce(tf.zeros([num_bins], tf.int32), add)


class _Mechanism:
  """One DP mechanism's parts: the record's dtype, how it is summed and how
  the server finishes the sum."""

  def __init__(self, dp_mechanism, noise_multiplier, bound,
               max_records_per_user, expected_clients, bits,
               enable_secure_sum):
    self.name = dp_mechanism
    self.dtype = tf.float32 if dp_mechanism == CENTRAL_GAUSSIAN else tf.int32
    self.bound = bound
    self.stddev = noise_multiplier * bound
    self.expected_clients = expected_clients
    self.local_scale = math.ceil(noise_multiplier * bound /
                                 math.sqrt(expected_clients))
    self.modulus = 2**bits - 1  # TFF's 2 * 2**(bits - 1) - 1.
    self.half = 2**(bits - 1)
    self.factory = None
    if dp_mechanism != DISTRIBUTED_DISCRETE_GAUSSIAN:
      if not enable_secure_sum:
        self.factory = sum_factory.SumFactory()
      elif dp_mechanism == NO_NOISE:
        self.factory = secure.SecureSumFactory(max_records_per_user)
      else:
        self.factory = secure.SecureSumFactory(float(max_records_per_user))

  def record(self, flat_tree):
    if self.name != CENTRAL_GAUSSIAN:
      return flat_tree
    return basic.clip_by_l2_norm(flat_tree, self.bound)[0]

  def total(self, records):
    """The SERVER sum of the clients' records (a federated value)."""
    if self.factory is None:
      return intrinsics.federated_secure_modular_sum(records, self.modulus)
    process = self.factory.create(tf.TensorSpec(records.member.shape,
                                                records.member.dtype))
    return process.next(process.initialize(), records).result

  def finish(self, total, seed):
    """The noised sum at the server."""
    seed = seeds.client_seed(seed, total)  # Other sums, other noise.
    if self.name == CENTRAL_GAUSSIAN:
      return dp_clipping.add_gaussian_noise(total, self.stddev, seed)
    if self.name == NO_NOISE:
      return total
    noise = tf.reduce_sum(discrete_gaussian.sample_discrete_gaussian(
        self.local_scale, [self.expected_clients, total.shape[0]], seed,
        tf.int64), axis=0)
    wrapped = tf.math.floormod(tf.cast(total, tf.int64) + noise,
                               self.modulus)
    centred = tf.where(wrapped >= self.half, wrapped - self.modulus, wrapped)
    return tf.cast(centred, total.dtype)


def build_hierarchical_histogram_process(
    lower_bound: float, upper_bound: float, num_bins: int, arity: int = 2,
    clip_mechanism: str = 'sub-sampling', max_records_per_user: int = 10,
    dp_mechanism: str = 'no-noise', noise_multiplier: float = 0.0,
    expected_clients_per_round: int = 10, bits: int = 22,
    enable_secure_sum: bool = True, *, seed: int | None = None
) -> iterative_process.IterativeProcess:
  """TFF's process: `next(state, records)` returns
  `(ServerOutput(hierarchical histogram, timestamp), ())`, the state the
  round's result. `seed` (not in TFF) fixes the randomness, for tests."""
  _check(lower_bound, upper_bound, num_bins, arity, clip_mechanism,
         max_records_per_user, dp_mechanism, noise_multiplier,
         expected_clients_per_round, bits, enable_secure_sum)
  bound = l2_norm_bound(num_bins, arity, clip_mechanism, max_records_per_user)
  mechanism = _Mechanism(dp_mechanism, noise_multiplier, bound,
                         max_records_per_user, expected_clients_per_round,
                         bits, enable_secure_sum)
  secret = secrets.randbits(63) if seed is None else seeds.check_seed(
      'build_hierarchical_histogram_process', seed)
  size = tree.num_nodes(num_bins, arity)
  splits = tree.row_splits(num_bins, arity)
  seed_spec = tf.TensorSpec([2], tf.int64)
  timestamp_spec = tf.TensorSpec([], tf.int64)

  @computations.tf_computation
  @_plain
  def initialize():
    empty_splits = np.zeros_like(splits)
    empty_splits[-1] = size
    return ServerOutput(
        {'flat_values': tf.zeros([size], mechanism.dtype),
         'nested_row_splits': (tf.constant(empty_splits),)},
        tf.constant(0, tf.int64))

  @computations.tf_computation(timestamp_spec)
  @_plain
  def round_seed(timestamp):
    return seeds.fold_in(seeds.initial_seed(secret), timestamp)

  @computations.tf_computation(RECORDS_TYPE, seed_spec)
  @_plain
  def client_work(records, seed):
    histogram = _histogram_of(records, lower_bound, upper_bound, num_bins)
    clipped = clipping.clip(clip_mechanism, histogram, max_records_per_user,
                            seed)
    return mechanism.record(tree.flat_tree(
        tf.cast(clipped, mechanism.dtype), arity))

  @computations.tf_computation(tf.TensorSpec([size], mechanism.dtype),
                               seed_spec)
  @_plain
  def finish(total, seed):
    return tree.as_ragged_struct(mechanism.finish(total, seed), num_bins,
                                 arity)

  @computations.tf_computation
  @_plain
  def now():
    return tf.cast(tf.timestamp(), tf.int64)

  @computations.federated_computation()
  def init_fn():
    return intrinsics.federated_eval(initialize, ft.SERVER)

  @computations.federated_computation(init_fn.type_signature.result,
                                      ft.clients(RECORDS_TYPE))
  def next_fn(state, client_data):
    seed = intrinsics.federated_map(round_seed, state.round_timestamp)
    records = intrinsics.federated_map(
        client_work, (client_data, intrinsics.federated_broadcast(seed)))
    histogram = intrinsics.federated_map(
        finish, (mechanism.total(records), seed))
    output = intrinsics.federated_zip(ServerOutput(
        histogram, intrinsics.federated_eval(now, ft.SERVER)))
    return output, intrinsics.federated_value((), ft.SERVER)

  return iterative_process.IterativeProcess(init_fn, next_fn)
