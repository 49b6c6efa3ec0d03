"""TFF's `tff.learning.add_debug_measurements` and
`add_debug_measurements_with_mixed_dtype`: an aggregation factory whose
measurements also describe the client updates and the aggregate.

Both wrap the factory with `tff.aggregators.add_measurements`. At the
clients: `average_client_norm`, the mean of each update's global L2 norm
(weighted by the factory's weights, or uniformly for an unweighted one),
and `std_dev_client_norm`, the square root of the unbiased variance of
those norms (the biased variance times `a^2 / (a^2 - b)`, `a` and `b` the
sums of the weights and of their squares). At the server:
`server_update_max`, `server_update_norm` and `server_update_min` of the
aggregate, over every entry of every tensor. The mixed-dtype version casts
each tensor's squared norm and extremes to float32 (TFF's takes the norm in
the tensor's own dtype first, so an integer tensor fails there; here an
integer one is cast to float32 before its norm).
"""

import collections

import tensorflow as tf

from canonical import aggregators
from canonical import errors
from canonical.core import intrinsics
from canonical.core import specs
from canonical.core import types as ft


def add_debug_measurements(aggregation_factory):
  """`aggregation_factory` (weighted or not) with the debugging
  measurements above; its tensors share one dtype."""
  return _with_debug_measurements(aggregation_factory, _global_norm,
                                  _server_statistics)


def add_debug_measurements_with_mixed_dtype(aggregation_factory):
  """`add_debug_measurements` for updates whose tensors differ in dtype:
  every statistic is computed in, or cast to, float32."""
  return _with_debug_measurements(aggregation_factory, _mixed_global_norm,
                                  _mixed_server_statistics)


def _global_norm(value):
  return tf.linalg.global_norm(tf.nest.flatten(value))


def _mixed_global_norm(value):
  squares = []
  for tensor in tf.nest.flatten(value):
    if not (tensor.dtype.is_floating or tensor.dtype.is_complex):
      tensor = tf.cast(tensor, tf.float32)
    squares.append(tf.cast(tf.norm(tensor, ord=2) ** 2, tf.float32))
  return tf.sqrt(tf.reduce_sum(tf.stack(squares)))


def _server_statistics(value):
  flat = tf.nest.flatten(value)
  return collections.OrderedDict(
      server_update_max=tf.reduce_max([tf.reduce_max(t) for t in flat]),
      server_update_norm=_global_norm(value),
      server_update_min=tf.reduce_min([tf.reduce_min(t) for t in flat]))


def _mixed_server_statistics(value):
  flat = tf.nest.flatten(value)
  return collections.OrderedDict(
      server_update_max=tf.reduce_max(
          [tf.cast(tf.reduce_max(t), tf.float32) for t in flat]),
      server_update_norm=_mixed_global_norm(value),
      server_update_min=tf.reduce_min(
          [tf.cast(tf.reduce_min(t), tf.float32) for t in flat]))


def _unbiased_std_dev(mean, mean_of_squares, weight_sum, squared_weight_sum):
  biased_variance = mean_of_squares - mean ** 2
  correction = tf.math.divide_no_nan(weight_sum ** 2,
                                     weight_sum ** 2 - squared_weight_sum)
  return tf.sqrt(correction * biased_variance)


def _member_of(value):
  return specs.plain(value.type_signature.member)


def _client_statistics(norm_fn):
  """`client_measurement_fn(value, weight)` of the client norms."""

  def measure(value, weight):
    norm = intrinsics.federated_map(
        specs.tf_computation(norm_fn, _member_of(value)), value)
    norm_spec = _member_of(norm)
    square = specs.tf_computation(lambda x: x ** 2, norm_spec)
    weight_square = specs.tf_computation(lambda x: x ** 2,
                                         _member_of(weight))
    mean = intrinsics.federated_mean(norm, weight)
    mean_of_squares = intrinsics.federated_mean(
        intrinsics.federated_map(square, norm), weight)
    weight_sum = intrinsics.federated_sum(weight)
    squared_weight_sum = intrinsics.federated_sum(
        intrinsics.federated_map(weight_square, weight))
    std_dev = specs.tf_computation(
        _unbiased_std_dev, norm_spec, norm_spec, _member_of(weight_sum),
        _member_of(squared_weight_sum))
    return intrinsics.federated_zip(collections.OrderedDict(
        average_client_norm=mean,
        std_dev_client_norm=intrinsics.federated_map(
            std_dev, (mean, mean_of_squares, weight_sum,
                      squared_weight_sum))))

  return measure


def _with_debug_measurements(aggregation_factory, norm_fn, server_fn):
  weighted = isinstance(aggregation_factory,
                        aggregators.WeightedAggregationFactory)
  if not weighted and not isinstance(
      aggregation_factory, aggregators.UnweightedAggregationFactory):
    raise errors.InvalidTypeError(
        'add_debug_measurements: aggregation_factory must be a tff.'
        'aggregators.WeightedAggregationFactory or UnweightedAggregation'
        f'Factory, got {type(aggregation_factory).__name__}.')
  client_fn = _client_statistics(norm_fn)
  if not weighted:
    weighted_client_fn = client_fn

    def client_fn(value):  # Every client weighs 1.
      return weighted_client_fn(
          value, intrinsics.federated_value(1.0, ft.CLIENTS))

  def server_measurement_fn(result):
    return intrinsics.federated_map(
        specs.tf_computation(server_fn, _member_of(result)), result)

  return aggregators.add_measurements(
      aggregation_factory, client_measurement_fn=client_fn,
      server_measurement_fn=server_measurement_fn)
