"""TFF 0.87's `FinalizeThenSampleFactory`: each client's metrics finalized
at the client, then a uniform sample of at most `sample_size` clients'
metrics kept at the server, for this round and over all rounds so far.

Composed of `tff.aggregators.UnweightedReservoirSamplingFactory` (with its
sampling metadata): this round's sample is a reservoir of the clients'
finalized metrics; the state is the reservoir over every round, merged
with each round's by keeping the `sample_size` largest random values, as
TFF merges them. The samples hold, per metric, one value per sampled
client (a new first axis), the clients in the reservoir's order (see the
sampling factory for how it differs from TFF's).
"""

import collections

import tensorflow as tf

from canonical import aggregators
from canonical import errors
from canonical.aggregators import factory
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import specs
from canonical.core import types as ft
from canonical.learning.metrics import finalizing
from canonical.templates import aggregation_process
from canonical.templates import measured


def check_sample_size(sample_size, who):
  if isinstance(sample_size, bool) or not isinstance(sample_size, int):
    raise errors.InvalidTypeError(
        f'{who}: sample_size must be an int, got {sample_size!r}.')
  if sample_size <= 0:
    raise errors.InvalidValueError(
        f'{who}: sample_size must be positive, got {sample_size}.')
  return sample_size


def _reservoir_spec(value_type):
  """TFF's reservoir: the seed, a random value per sample, the samples."""
  return collections.OrderedDict(
      random_seed=tf.TensorSpec([2], tf.int64),
      random_values=tf.TensorSpec([None], tf.int32),
      samples=tf.nest.map_structure(
          lambda s: tf.TensorSpec([None] + s.shape.as_list(), s.dtype),
          value_type))


def _empty_reservoir(value_type):
  return collections.OrderedDict(
      random_seed=tf.zeros([2], tf.int64),
      random_values=tf.zeros([0], tf.int32),
      samples=tf.nest.map_structure(
          lambda s: tf.zeros([0] + s.shape.as_list(), s.dtype), value_type))


def _merge(sample_size):
  """Two reservoirs as one: all their samples if they fit, else those of
  the `sample_size` largest random values, in their order."""

  def merge(a, b):
    values = tf.concat([a['random_values'], b['random_values']], 0)
    samples = tf.nest.map_structure(lambda x, y: tf.concat([x, y], 0),
                                    a['samples'], b['samples'])
    count = tf.minimum(tf.size(values), sample_size)
    _, top = tf.math.top_k(values, k=count, sorted=False)
    keep = tf.scatter_nd(top[:, None], tf.ones_like(top, tf.bool),
                         tf.shape(values))
    return collections.OrderedDict(
        random_seed=a['random_seed'],
        random_values=tf.boolean_mask(values, keep),
        samples=tf.nest.map_structure(lambda s: tf.boolean_mask(s, keep),
                                      samples))

  return merge


class FinalizeThenSampleFactory(factory.UnweightedAggregationFactory):
  """Finalizes each client's metrics, then samples at most `sample_size`
  clients: the result is `(current_round_samples, total_rounds_samples)`,
  the state the reservoir over all rounds, the measurements the sampling's
  (per metric, the clients whose value is not finite, before sampling)."""

  def __init__(self, sample_size=100):
    self._sample_size = check_sample_size(sample_size,
                                          'FinalizeThenSampleFactory')

  def create(self, metric_finalizers, local_unfinalized_metrics_type):
    who = 'FinalizeThenSampleFactory.create'
    finalizing.check_finalizers(metric_finalizers, who)
    member = specs.plain(ft.to_member(local_unfinalized_metrics_type, who))
    finalizing.check_matches(metric_finalizers, member, who)
    finalize_tf = specs.tf_computation(
        lambda u: finalizing.finalize(metric_finalizers, u), member)
    finalized_type = specs.plain(finalize_tf.result_spec)
    sampling = aggregators.UnweightedReservoirSamplingFactory(
        self._sample_size, return_sampling_metadata=True).create(
            finalized_type)
    reservoir_spec = _reservoir_spec(finalized_type)
    empty_tf = specs.tf_computation(lambda: _empty_reservoir(finalized_type))
    merge_tf = specs.tf_computation(_merge(self._sample_size),
                                    reservoir_spec, reservoir_spec)

    @computations.federated_computation()
    def init_fn():
      return intrinsics.federated_eval(empty_tf, ft.SERVER)

    @computations.federated_computation(ft.server(reservoir_spec),
                                        ft.clients(member))
    def next_fn(state, unfinalized_metrics):
      finalized = intrinsics.federated_map(finalize_tf, unfinalized_metrics)
      output = sampling.next(sampling.initialize(), finalized)
      total = intrinsics.federated_map(merge_tf, (state, output.result))
      return measured.MeasuredProcessOutput(
          state=total,
          result=intrinsics.federated_zip(
              (output.result['samples'], total['samples'])),
          measurements=output.measurements)

    return aggregation_process.AggregationProcess(init_fn, next_fn)
