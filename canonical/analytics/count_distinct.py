"""TFF 0.87's `tff.analytics.count_distinct`: how many distinct strings the
clients hold, by federated HyperLogLog
(https://en.wikipedia.org/wiki/HyperLogLog).

Each string hashes to 32 bits (`tf.strings.to_hash_bucket_fast`); its top 5
bits pick one of 32 registers, which keeps the largest rank (27 minus the
floor of log2 of the other 27 bits) seen. The server takes the registers'
elementwise maximum over clients (`federated_max`, or securely: each
register one-hot encoded and securely summed) and estimates the count as
`0.697 * 32**2 / sum(2**-register)`, TFF's numbers exactly.
"""

import tensorflow as tf

from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import types as ft

# Plain TensorFlow (no Python control flow over tensors): not for AutoGraph.
_plain = tf.autograph.experimental.do_not_convert

HLL_SKETCH_SIZE = 32  # Registers; strings hash to [0, 2**HLL_SKETCH_SIZE).
HLL_BIT_INDEX_HEAD = 5  # log2(HLL_SKETCH_SIZE): the bits picking a register.
HLL_BIT_INDEX_TAIL = HLL_SKETCH_SIZE - HLL_BIT_INDEX_HEAD
HLL_ALPHA = 0.697

SKETCH_SPEC = tf.TensorSpec([HLL_SKETCH_SIZE], tf.int64)


def _floor_log2(u):
  """floor(log2(u)) of int64 `u` >= 0, exactly; -1 for 0."""
  u = tf.cast(u, tf.int64)
  for shift in (1, 2, 4, 8, 16, 32):  # Every bit below the highest set.
    u = tf.bitwise.bitwise_or(u, tf.bitwise.right_shift(u, shift))
  return tf.cast(tf.raw_ops.PopulationCount(x=u), tf.int64) - 1


def _add_hash(sketch, hash_value):
  register = hash_value // 2**HLL_BIT_INDEX_TAIL
  rest = tf.bitwise.bitwise_and(hash_value, 2**HLL_BIT_INDEX_TAIL - 1)
  rank = HLL_BIT_INDEX_TAIL - _floor_log2(rest)
  one_hot = tf.one_hot(tf.cast(register, tf.int32), HLL_SKETCH_SIZE,
                       dtype=tf.int64)
  return tf.maximum(one_hot * rank, sketch)


def build_client_hyperloglog_computation() -> computations.TFComputation:
  """The tf_computation `(int64* -> int64[32])`: a client's HyperLogLog
  sketch of its dataset of 32-bit hashes."""

  @computations.tf_computation(tf.data.DatasetSpec(tf.TensorSpec([],
                                                                 tf.int64)))
  @_plain
  def client_hyperloglog(client_data):
    return client_data.reduce(tf.zeros([HLL_SKETCH_SIZE], tf.int64),
                              _add_hash)

  return client_hyperloglog


def build_federated_secure_max_computation(
) -> computations.FederatedComputation:
  """The federated computation `(int64[32]@CLIENTS -> int64[32]@SERVER)`:
  the registers' maximum over clients, by a secure sum of each register
  one-hot encoded over [0, 27] (a register of 28, an empty client's, counts
  as 0, as in TFF)."""
  depth = HLL_BIT_INDEX_TAIL + 1

  @computations.tf_computation(SKETCH_SPEC)
  @_plain
  def one_hot_sketch(sketch):
    return tf.cast(tf.one_hot(tf.cast(sketch, tf.int32), depth,
                              dtype=tf.int64), tf.int32)

  @computations.tf_computation(tf.TensorSpec([HLL_SKETCH_SIZE, depth],
                                             tf.int32))
  @_plain
  def maxes_from_one_hots(x):
    levels = tf.range(depth, dtype=tf.int64)[None, :]
    return tf.reduce_max(tf.cast(x > 0, tf.int64) * levels, axis=1)

  @computations.federated_computation(ft.clients(SKETCH_SPEC))
  def federated_secure_max(sketch):
    one_hots = intrinsics.federated_map(one_hot_sketch, sketch)
    return intrinsics.federated_map(
        maxes_from_one_hots, intrinsics.federated_secure_sum(one_hots, 1))

  return federated_secure_max


def create_federated_hyperloglog_computation(
    *, use_secagg: bool = False) -> computations.FederatedComputation:
  """The federated computation `(str*@CLIENTS -> int64@SERVER)`: the
  estimated number of distinct strings over all clients; with `use_secagg`
  the registers' maximum goes through secure sums."""

  @computations.tf_computation(tf.data.DatasetSpec(tf.TensorSpec([],
                                                                 tf.string)))
  @_plain
  def hash_client_data(client_data):
    return client_data.map(
        lambda item: tf.strings.to_hash_bucket_fast(item, 2**HLL_SKETCH_SIZE))

  @computations.tf_computation(SKETCH_SPEC)
  @_plain
  def estimate_count_from_sketch(sketch):
    z = 1 / tf.reduce_sum(0.5**tf.cast(sketch, tf.float64))
    return tf.cast(HLL_ALPHA * HLL_SKETCH_SIZE**2 * z, tf.int64)

  client_hyperloglog = build_client_hyperloglog_computation()
  secure_max = build_federated_secure_max_computation()

  @computations.federated_computation(
      ft.clients(tf.data.DatasetSpec(tf.TensorSpec([], tf.string))))
  def federated_hyperloglog(client_data):
    sketches = intrinsics.federated_map(
        client_hyperloglog, intrinsics.federated_map(hash_client_data,
                                                     client_data))
    if use_secagg:
      server_sketch = secure_max(sketches)
    else:
      server_sketch = intrinsics.federated_max(sketches)
    return intrinsics.federated_map(estimate_count_from_sketch,
                                    server_sketch)

  return federated_hyperloglog
