"""The local noise step of `DistributedDpSumFactory`: each client checks its
rounded integer value against the norm bounds, and its value goes into a
secure modular sum to which each client's runtime adds its own Skellam or
discrete Gaussian noise before it masks
(`federated_secure_modular_sum_with_client_noise`). The noise is drawn from a
secret only that client holds, never in the form's pieces, so no party (the
server holding the form included) sees a value or a sum without noise. Kept
apart from the factory because it is the step that makes the sum private,
and the step a reviewer of the DP guarantee reads first.
"""

import collections

import tensorflow as tf

from canonical.aggregators import factory
from canonical.aggregators import modular_clipping
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import specs
from canonical.core import types as ft
from canonical.templates import aggregation_process
from canonical.templates import measured

# Errors name the factory users build, not this step.
_WHERE = 'DistributedDpSumFactory'


class LocalNoiseFactory(factory.UnweightedAggregationFactory):
  """What TFF does with `DifferentiallyPrivateFactory` over
  tensorflow_privacy's `DistributedSkellamSumQuery` /
  `DistributedDiscreteGaussianSumQuery`, two `ModularClippingSumFactory`
  and a secure sum, in one step: each client checks its int32 record
  against the norm bounds (a record above them fails the client); the sum
  mod 2**bits, each client's own noise of stddev `local_stddev` included,
  comes back wrapped into [-2**(bits-1), 2**(bits-1)). Noise added after
  TFF's client-side wraps equals noise added before them, modulo 2**bits.
  State `OrderedDict(query_state=OrderedDict([l1_norm_bound,]
  l2_norm_bound, local_stddev))`; measurements
  `OrderedDict(dp_query_metrics=<>)`."""

  def __init__(self, mechanism, l1_norm_bound, l2_norm_bound, local_stddev,
               bits):
    self._mechanism = mechanism
    self._bounds = (l1_norm_bound, l2_norm_bound, local_stddev)
    self._bits = bits

  def initial_query_state(self):
    l1, l2, stddev = self._bounds
    state = collections.OrderedDict()
    if self._mechanism == 'distributed_skellam':
      state['l1_norm_bound'] = tf.constant(l1, tf.int32)
    state['l2_norm_bound'] = tf.constant(l2, tf.float32)
    state['local_stddev'] = tf.constant(stddev, tf.float32)
    return state

  def create(self, value_type):
    value_type = factory.integer_value_type(value_type,
                                            f'{_WHERE} (noise)')
    mechanism, bits = self._mechanism, self._bits
    initial = specs.tf_computation(self.initial_query_state)
    query_spec = specs.plain(initial.result_spec)

    def checked(query, value):
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
      with tf.control_dependencies(checks):
        return tf.nest.map_structure(tf.identity, value)

    check = specs.tf_computation(checked, query_spec, value_type)
    stddev_of = specs.tf_computation(lambda query: query['local_stddev'],
                                     query_spec)
    wrap = specs.tf_computation(
        lambda total: modular_clipping.modular_clip_by_value(
            total, -2**(bits - 1), 2**(bits - 1)), value_type)
    no_metrics = specs.tf_computation(collections.OrderedDict)

    @computations.federated_computation()
    def init_fn():
      return intrinsics.federated_zip(collections.OrderedDict(
          query_state=intrinsics.federated_eval(initial, ft.SERVER)))

    @computations.federated_computation(init_fn.type_signature.result,
                                        ft.clients(value_type))
    def next_fn(state, value):
      records = intrinsics.federated_map(check, (
          intrinsics.federated_broadcast(state['query_state']), value))
      total = intrinsics.federated_secure_modular_sum_with_client_noise(
          records, 2**bits, mechanism,
          intrinsics.federated_map(stddev_of, state['query_state']))
      measurements = collections.OrderedDict(
          dp_query_metrics=intrinsics.federated_eval(no_metrics, ft.SERVER))
      return measured.MeasuredProcessOutput(
          state, intrinsics.federated_map(wrap, total),
          intrinsics.federated_zip(measurements))

    return aggregation_process.AggregationProcess(init_fn, next_fn)
