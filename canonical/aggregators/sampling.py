"""A uniform sample of the clients' values at the server: TensorFlow
Federated's `UnweightedReservoirSamplingFactory` and `federated_sample`.

Both are one `federated_aggregate` whose accumulator is a reservoir: the
values kept so far, each with a random 64-bit priority, sorted by priority
(largest first), at most `sample_size` of them. `accumulate` adds a client
and keeps the top `sample_size`; `merge` is the same on the union of two
reservoirs. A client's priority is a stateless draw seeded by a secret of
the process (drawn at `create()`, or the `seed` given) folded with a hash
of the client's whole value, so the pieces are pure and the sample does not
depend on the order in which clients are accumulated or reservoirs merged:
every runtime (the reference executor, the local loop, Beam with any
partitioning) picks the same clients, in the same order. Every client is
equally likely to be kept (its priority is uniform and independent of the
others' unless two clients send the very same value, which then tie and are
interchangeable).

Differences from TFF 0.87, whose priorities come from a timestamp and a
chain of draws in accumulation order: the sample is ordered by priority
(TFF's keeps accumulation order while the reservoir is not full), and a
round with the very same client values draws the same sample again (the
state is `()`, as TFF's, so nothing else can vary per round).
"""

import collections
import secrets

import tensorflow as tf

from canonical.aggregators import factory
from canonical.aggregators import sum_factory
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import ir
from canonical.core import naming
from canonical.core import specs
from canonical.core import types as ft
from canonical import errors
from canonical.templates import aggregation_process
from canonical.templates import measured
from encoders.core import seeds

KEY_SPEC = tf.TensorSpec([None], tf.int64)
SEED_SPEC = tf.TensorSpec([2], tf.int64)


def new_secret():
  """A seed for a process's priorities: 63 random bits."""
  return secrets.randbits(63)


def _content_hash(value):
  """An int64 hash of every byte of every tensor of `value`."""
  parts = [tf.io.serialize_tensor(x) for x in tf.nest.flatten(value)]
  return tf.strings.to_hash_bucket_fast(
      tf.strings.reduce_join(tf.stack(parts)), 2**63 - 1)


def priority(seed, value):
  """The client's priority: uniform over int64, from `seed` and its value."""
  client_seed = seeds.fold_in(seed, _content_hash(value))
  return tf.random.stateless_uniform([], seed=client_seed, minval=None,
                                     maxval=None, dtype=tf.int64,
                                     alg=seeds.ALGORITHM)


class Reservoir:
  """The pieces of a reservoir of at most `size` values like `value_type`,
  priorities drawn from `seed` ([2] ints)."""

  def __init__(self, value_type, size, seed):
    self.value_type = value_type
    self.size = size
    self.seed = tuple(int(s) for s in seed)
    samples_spec = tf.nest.map_structure(
        lambda s: tf.TensorSpec([None] + s.shape.as_list(), s.dtype),
        value_type)
    self.spec = (KEY_SPEC, samples_spec)
    self.samples_spec = samples_spec

  def _seed(self):
    return tf.constant(self.seed, tf.int64)

  def _top(self, keys, samples):
    count = tf.minimum(tf.size(keys), self.size)
    keys, order = tf.math.top_k(keys, k=count, sorted=True)
    return keys, tf.nest.map_structure(lambda s: tf.gather(s, order),
                                       samples)

  def zero(self):
    return (tf.zeros([0], tf.int64), tf.nest.map_structure(
        lambda s: tf.zeros([0] + s.shape.as_list(), s.dtype),
        self.value_type))

  def accumulate(self, reservoir, value):
    keys, samples = reservoir
    key = priority(self._seed(), value)
    return self._top(
        tf.concat([keys, [key]], 0),
        tf.nest.map_structure(lambda s, v: tf.concat([s, v[None]], 0),
                              samples, value))

  def merge(self, a, b):
    return self._top(
        tf.concat([a[0], b[0]], 0),
        tf.nest.map_structure(lambda x, y: tf.concat([x, y], 0), a[1], b[1]))

  def with_metadata(self, reservoir):
    """TFF's sampling metadata: the seed, the priorities' top 32 bits (an
    int32 each, in the same order) and the samples."""
    keys, samples = reservoir
    return collections.OrderedDict(
        random_seed=self._seed(),
        random_values=tf.cast(tf.bitwise.right_shift(keys, 32), tf.int32),
        samples=samples)

  def aggregate(self, value, report):
    """`federated_aggregate` of the CLIENTS `value` into the reservoir;
    `report(reservoir)` makes the result."""
    return intrinsics.federated_aggregate(
        value, zero=specs.tf_computation(self.zero),
        accumulate=specs.tf_computation(self.accumulate, self.spec,
                                        self.value_type),
        merge=specs.tf_computation(self.merge, self.spec, self.spec),
        report=specs.tf_computation(report, self.spec))


def _non_finite_leaves(value):
  """Per tensor, 1 (int64) if it holds a NaN or an infinity, else 0."""
  def flag(x):
    if not x.dtype.is_floating:
      return tf.constant(0, tf.int64)
    return tf.cast(tf.logical_not(tf.reduce_all(tf.math.is_finite(x))),
                   tf.int64)
  return tf.nest.map_structure(flag, value)


def _check_size(size, where, what):
  if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
    raise errors.InvalidValueError(
        f'{where}: {what} must be a positive int, got {size!r}.')
  return size


class UnweightedReservoirSamplingFactory(
    factory.UnweightedAggregationFactory):
  """TFF's `UnweightedReservoirSamplingFactory(sample_size,
  return_sampling_metadata=False)`: the result is up to `sample_size`
  clients' values, stacked on a new first axis; with
  `return_sampling_metadata`, `OrderedDict(random_seed, random_values,
  samples)`. The state is `()`; the measurements count, per tensor of the
  value, the clients whose tensor holds a NaN or an infinity (int64), over
  every client, before sampling. `seed` (ours): the priorities' secret
  (default: drawn at each `create()`)."""

  def __init__(self, sample_size, return_sampling_metadata=False, seed=None):
    where = 'UnweightedReservoirSamplingFactory'
    self._sample_size = _check_size(sample_size, where, 'sample_size')
    if not isinstance(return_sampling_metadata, bool):
      raise errors.InvalidTypeError(
          f'{where}: return_sampling_metadata must be a bool, got '
          f'{return_sampling_metadata!r}.')
    if seed is not None and (isinstance(seed, bool) or
                             not isinstance(seed, int)):
      raise errors.InvalidTypeError(
          f'{where}: seed must be an int or None, got {seed!r}.')
    self._return_sampling_metadata = return_sampling_metadata
    self._seed = seed

  def create(self, value_type):
    where = 'UnweightedReservoirSamplingFactory.create'
    value_type = factory.value_type_of(value_type, where)
    secret = new_secret() if self._seed is None else self._seed
    reservoir = Reservoir(value_type, self._sample_size, (secret, 0))
    report = (reservoir.with_metadata if self._return_sampling_metadata
              else lambda r: r[1])
    non_finite = specs.tf_computation(_non_finite_leaves, value_type)

    @computations.federated_computation()
    def init_fn():
      return sum_factory.empty_at_server()

    @computations.federated_computation(init_fn.type_signature.result,
                                        ft.clients(value_type))
    def next_fn(unused_state, value):  # TFF's name for it.
      counts = intrinsics.federated_sum(
          intrinsics.federated_map(non_finite, value))
      sample = reservoir.aggregate(value, report)
      return measured.MeasuredProcessOutput(unused_state, sample, counts)

    return aggregation_process.AggregationProcess(init_fn, next_fn)


def federated_sample(value, max_num_samples=100):
  """Up to `max_num_samples` of the CLIENTS `value`'s members, uniformly
  sampled, at SERVER (stacked on a new first axis). Called while tracing a
  federated computation; the priorities' secret is drawn then, so it is
  fixed in the traced computation (and in a form compiled from it)."""
  where = f'federated_sample at {naming.user_location()}'
  _check_size(max_num_samples, where, 'max_num_samples')
  if not isinstance(value, ir.Value) or value.placement != ft.CLIENTS:
    raise errors.FederatedError(
        f'{where}: value must be a value placed at CLIENTS, got '
        f'{naming.describe_object(value)}.')
  value_type = factory.value_type_of(value.member, where, 'the value')
  reservoir = Reservoir(value_type, max_num_samples, (new_secret(), 0))
  return reservoir.aggregate(value, lambda r: r[1])
