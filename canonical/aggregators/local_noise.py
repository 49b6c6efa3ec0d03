"""The local noise step of `DistributedDpSumFactory`: each client checks its
rounded integer value against the norm bounds and adds its own Skellam or
discrete Gaussian noise before the secure sum, so no sum without noise ever
exists. Kept apart from the factory because it is the one step that makes
the sum private, and the step a reviewer of the DP guarantee reads first.
Its seeds are the form's secret, the round and a hash of the client's value
(pieces are pure): secret from the aggregators and other clients, not from a
server that holds the form (`distributed_dp`'s docstring).
"""

import collections

import tensorflow as tf

from canonical.aggregators import discretization
from canonical.aggregators import factory
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import specs
from canonical.core import types as ft
from canonical.privacy import discrete_gaussian
from canonical.templates import aggregation_process
from canonical.templates import measured
from encoders.core import seeds

ROUND_SPEC = tf.TensorSpec([], tf.int64)
# Errors name the factory users build, not this step.
_WHERE = 'DistributedDpSumFactory'


def _skellam(shape, stddev, seed):
  """Skellam draws of stddev `stddev`: Poisson(s**2/2) - Poisson(s**2/2)."""
  lam = 0.5 * tf.square(tf.cast(stddev, tf.float64))
  pair = tf.random.stateless_poisson(tf.concat([shape, [2]], 0), seed,
                                     tf.stack([lam, lam]), dtype=tf.int64)
  return pair[..., 0] - pair[..., 1]


def _dgauss(shape, stddev, seed):
  """Discrete Gaussian draws of scale ceil(stddev) (an integer, as TFF's
  sampler takes)."""
  return discrete_gaussian.sample_discrete_gaussian(
      tf.math.ceil(stddev), shape, seed, dtype=tf.int64)


class LocalNoiseFactory(factory.UnweightedAggregationFactory):
  """What TFF's `DifferentiallyPrivateFactory` does with tensorflow_privacy's
  `DistributedSkellamSumQuery` / `DistributedDiscreteGaussianSumQuery`:
  each client checks its int32 record against the norm bounds (a record
  above them fails the client) and adds its own noise; the inner factory
  sums; the server adds nothing. State `OrderedDict(query_state=
  OrderedDict([l1_norm_bound,] l2_norm_bound, local_stddev), agg_state,
  noise_round)`; measurements `OrderedDict(dp_query_metrics=<>, dp=...)`."""

  def __init__(self, mechanism, l1_norm_bound, l2_norm_bound, local_stddev,
               inner_agg_factory, secret):
    self._mechanism = mechanism
    self._bounds = (l1_norm_bound, l2_norm_bound, local_stddev)
    self._inner = inner_agg_factory
    self._secret = secret

  def initial_query_state(self):
    l1, l2, stddev = self._bounds
    state = collections.OrderedDict()
    if self._mechanism == 'distributed_skellam':
      state['l1_norm_bound'] = tf.constant(l1, tf.int32)
    state['l2_norm_bound'] = tf.constant(l2, tf.float32)
    state['local_stddev'] = tf.constant(stddev, tf.float32)
    return state

  def create(self, value_type):
    value_type = factory.value_type_of(value_type, f'{_WHERE} (noise)')
    secret, mechanism = self._secret, self._mechanism
    sample = _skellam if mechanism == 'distributed_skellam' else _dgauss
    initial = specs.tf_computation(self.initial_query_state)
    query_spec = specs.plain(initial.result_spec)

    def noised(query, value, round_number):
      flat = tf.nest.flatten(value)
      checks = [tf.debugging.assert_less_equal(
          tf.linalg.global_norm([tf.cast(x, tf.float32) for x in flat]),
          query['l2_norm_bound'],
          message=f'{_WHERE}: a client\'s rounded value exceeds the L2 '
          'bound scaled_inflated_l2')]
      if 'l1_norm_bound' in query:
        checks.append(tf.debugging.assert_less_equal(
            tf.add_n([tf.reduce_sum(tf.abs(tf.cast(x, tf.int64)))
                      for x in flat]),
            tf.cast(query['l1_norm_bound'], tf.int64),
            message=f'{_WHERE}: a client\'s rounded value exceeds the L1 '
            'bound'))
      seed = discretization.client_seed(secret, round_number, value)

      def add_noise(x, index):  # Both samplers draw zeros at stddev 0.
        noise = sample(tf.shape(x, out_type=tf.int64), query['local_stddev'],
                       seeds.fold_in(seed, index))
        return x + tf.cast(noise, x.dtype)

      with tf.control_dependencies(checks):
        return tf.nest.pack_sequence_as(
            value, [add_noise(x, i) for i, x in enumerate(flat)])

    client_noise = specs.tf_computation(noised, query_spec, value_type,
                                        ROUND_SPEC)
    inner = self._inner.create(specs.plain(client_noise.result_spec))
    start = specs.tf_computation(lambda: tf.constant(0, tf.int64))
    add_one = specs.tf_computation(lambda n: n + 1, ROUND_SPEC)
    no_metrics = specs.tf_computation(collections.OrderedDict)

    @computations.federated_computation()
    def init_fn():
      return intrinsics.federated_zip(collections.OrderedDict(
          query_state=intrinsics.federated_eval(initial, ft.SERVER),
          agg_state=inner.initialize(),
          noise_round=intrinsics.federated_eval(start, ft.SERVER)))

    @computations.federated_computation(init_fn.type_signature.result,
                                        ft.clients(value_type))
    def next_fn(state, value):
      records = intrinsics.federated_map(client_noise, (
          intrinsics.federated_broadcast(state['query_state']), value,
          intrinsics.federated_broadcast(state['noise_round'])))
      output = inner.next(state['agg_state'], records)
      new_state = collections.OrderedDict(
          query_state=state['query_state'], agg_state=output.state,
          noise_round=intrinsics.federated_map(add_one, state['noise_round']))
      measurements = collections.OrderedDict(
          dp_query_metrics=intrinsics.federated_eval(no_metrics, ft.SERVER),
          dp=output.measurements)
      return measured.MeasuredProcessOutput(
          intrinsics.federated_zip(new_state), output.result,
          intrinsics.federated_zip(measurements))

    return aggregation_process.AggregationProcess(init_fn, next_fn)
