"""The aggregation platform surface: many clients encode, one place sums.

Decoding is split where the encoder stops commuting with sum:
`decode_before_sum` runs per client (in the aggregation tier), the part-decoded
values are summed, and `decode_after_sum` finishes once. Every method takes and
returns flat tuples or dicts of tensors; Python values are learned when the
`GatherEncoder` is built.
"""

from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
import functools

import tensorflow as tf

from encoders import errors
from encoders.core import aggregation
from encoders.core import core_encoder
from encoders.core import simple_encoder
from encoders.core import structures
from encoders.core.encoding_stage import StateAggregationMode
from encoders.core.tensor_types import TensorLike
from encoders.core.tensor_types import TensorTuple

_TENSORS = 'encoded_tensors'
_SHAPES = 'shapes'

# What `GatherEncoder.get_params` returns: the encode, decode_before_sum and
# decode_after_sum params, each flat.
GatherParams = tuple[TensorTuple, TensorTuple, TensorTuple]


def _aggregate_one(encoder, update):
  """One client's state update, shaped as its aggregate (STACK adds an axis)."""
  modes = encoder.state_update_aggregation_modes
  try:
    tf.nest.assert_same_structure(modes, update)
  except (ValueError, TypeError) as e:
    raise errors.InvalidValueError(
        'GatherEncoder: the state update tensors a stage returns '
        'do not match its state_update_aggregation_modes: '
        f'{e}') from None
  return tf.nest.map_structure(
      lambda mode, u: aggregation.accumulate(
          mode, aggregation.zero(mode, tf.TensorSpec.from_tensor(u)), u),
      modes, update)


class GatherEncoder:
  """Encodes values of one `tf.TensorSpec` for a sum or mean over clients."""

  def __init__(self, encoder: core_encoder.Encoder,
               tensorspec: tf.TensorSpec):
    simple_encoder.check_encoder_and_spec(encoder, tensorspec, 'GatherEncoder')
    self._encoder = encoder
    self._tensorspec = tensorspec
    self._commuting = encoder.commuting_structure

    def build(x):
      state = encoder.initial_state()
      params, after_shapes = self._params_structure(state, x)
      message, update = self._encode_structure(x, params[0])
      part = self._decode_before_sum_structure(message, params[1])
      decoded = encoder.decode_after_sum(part, params[2], 1, after_shapes)
      new_state = encoder.update_state(state, _aggregate_one(encoder, update))
      return state, new_state, params, after_shapes, message, update, part, decoded

    (state, new_state, params, after_shapes, message, update, part,
     decoded) = structures.trace(build, tensorspec)
    simple_encoder.check_output(decoded, tensorspec, 'GatherEncoder')
    for leaf in tf.nest.flatten(after_shapes):
      if structures.is_tensor(leaf):
        raise errors.InvalidValueError(
            'GatherEncoder: a stage decoded after the sum needs an input '
            'shape that is only known at run time; stages that commute with '
            'sum must keep static shapes.')
    self._after_shapes = after_shapes
    self._state = structures.Template(state)
    self._state.tensors(new_state, 'updated state')
    self._params = [structures.Template(p) for p in params]
    self._message = structures.Template(message)
    self._message_keys = structures.tensor_paths(message)
    self._part = structures.Template(part)
    self._part_keys = (structures.tensor_paths(part)
                       if isinstance(part, dict) else None)
    self._update = structures.Template(update)
    self._modes = tf.nest.flatten(encoder.state_update_aggregation_modes)

  @classmethod
  def from_encoder(cls, encoder: core_encoder.Encoder,
                   tensorspec: tf.TensorSpec) -> 'GatherEncoder':
    return cls(encoder, tensorspec)

  @property
  def input_tensorspec(self) -> tf.TensorSpec:
    return self._tensorspec

  def __repr__(self) -> str:
    return f'GatherEncoder({self._encoder!r})'

  @property
  def fully_commutes_with_sum(self) -> bool:
    return self._encoder.fully_commutes_with_sum

  @property
  def state_update_aggregation_modes(self) -> list[StateAggregationMode]:
    """One `StateAggregationMode` per state update tensor, in order."""
    return list(self._modes)

  @property
  def encoded_spec(self) -> dict[str, tf.TensorSpec]:
    """Dict key -> `tf.TensorSpec` of one client's encoded value: what is sent."""
    return dict(zip(self._message_keys, self._message.specs))

  @property
  def encoded_bits(self) -> int:
    """Bits of one client's encoded value."""
    return structures.bits(self._message.specs)

  @property
  def state_update_specs(self) -> list[tf.TensorSpec]:
    return self._update.specs

  def initial_state(self, name: str | None = None) -> TensorTuple:
    with tf.name_scope(name or 'gather_encoder_initial_state'):
      return tuple(self._state.tensors(self._encoder.initial_state(), 'state'))

  def get_params(self, state: Sequence[TensorLike] | None = None,
                 name: str | None = None) -> GatherParams:
    """Returns `(encode_params, decode_before_sum_params, decode_after_sum_params)`."""
    with tf.name_scope(name or 'gather_encoder_get_params'):
      if state is None:
        state = self.initial_state()
      params, _ = self._params_structure(self._state.pack(state, 'state'))
      return tuple(tuple(template.tensors(p, 'params'))
                   for template, p in zip(self._params, params))

  def encode(
      self, x: TensorLike, encode_params: Sequence[TensorLike],
      name: str | None = None
  ) -> tuple[dict[str, tf.Tensor], TensorTuple]:
    """Returns `(encoded_x, state_update_tensors)`: a dict and a tuple."""
    with tf.name_scope(name or 'gather_encoder_encode'):
      x = simple_encoder.check_input(x, self._tensorspec, 'GatherEncoder')
      message, update = self._encode_structure(
          x, self._params[0].pack(encode_params, 'encode params'))
      tensors = self._message.tensors(message, 'encoded value')
      return (dict(zip(self._message_keys, tensors)),
              tuple(self._update.tensors(update, 'state update')))

  def decode_before_sum(
      self, encoded_x: Mapping[str, TensorLike],
      decode_before_sum_params: Sequence[TensorLike], name: str | None = None
  ) -> tf.Tensor | dict[str, tf.Tensor]:
    """Returns the part-decoded value: a tensor, or a dict of tensors, to be summed."""
    with tf.name_scope(name or 'gather_encoder_decode_before_sum'):
      if set(encoded_x) != set(self._message_keys):
        raise errors.InvalidValueError(
            'GatherEncoder.decode_before_sum: the encoded value '
            f'has keys {sorted(encoded_x)}, expected '
            f'{sorted(self._message_keys)}.')
      message = self._message.pack([encoded_x[k] for k in self._message_keys],
                                   'encoded value')
      part = self._decode_before_sum_structure(
          message,
          self._params[1].pack(decode_before_sum_params,
                               'decode_before_sum params'))
      tensors = self._part.tensors(part, 'part-decoded value')
      if self._part_keys is None:
        return tensors[0]
      return dict(zip(self._part_keys, tensors))

  def decode_after_sum(self,
                       part_decoded_x: TensorLike | Mapping[str, TensorLike],
                       decode_after_sum_params: Sequence[TensorLike],
                       num_summands: TensorLike,
                       name: str | None = None) -> tf.Tensor:
    """Finishes decoding a sum of `num_summands` part-decoded values."""
    with tf.name_scope(name or 'gather_encoder_decode_after_sum'):
      if self._part_keys is None:
        tensors = [part_decoded_x]
      else:
        tensors = [part_decoded_x[k] for k in self._part_keys]
      part = self._part.pack(tensors, 'part-decoded value')
      params = self._params[2].pack(decode_after_sum_params,
                                    'decode_after_sum params')
      decoded = self._encoder.decode_after_sum(part, params, num_summands,
                                               self._after_shapes)
      return tf.ensure_shape(decoded, self._tensorspec.shape)

  def decode(self, encoded_x: Mapping[str, TensorLike],
             params: GatherParams) -> tf.Tensor:
    """Decodes one client's value: what the server would see from it alone.

    `params` is the triple returned by `get_params`.
    """
    part = self.decode_before_sum(encoded_x, params[1])
    return self.decode_after_sum(part, params[2], 1)

  def update_state(self, state: Sequence[TensorLike],
                   state_update_tensors: Sequence[TensorLike],
                   name: str | None = None) -> TensorTuple:
    """Returns the next state from state updates aggregated by their modes."""
    with tf.name_scope(name or 'gather_encoder_update_state'):
      new_state = self._encoder.update_state(
          self._state.pack(state, 'state'),
          # Aggregation changes shapes (STACK adds an axis); dtypes still hold.
          self._update.pack(state_update_tensors, 'aggregated state update',
                            check_shapes=False))
      return tuple(self._state.tensors(new_state, 'updated state'))

  def state_update_zero(self) -> TensorTuple:
    """The aggregate of no state updates."""
    return tuple(aggregation.zero(mode, spec)
                 for mode, spec in zip(self._modes, self._update.specs))

  def accumulate_state_updates(
      self, accumulator: Sequence[TensorLike],
      state_update_tensors: Sequence[TensorLike]) -> TensorTuple:
    """Folds one client's state update tensors into an aggregate."""
    return tuple(aggregation.accumulate(mode, a, u) for mode, a, u in zip(
        self._modes, accumulator, state_update_tensors))

  def merge_state_updates(self, a: Sequence[TensorLike],
                          b: Sequence[TensorLike]) -> TensorTuple:
    """Combines two aggregates."""
    return tuple(aggregation.merge(mode, x, y)
                 for mode, x, y in zip(self._modes, a, b))

  def aggregate_state_updates(
      self, state_updates: Iterable[Sequence[TensorLike]]) -> TensorTuple:
    """Aggregates a list of clients' state update tuples by their modes."""
    return functools.reduce(self.accumulate_state_updates, state_updates,
                            self.state_update_zero())

  def _params_structure(self, state, x=None):
    """The three params trees, and the static input shapes used after the sum."""
    encode_params, decode_params = self._encoder.get_params(state)
    before, after = core_encoder.split_params_by_commuting_structure(
        decode_params, self._commuting)
    after_shapes = None
    if x is not None:
      _, _, shapes = self._encoder.encode(x, encode_params)
      after_shapes = core_encoder.split_shapes_by_commuting_structure(
          shapes, self._commuting)[1]
    return (encode_params, before, after), after_shapes

  def _encode_structure(self, x, encode_params):
    encoded, update, shapes = self._encoder.encode(x, encode_params)
    before_shapes, _ = core_encoder.split_shapes_by_commuting_structure(
        shapes, self._commuting)
    return {_TENSORS: encoded, _SHAPES: before_shapes}, update

  def _decode_before_sum_structure(self, message, before_params):
    return self._encoder.decode_before_sum(message[_TENSORS], before_params,
                                           message[_SHAPES])
