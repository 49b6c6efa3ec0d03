"""Broadcast processes: the server's value reaches every client, plain or encoded.

Encoded: each tensor's `SimpleEncoder` encodes at the server (in `prepare`),
the encoded tensors are what is broadcast (C), and every client decodes (in
`work`). The encoders' state lives in the server state and advances each round.
"""

import tensorflow as tf

from canonical.aggregators import encoder_fns
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import specs
from canonical.core import types as ft
from canonical.templates import measured_process
from encoders.core import seeds
from encoders.core import simple_encoder

tf_computation = specs.tf_computation
encoders_for = encoder_fns.encoders_for  # Its old home, still a name here.
federated_computation = computations.federated_computation


def no_state():
  return ()


def build_broadcast_process(value_spec):
  """A plain `federated_broadcast` of values like `value_spec`, with empty state."""
  value_spec = specs.check_value_spec(value_spec, 'build_broadcast_process')
  initialize = tf_computation(no_state)

  @federated_computation(ft.server(()), ft.server(value_spec))
  def broadcast(state, value):
    return state, intrinsics.federated_broadcast(value)

  return measured_process.MeasuredProcess(initialize, broadcast, value_spec,
                                          name='broadcast')


def build_encoded_broadcast_process(value_spec, encoder_fn):
  """A broadcast of values like `value_spec`, each tensor encoded by its own encoder.

  `encoder_fn(tf.TensorSpec)` returns `te.encoders.as_simple_encoder(...)`
  for that tensor. `next(state@SERVER, value@SERVER) -> (state@SERVER,
  value@CLIENTS)`; C carries only the encoded tensors (for each encoder,
  `SimpleEncoder.encoded_bits`).
  """
  who = 'build_encoded_broadcast_process'
  value_spec = specs.check_value_spec(value_spec, who)
  encoders = encoder_fns.encoders_for(value_spec, encoder_fn,
                                      simple_encoder.SimpleEncoder, who)

  def initial_state():
    # The round number seeds the encoders' noise (seeds.noise_round).
    return (tuple(encoder.initial_state() for encoder in encoders),
            tf.constant(0, tf.int64))

  initialize = tf_computation(initial_state)
  state_spec = specs.plain(initialize.result_spec)

  def encode_at_server(state, value):
    encoder_states, round_number = state
    with seeds.noise_round(round_number):
      encoded_and_states = [
          encoder.encode(x, s) for encoder, x, s in zip(
              encoders, tf.nest.flatten(value), encoder_states)]
    return (tuple(e for e, _ in encoded_and_states),
            (tuple(s for _, s in encoded_and_states), round_number + 1))

  encode = tf_computation(encode_at_server, state_spec, value_spec)
  encoded_spec = specs.plain(encode.result_spec[0])

  def decode_at_client(encoded):
    decoded = [encoder.decode(e) for encoder, e in zip(encoders, encoded)]
    return tf.nest.pack_sequence_as(value_spec, decoded)

  decode = tf_computation(decode_at_client, encoded_spec)

  @federated_computation(ft.server(state_spec), ft.server(value_spec))
  def encoded_broadcast(state, value):
    encoded, new_state = intrinsics.federated_map(encode, (state, value))
    at_clients = intrinsics.federated_broadcast(encoded)
    return new_state, intrinsics.federated_map(decode, at_clients)

  return measured_process.MeasuredProcess(
      initialize, encoded_broadcast, value_spec, encoders,
      name='encoded_broadcast')
