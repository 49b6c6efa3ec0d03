"""Encoded sums: clients' values summed at the server through lossy
`GatherEncoder`s, tensor by tensor; TensorFlow Federated's `EncodedSumFactory`.

`EncodedSum` holds the machinery `EncodedSumFactory` runs (the encoded
means are `MeanFactory` over it). The round is split as the canonical form
runs it:

- prepare (server): `get_params` from the encoder state; what clients need is
  broadcast (C): the encode params (plus the decode params with error
  feedback, since such a client decodes its own message).
- work (each client): `encode`.
- accumulate / merge (aggregation tier): `decode_before_sum`, sums of the
  part-decoded values and of the client count, and the encoder state updates
  folded by their `StateAggregationMode`s, all in one `federated_aggregate`.
- update (server): `decode_after_sum` once, `update_state` from the
  aggregated state updates.

U carries exactly what must travel: the encoded tensors, the state update
tensors and any decode-before-sum params that are tensors
(the aggregation tier has no other input; no shipped encoder has any, so U
holds none). Python-valued params never travel.
"""

import tensorflow as tf

from canonical.aggregators import encoder_fns
from canonical.aggregators import factory
from canonical.aggregators import sum_factory
from canonical.core import intrinsics
from canonical.core import specs
from canonical.core import types as ft
from canonical import errors
from canonical.templates import aggregation_process
from canonical.templates import measured
from encoders.core import encoding_stage
from encoders.core import error_feedback as error_feedback_lib
from encoders.core import gather_encoder
from encoders.core import seeds
from encoders import encoders as te_encoders

tf_computation = specs.tf_computation

COUNT_SPEC = tf.TensorSpec([], tf.int32)


def _add(a, b):
  return tf.nest.map_structure(tf.add, a, b)


def _aggregate_spec(mode, spec):
  """The spec of state updates of `spec` aggregated by `mode` (STACK adds a
  row axis)."""
  if mode == encoding_stage.StateAggregationMode.STACK:
    return tf.TensorSpec([None] + spec.shape.as_list(), spec.dtype)
  return tf.TensorSpec(spec.shape, spec.dtype)


class EncodedSum:
  """The pieces of one encoded sum of values like `value_spec`, one encoder
  per tensor. With `error_feedback`, each client keeps a residual per tensor
  (what its lossy encodings have dropped so far) and adds it to the next
  value it encodes (`te.core.ErrorFeedback`); `initial_residual` makes zeros.
  """

  def __init__(self, value_spec, encoders, error_feedback=False):
    self.value_spec = value_spec
    self.encoders = encoders
    self.error_feedback = error_feedback
    feedback = tuple(error_feedback_lib.ErrorFeedback(e) for e in encoders)
    self._feedback = feedback

    def initial_state():
      # The round number seeds the encoders' noise (seeds.noise_round).
      return (tuple(encoder.initial_state() for encoder in encoders),
              tf.constant(0, tf.int64))

    self.initialize = tf_computation(initial_state)
    state_spec = specs.plain(self.initialize.result_spec)
    self.state_spec = state_spec

    def params_for_clients(state):
      encoder_states, round_number = state
      with seeds.noise_round(round_number):
        params = [e.get_params(s) for e, s in zip(encoders, encoder_states)]
      if not error_feedback:
        params = [(encode_params, before_sum_params)
                  for encode_params, before_sum_params, _ in params]
      return tuple(params), round_number

    self.client_params = tf_computation(params_for_clients, state_spec)
    client_params_spec = specs.plain(self.client_params.result_spec)

    def encode_at_client(value, client_params, residual=None):
      params, round_number = client_params
      flat = tf.nest.flatten(value)
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
      message = (tuple(messages), tuple(updates))
      if error_feedback:
        return message, tf.nest.pack_sequence_as(value_spec, residuals)
      return message

    encode_specs = [value_spec, client_params_spec]
    if error_feedback:
      encode_specs.append(value_spec)
    self.encode = tf_computation(encode_at_client, *encode_specs)
    message_spec = specs.plain(
        self.encode.result_spec[0] if error_feedback else
        self.encode.result_spec)

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
    accumulator_spec = (part_spec, COUNT_SPEC, updates_spec)

    def zero():
      return (tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype),
                                    part_spec),
              tf.constant(0), tuple(e.state_update_zero() for e in encoders))

    def accumulate(accumulator, message):
      parts, count, updates = accumulator
      messages, client_updates = message
      return (_add(parts, decode_before_sum(messages)), count + 1,
              tuple(e.accumulate_state_updates(a, u)
                    for e, a, u in zip(encoders, updates, client_updates)))

    def merge(a, b):
      return (_add(a[0], b[0]), a[1] + b[1],
              tuple(e.merge_state_updates(x, y)
                    for e, x, y in zip(encoders, a[2], b[2])))

    def report(accumulator):
      return accumulator

    self.aggregate = dict(
        zero=tf_computation(zero),
        accumulate=tf_computation(accumulate, accumulator_spec, message_spec),
        merge=tf_computation(merge, accumulator_spec, accumulator_spec),
        report=tf_computation(report, accumulator_spec))

    def finish_at_server(state, total):
      encoder_states, round_number = state
      parts, count, updates = total
      sums = []
      for encoder, s, part in zip(encoders, encoder_states, parts):
        with seeds.noise_round(round_number):
          _, _, after_sum_params = encoder.get_params(s)
        sums.append(encoder.decode_after_sum(part, after_sum_params, count))
      new_state = tuple(e.update_state(s, u)
                        for e, s, u in zip(encoders, encoder_states, updates))
      return ((new_state, round_number + 1),
              tf.nest.pack_sequence_as(value_spec, sums))

    self.finish = tf_computation(finish_at_server, state_spec,
                                 accumulator_spec)

  def initial_residual(self):
    """A new client's residuals: zeros like the value."""
    return tf.nest.pack_sequence_as(
        self.value_spec, [f.initial_residual() for f in self._feedback])

  def next(self, state, value, residual=None):
    """One round, called while tracing a federated computation: `state` at
    SERVER, `value` and, with error feedback, `residual` at CLIENTS. Returns
    (new state, sum) at SERVER, and with error feedback the new residual at
    CLIENTS."""
    params = intrinsics.federated_broadcast(
        intrinsics.federated_map(self.client_params, state))
    args = (value, params) + ((residual,) if self.error_feedback else ())
    encoded = intrinsics.federated_map(self.encode, args)
    message, new_residual = encoded if self.error_feedback else (encoded,
                                                                 None)
    total = intrinsics.federated_aggregate(message, **self.aggregate)
    new_state, result = intrinsics.federated_map(self.finish, (state, total))
    if self.error_feedback:
      return new_state, result, new_residual
    return new_state, result


class EncodedSumFactory(factory.UnweightedAggregationFactory):
  """TFF's `EncodedSumFactory(encoder_fn)`: the sum of values encoded tensor
  by tensor, `encoder_fn(tf.TensorSpec)` returning
  `te.encoders.as_gather_encoder(encoder, spec)` for each tensor.

  The process's state is `(encoder states, one per tensor, round number)`
  (the round seeds the encoders' noise, purely); measurements are empty.

  `error_feedback=True` (our extension of TFF's API): each client keeps, as
  client state, what its lossy encodings have dropped so far, one residual
  per tensor, and adds it to the next value it encodes
  (`te.core.ErrorFeedback`). The process then has a
  `client_state_initializer` (zeros like the value), and so does a learning
  algorithm built with it.
  """

  def __init__(self, encoder_fn, *, error_feedback=False):
    if not callable(encoder_fn):
      raise errors.InvalidTypeError(
          f'EncodedSumFactory: encoder_fn must be a function of a '
          f'tf.TensorSpec, got {type(encoder_fn).__name__}.')
    if not isinstance(error_feedback, bool):
      raise errors.InvalidTypeError(
          f'EncodedSumFactory: error_feedback must be a bool, got '
          f'{error_feedback!r}.')
    self._encoder_fn = encoder_fn
    self._error_feedback = error_feedback

  @classmethod
  def quantize_above_threshold(cls, quantization_bits=8, threshold=20000,
                               **kwargs):
    """Uniform quantization to `quantization_bits` bits of every tensor with
    more than `threshold` elements; smaller tensors are summed as they are.
    `kwargs` go to `te.encoders.uniform_quantization` (here: `stochastic`,
    `seed`), except `error_feedback`, the constructor's (TFF's signature
    kept: its keywords end in **kwargs)."""
    where = 'EncodedSumFactory.quantize_above_threshold'
    error_feedback = kwargs.pop('error_feedback', False)
    if isinstance(quantization_bits, bool) or not isinstance(
        quantization_bits, int) or not 1 <= quantization_bits <= 16:
      raise errors.InvalidValueError(
          f'{where}: quantization_bits must be an int in [1, 16], got '
          f'{quantization_bits!r}.')
    if isinstance(threshold, bool) or not isinstance(threshold, int) or (
        threshold < 0):
      raise errors.InvalidValueError(
          f'{where}: threshold must be a non-negative int, got '
          f'{threshold!r}.')

    def encoder_fn(spec):
      if spec.shape.num_elements() > threshold:
        return te_encoders.as_gather_encoder(
            te_encoders.uniform_quantization(quantization_bits, **kwargs),
            spec)
      return te_encoders.as_gather_encoder(te_encoders.identity(), spec)

    return cls(encoder_fn, error_feedback=error_feedback)

  def create(self, value_type):
    where = 'EncodedSumFactory.create'
    value_type = factory.value_type_of(value_type, where)
    encoders = encoder_fns.encoders_for(value_type, self._encoder_fn,
                                      gather_encoder.GatherEncoder, where)
    encoded = EncodedSum(value_type, encoders,
                         error_feedback=self._error_feedback)
    state_spec = encoded.state_spec

    init_fn = aggregation_process.initialize_at_server(encoded.initialize)

    def step(state, value, client_state=None):
      new_state, total, *residual = encoded.next(state, value, client_state)
      return measured.output(new_state, total, sum_factory.empty_at_server(),
                             *residual)

    client_state_initializer = None
    if self._error_feedback:
      client_state_initializer = tf_computation(encoded.initial_residual)
    next_fn = aggregation_process.next_computation(
        step, [('state', ft.server(state_spec)),
               ('value', ft.clients(value_type))],
        value_type if self._error_feedback else None)
    process = aggregation_process.AggregationProcess(
        init_fn, next_fn, client_state_initializer=client_state_initializer)
    process.encoders = encoders
    return process
