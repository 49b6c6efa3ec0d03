"""TFF 0.87's `build_fed_kmeans`: federated mini-batch k-means clustering as
a `LearningProcess`.

The "model" is the centroids, `float32[num_clusters, *data_shape]`, drawn
at initialization by `tf.random.stateless_normal` from `random_seed` (as
TFF draws them, so the same seed gives TFF's centroids). Each round the
centroids are broadcast; every client assigns each of its points (an
unbatched dataset) to the nearest centroid and sends, per centroid, the sum
of its points and their count; the server sums those over clients and moves
each centroid to the weighted mean of where it was (weighted by every point
it has had so far, counted in the finalizer's state from a pseudo-count of
1) and its new points. A centroid no point chose this round stays put.
"""

import collections
import numbers

import numpy as np
import tensorflow as tf

from canonical import aggregators
from canonical import errors
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import naming
from canonical.core import specs
from canonical.core import types as ft
from canonical.learning import templates
from canonical.templates import measured

_POINT_DTYPE = tf.float32
_WEIGHT_DTYPE = tf.float32
_SEED_SCALE = 100000.0  # TFF's seed without one: the time, in these units.


def build_fed_kmeans(num_clusters, data_shape, random_seed=None,
                     distributor=None, sum_aggregator=None):
  """K-means of `num_clusters` centroids over client points of
  `data_shape`; `random_seed` a pair of ints (default: from the clock, as
  TFF's); `distributor` a `DistributionProcess` of the centroids (default:
  the broadcast); `sum_aggregator` an `UnweightedAggregationFactory`
  summing the clients' `(sums, counts)` (default `SumFactory()`)."""
  who = 'build_fed_kmeans'
  num_clusters, data_shape = _check_shape(who, num_clusters, data_shape)
  seed = _seed(who, random_seed)
  centroids_shape = (num_clusters,) + data_shape
  centroids_type = tf.TensorSpec(centroids_shape, _POINT_DTYPE)
  counts_type = tf.TensorSpec((num_clusters,), _WEIGHT_DTYPE)
  data_type = tf.data.DatasetSpec(tf.TensorSpec(data_shape, _POINT_DTYPE))

  initial_centroids = specs.tf_computation(
      lambda: tf.random.stateless_normal(centroids_shape, seed,
                                         dtype=_POINT_DTYPE))
  if distributor is None:
    distributor = templates.build_broadcast_process(centroids_type)
  elif not isinstance(distributor, templates.DistributionProcess):
    raise errors.InvalidTypeError(
        f'{who}: distributor must be a tff.learning.templates.'
        f'DistributionProcess, got {naming.describe_object(distributor)}.')
  if sum_aggregator is None:
    sum_aggregator = aggregators.SumFactory()
  if not isinstance(sum_aggregator, aggregators.UnweightedAggregationFactory):
    raise errors.InvalidTypeError(
        f'{who}: sum_aggregator must be a tff.aggregators.'
        'UnweightedAggregationFactory (e.g. SumFactory()), got '
        f'{type(sum_aggregator).__name__}.')
  aggregator = aggregators.as_weighted_aggregator(sum_aggregator).create(
      (centroids_type, counts_type), ())
  return templates.compose_learning_process(
      initial_centroids, distributor,
      _client_work(centroids_type, counts_type, data_type), aggregator,
      _finalizer(centroids_type, counts_type))


def _check_shape(who, num_clusters, data_shape):
  if isinstance(num_clusters, bool) or not isinstance(
      num_clusters, numbers.Integral) or num_clusters < 1:
    raise errors.InvalidValueError(
        f'{who}: num_clusters must be a positive int, got {num_clusters!r}.')
  if not isinstance(data_shape, (tuple, list)) or not all(
      isinstance(d, numbers.Integral) and not isinstance(d, bool) and d > 0
      for d in data_shape):
    raise errors.InvalidValueError(
        f'{who}: data_shape must be a tuple of positive ints (the shape of '
        f'one unbatched point), got {data_shape!r}.')
  return int(num_clusters), tuple(int(d) for d in data_shape)


def _seed(who, random_seed):
  """The pair seeding the initial centroids; TFF's clock-made one if none
  is given (fixed once the process is built)."""
  if not random_seed:
    return (int(tf.cast(tf.timestamp() * _SEED_SCALE, tf.int64).numpy()), 0)
  if not isinstance(random_seed, (tuple, list)) or len(random_seed) != 2 or (
      not all(isinstance(s, (numbers.Integral, np.integer))
              for s in random_seed)):
    raise errors.InvalidValueError(
        f'{who}: random_seed must be a pair of ints, got {random_seed!r}.')
  return tuple(int(s) for s in random_seed)


def _nearest(centroids, point):
  """The index of the centroid nearest `point` (the first on a tie)."""
  shifted = centroids - point
  axes = tf.range(1, tf.rank(centroids))
  return tf.math.argmin(tf.reduce_sum(shifted * shifted, axis=axes), axis=0,
                        output_type=tf.int32)


def _assign(centroids, dataset):
  """Per centroid, the sum of the points nearest it and their count, and
  the number of points."""
  num_clusters = centroids.shape[0]

  def add_point(state, point):
    sums, counts, num_examples = state
    index = [[_nearest(centroids, point)]]
    sums = tf.tensor_scatter_nd_add(sums, index, point[tf.newaxis])
    counts = tf.tensor_scatter_nd_add(counts, index,
                                      tf.ones([1], _WEIGHT_DTYPE))
    return sums, counts, num_examples + 1.0

  return dataset.reduce(
      (tf.zeros_like(centroids), tf.zeros([num_clusters], _WEIGHT_DTYPE),
       tf.constant(0.0, _WEIGHT_DTYPE)), add_point)


def _client_work(centroids_type, counts_type, data_type):
  """TFF's k-means client work: no state; each client's `ClientResult` is
  `((sums, counts), ())`; the measurements are the points seen."""
  del counts_type

  def assign(centroids, dataset):
    sums, counts, num_examples = _assign(centroids, dataset)
    return (templates.ClientResult((sums, counts), ()),
            collections.OrderedDict(num_examples=num_examples))

  assign_tf = specs.tf_computation(assign, centroids_type, data_type)

  @computations.federated_computation()
  def init_fn():
    return intrinsics.federated_value((), ft.SERVER)

  @computations.federated_computation(
      ft.server(()), ft.clients(centroids_type), ft.clients(data_type))
  def next_fn(state, centroids, client_data):
    assigned = intrinsics.federated_map(assign_tf, (centroids, client_data))
    return measured.MeasuredProcessOutput(
        state, assigned[0], intrinsics.federated_sum(assigned[1]))

  return templates.ClientWorkProcess(init_fn, next_fn)


def _move(centroids, counts, new_sums, new_counts):
  """The centroids moved to the weighted mean of where they were (weighted
  by `counts`) and their new points; a centroid with none stays."""
  total = counts + new_counts
  old_scale = tf.math.divide_no_nan(counts, total)
  chosen = tf.cast(new_counts > 0, _POINT_DTYPE)
  new_scale = tf.math.divide_no_nan(chosen, total)
  scale_shape = tf.concat(
      [[centroids.shape[0]], tf.ones([tf.rank(centroids) - 1], tf.int32)], 0)
  return (tf.reshape(old_scale, scale_shape) * centroids +
          tf.reshape(new_scale, scale_shape) * new_sums), total


def _finalizer(centroids_type, counts_type):
  """TFF's k-means finalizer: its state is how many points each centroid
  has had (from 1 each); no measurements."""
  num_clusters = counts_type.shape[0]
  initial_counts = specs.tf_computation(
      lambda: tf.ones([num_clusters], _WEIGHT_DTYPE))
  move_tf = specs.tf_computation(_move, centroids_type, counts_type,
                                 centroids_type, counts_type)

  @computations.federated_computation()
  def init_fn():
    return intrinsics.federated_eval(initial_counts, ft.SERVER)

  @computations.federated_computation(
      ft.server(counts_type), ft.server(centroids_type),
      ft.server((centroids_type, counts_type)))
  def next_fn(state, centroids, summed):
    moved = intrinsics.federated_map(move_tf,
                                     (centroids, state, summed[0], summed[1]))
    return measured.MeasuredProcessOutput(
        moved[1], moved[0], intrinsics.federated_value((), ft.SERVER))

  return templates.FinalizerProcess(init_fn, next_fn)
