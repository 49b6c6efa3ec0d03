"""Weighted mean processes: clients' values averaged at the server, plain or encoded.

Encoded, tensor by tensor with a `GatherEncoder`, through the encoded sum of
`encoded.EncodedSum` (its docstring says how the round is split over the
canonical form's pieces): each client encodes `value * weight`, the weights
are summed beside, and the server divides the decoded sum by the total
weight.
"""

import tensorflow as tf

from canonical.aggregators import broadcast
from canonical.aggregators import encoded as encoded_lib
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import specs
from canonical.core import types as ft
from canonical.templates import measured_process
from encoders.core import gather_encoder

tf_computation = specs.tf_computation
federated_computation = computations.federated_computation

WEIGHT_SPEC = tf.TensorSpec([], tf.float32)
COUNT_SPEC = encoded_lib.COUNT_SPEC


def _weighted(value, weight):
  return tf.nest.map_structure(lambda v: v * tf.cast(weight, v.dtype), value)


def build_weighted_mean_process(value_spec):
  """The plain weighted mean: sum of `value * weight` over the sum of weights.

  No state. With a total weight of zero (every client dropped) the mean is
  zero rather than NaN, so the server model stays finite.
  """
  value_spec = specs.check_value_spec(value_spec,
                                      'build_weighted_mean_process')
  weigh = tf_computation(lambda value, weight: (_weighted(value, weight),
                                                weight),
                         value_spec, WEIGHT_SPEC)

  def divide(total, weight):
    return tf.nest.map_structure(
        lambda t: tf.math.divide_no_nan(t, tf.cast(weight, t.dtype)), total)

  finish = tf_computation(divide, value_spec, WEIGHT_SPEC)

  @federated_computation(ft.server(()), ft.clients(value_spec),
                         ft.clients(WEIGHT_SPEC))
  def weighted_mean(state, value, weight):
    total = intrinsics.federated_sum(
        intrinsics.federated_map(weigh, (value, weight)))
    return state, intrinsics.federated_map(finish, total)

  return measured_process.MeasuredProcess(
      tf_computation(broadcast.no_state), weighted_mean, value_spec,
      name='weighted_mean')


def build_encoded_mean_process(value_spec, encoder_fn, error_feedback=False):
  """A weighted mean of values like `value_spec`, each tensor encoded on its own.

  `encoder_fn(tf.TensorSpec)` returns `te.encoders.as_gather_encoder(...)`.
  `next(state@SERVER, value@CLIENTS, weight@CLIENTS) -> (state@SERVER,
  mean@SERVER)`.

  With `error_feedback=True` each client keeps a residual per tensor (what
  its lossy encodings have dropped so far, in units of `value * weight`) and
  adds it to the next value it encodes (`te.core.ErrorFeedback`). The residual
  is client state, never sent: `next` takes it as a fourth argument and
  returns the new one third, and `client_state_initializer` makes zeros.
  """
  who = 'build_encoded_mean_process'
  value_spec = specs.check_value_spec(value_spec, who)
  encoders = broadcast.encoders_for(value_spec, encoder_fn,
                                    gather_encoder.GatherEncoder, who)

  def finish(sums, weight):
    return tf.nest.pack_sequence_as(value_spec, [
        tf.math.divide_no_nan(summed, tf.cast(weight, summed.dtype))
        for summed in sums])

  encoded = encoded_lib.EncodedSum(
      value_spec, encoders,
      prepare=lambda value, weight: (_weighted(value, weight), weight),
      input_specs=(value_spec, WEIGHT_SPEC), extra_spec=WEIGHT_SPEC,
      finish=finish, error_feedback=error_feedback)
  state_spec = encoded.state_spec

  if error_feedback:

    @federated_computation(ft.server(state_spec), ft.clients(value_spec),
                           ft.clients(WEIGHT_SPEC), ft.clients(value_spec))
    def encoded_mean_with_error_feedback(state, value, weight, residual):
      return encoded.next(state, (value, weight), residual)

    return measured_process.MeasuredProcess(
        encoded.initialize, encoded_mean_with_error_feedback, value_spec,
        encoders,
        client_state_initializer=tf_computation(encoded.initial_residual),
        name='encoded_mean_with_error_feedback')

  @federated_computation(ft.server(state_spec), ft.clients(value_spec),
                         ft.clients(WEIGHT_SPEC))
  def encoded_mean(state, value, weight):
    return encoded.next(state, (value, weight))

  return measured_process.MeasuredProcess(encoded.initialize, encoded_mean,
                                          value_spec, encoders,
                                          name='encoded_mean')
