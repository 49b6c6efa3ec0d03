"""Weighted mean processes: clients' values averaged at the server, plain or encoded.

Encoded, tensor by tensor with a `GatherEncoder`, the round is split as the
canonical form runs it:

- prepare (server): `get_params` from the encoder state; what clients need is
  broadcast (C): the encode params (plus the decode params with error feedback,
  since such a client decodes its own message).
- work (each client): `encode(value * weight)`, as TFF's encoded mean does, so
  the sum of decoded messages divided by the sum of weights is the weighted mean.
- accumulate / merge (aggregation tier): `decode_before_sum`, sums of the
  part-decoded values, of the weights and of the client count, and the encoder
  state updates folded by their `StateAggregationMode`s, all in one
  `federated_aggregate`.
- update (server): `decode_after_sum` once, divide by the total weight,
  `update_state` from the aggregated state updates.

U carries exactly what must travel: the encoded tensors, the weight, the state
update tensors and any decode-before-sum params that are tensors (the
aggregation tier has no other input; no shipped encoder has any, so U holds
none). Python-valued params never travel.
"""

import tensorflow as tf

from canonical.aggregators import broadcast
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import specs
from canonical.core import types as ft
from canonical.templates import measured_process
from encoders.core import encoding_stage
from encoders.core import error_feedback as error_feedback_lib
from encoders.core import gather_encoder
from encoders.core import seeds

tf_computation = specs.tf_computation
federated_computation = computations.federated_computation

WEIGHT_SPEC = tf.TensorSpec([], tf.float32)
COUNT_SPEC = tf.TensorSpec([], tf.int32)


def _add(a, b):
  return tf.nest.map_structure(tf.add, a, b)


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


def _aggregate_spec(mode, spec):
  """The spec of state updates of `spec` aggregated by `mode` (STACK adds a row axis)."""
  if mode == encoding_stage.StateAggregationMode.STACK:
    return tf.TensorSpec([None] + spec.shape.as_list(), spec.dtype)
  return tf.TensorSpec(spec.shape, spec.dtype)


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
  feedback = tuple(error_feedback_lib.ErrorFeedback(e) for e in encoders)

  def initial_state():
    # The round number seeds the encoders' noise (seeds.noise_round).
    return (tuple(encoder.initial_state() for encoder in encoders),
            tf.constant(0, tf.int64))

  initialize = tf_computation(initial_state)
  state_spec = specs.plain(initialize.result_spec)

  def params_for_clients(state):
    encoder_states, round_number = state
    with seeds.noise_round(round_number):
      params = [e.get_params(s) for e, s in zip(encoders, encoder_states)]
    if not error_feedback:
      params = [(encode_params, before_sum_params)
                for encode_params, before_sum_params, _ in params]
    return tuple(params), round_number

  client_params = tf_computation(params_for_clients, state_spec)
  client_params_spec = specs.plain(client_params.result_spec)

  def encode_at_client(value, weight, params_and_round, residual=None):
    params, round_number = params_and_round
    flat = tf.nest.flatten(_weighted(value, weight))
    messages, updates, residuals = [], [], []
    for i, (encoder, x, p) in enumerate(zip(encoders, flat, params)):
      with seeds.noise_round(round_number):
        if error_feedback:
          encoded, update, new_residual = feedback[i].encode(
              x, tf.nest.flatten(residual)[i], p)
          residuals.append(new_residual)
        else:
          encoded, update = encoder.encode(x, p[0])
      messages.append((encoded, p[1]))
      updates.append(update)
    message = (tuple(messages), weight, tuple(updates))
    if error_feedback:
      return message, tf.nest.pack_sequence_as(value_spec, residuals)
    return message

  encode_specs = [value_spec, WEIGHT_SPEC, client_params_spec]
  if error_feedback:
    encode_specs.append(value_spec)
  encode = tf_computation(encode_at_client, *encode_specs)
  message_spec = specs.plain(
      encode.result_spec[0] if error_feedback else encode.result_spec)

  def decode_before_sum(messages):
    return tuple(encoder.decode_before_sum(encoded, before_sum_params)
                 for encoder, (encoded, before_sum_params)
                 in zip(encoders, messages))

  part_spec = specs.plain(tf_computation(decode_before_sum,
                                         message_spec[0]).result_spec)
  updates_spec = tuple(
      tuple(_aggregate_spec(mode, spec) for mode, spec in zip(
          e.state_update_aggregation_modes, e.state_update_specs))
      for e in encoders)
  accumulator_spec = (part_spec, WEIGHT_SPEC, COUNT_SPEC, updates_spec)

  def zero():
    parts = tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype),
                                  part_spec)
    return (parts, tf.constant(0.0), tf.constant(0),
            tuple(e.state_update_zero() for e in encoders))

  def accumulate(accumulator, message):
    parts, weight, count, updates = accumulator
    messages, client_weight, client_updates = message
    return (_add(parts, decode_before_sum(messages)), weight + client_weight,
            count + 1,
            tuple(e.accumulate_state_updates(a, u)
                  for e, a, u in zip(encoders, updates, client_updates)))

  def merge(a, b):
    return (_add(a[0], b[0]), a[1] + b[1], a[2] + b[2],
            tuple(e.merge_state_updates(x, y)
                  for e, x, y in zip(encoders, a[3], b[3])))

  def report(accumulator):
    return accumulator

  def finish_at_server(state, total):
    encoder_states, round_number = state
    parts, weight, count, updates = total
    means = []
    for encoder, s, part in zip(encoders, encoder_states, parts):
      with seeds.noise_round(round_number):
        _, _, after_sum_params = encoder.get_params(s)
      summed = encoder.decode_after_sum(part, after_sum_params, count)
      means.append(tf.math.divide_no_nan(summed, tf.cast(weight, summed.dtype)))
    new_state = tuple(e.update_state(s, u)
                      for e, s, u in zip(encoders, encoder_states, updates))
    return (new_state, round_number + 1), tf.nest.pack_sequence_as(value_spec,
                                                                    means)

  aggregate = dict(
      zero=tf_computation(zero),
      accumulate=tf_computation(accumulate, accumulator_spec, message_spec),
      merge=tf_computation(merge, accumulator_spec, accumulator_spec),
      report=tf_computation(report, accumulator_spec))
  finish = tf_computation(finish_at_server, state_spec, accumulator_spec)

  def mean_of(state, message):
    total = intrinsics.federated_aggregate(message, **aggregate)
    return intrinsics.federated_map(finish, (state, total))

  if error_feedback:

    @federated_computation(ft.server(state_spec), ft.clients(value_spec),
                           ft.clients(WEIGHT_SPEC), ft.clients(value_spec))
    def encoded_mean_with_error_feedback(state, value, weight, residual):
      params = intrinsics.federated_broadcast(
          intrinsics.federated_map(client_params, state))
      message, new_residual = intrinsics.federated_map(
          encode, (value, weight, params, residual))
      new_state, mean = mean_of(state, message)
      return new_state, mean, new_residual

    def initial_residual():
      return tf.nest.pack_sequence_as(
          value_spec, [f.initial_residual() for f in feedback])

    return measured_process.MeasuredProcess(
        initialize, encoded_mean_with_error_feedback, value_spec, encoders,
        client_state_initializer=tf_computation(initial_residual),
        name='encoded_mean_with_error_feedback')

  @federated_computation(ft.server(state_spec), ft.clients(value_spec),
                         ft.clients(WEIGHT_SPEC))
  def encoded_mean(state, value, weight):
    params = intrinsics.federated_broadcast(
        intrinsics.federated_map(client_params, state))
    message = intrinsics.federated_map(encode, (value, weight, params))
    new_state, mean = mean_of(state, message)
    return new_state, mean

  return measured_process.MeasuredProcess(initialize, encoded_mean, value_spec,
                                          encoders, name='encoded_mean')
