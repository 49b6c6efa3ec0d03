"""The broadcast platform surface: encode in one place, decode in many.

The encoded value is a flat dict of only the tensors a decoder needs (encoded
tensors, decode params and dynamic shapes); everything Python-valued is learned
once, when the `SimpleEncoder` is built, so `decode` can run in a different
trace, process or machine from `encode`.
"""

from collections.abc import Mapping
from collections.abc import Sequence

import tensorflow as tf

from encoders import errors
from encoders.core import core_encoder
from encoders.core import structures
from encoders.core.tensor_types import TensorLike
from encoders.core.tensor_types import TensorTuple

_TENSORS = 'encoded_tensors'
_PARAMS = 'params'
_SHAPES = 'shapes'


def check_encoder_and_spec(encoder, tensorspec, who):
  if not isinstance(encoder, core_encoder.Encoder):
    raise errors.InvalidTypeError(
        f'{who} needs an Encoder (from EncoderComposer.make()), got '
        f'{type(encoder).__name__}.')
  if not isinstance(tensorspec, tf.TensorSpec):
    raise errors.InvalidTypeError(f'{who} needs a tf.TensorSpec, got '
                                  f'{type(tensorspec).__name__}.')
  if not tensorspec.shape.is_fully_defined():
    raise errors.InvalidTypeError(
        f'{who} needs a fully defined shape, got {tensorspec}.')


def check_input(x, tensorspec, who):
  x = tf.convert_to_tensor(x)
  if not tensorspec.is_compatible_with(x):
    raise errors.InvalidValueError(
        f'{who} was built for {tensorspec}, got a tensor of shape '
        f'{x.shape} and dtype {x.dtype.name}.')
  return x


def check_output(decoded, tensorspec, who):
  if not tensorspec.is_compatible_with(decoded):
    raise errors.InvalidValueError(
        f'{who}: decoding gives shape {decoded.shape} and dtype '
        f'{decoded.dtype.name}, but the input is {tensorspec}.')


class SimpleEncoder:
  """Encodes values of one `tf.TensorSpec`; state is a tuple of tensors."""

  def __init__(self, encoder: core_encoder.Encoder,
               tensorspec: tf.TensorSpec):
    check_encoder_and_spec(encoder, tensorspec, 'SimpleEncoder')
    self._encoder = encoder
    self._tensorspec = tensorspec

    def build(x):
      state = encoder.initial_state()
      message, new_state = self._encode_structure(x, state)
      decoded = self._decode_structure(message)
      return state, new_state, message, decoded

    state, new_state, message, decoded = structures.trace(build, tensorspec)
    check_output(decoded, tensorspec, 'SimpleEncoder')
    self._state = structures.Template(state)
    self._state.tensors(new_state, 'updated state')
    self._message = structures.Template(message)
    self._message_keys = structures.tensor_paths(message)

  @property
  def input_tensorspec(self) -> tf.TensorSpec:
    return self._tensorspec

  def __repr__(self) -> str:
    return f'SimpleEncoder({self._encoder!r})'

  @property
  def encoded_spec(self) -> dict[str, tf.TensorSpec]:
    """Dict key -> `tf.TensorSpec` of what `encode` produces: what is sent."""
    return dict(zip(self._message_keys, self._message.specs))

  @property
  def encoded_bits(self) -> int:
    """Bits of one encoded value."""
    return structures.bits(self._message.specs)

  def initial_state(self, name: str | None = None) -> TensorTuple:
    with tf.name_scope(name or 'simple_encoder_initial_state'):
      return tuple(self._state.tensors(self._encoder.initial_state(), 'state'))

  def encode(
      self, x: TensorLike, state: Sequence[TensorLike] | None = None,
      name: str | None = None
  ) -> tuple[dict[str, tf.Tensor], TensorTuple]:
    """Returns `(encoded_x, updated_state)`; `encoded_x` is a dict of tensors."""
    with tf.name_scope(name or 'simple_encoder_encode'):
      x = check_input(x, self._tensorspec, 'SimpleEncoder')
      if state is None:
        state = self.initial_state()
      message, new_state = self._encode_structure(
          x, self._state.pack(state, 'state'))
      tensors = self._message.tensors(message, 'encoded value')
      return (dict(zip(self._message_keys, tensors)),
              tuple(self._state.tensors(new_state, 'updated state')))

  def decode(self, encoded_x: Mapping[str, TensorLike],
             name: str | None = None) -> tf.Tensor:
    """Returns the decoded tensor, shaped like the input."""
    with tf.name_scope(name or 'simple_encoder_decode'):
      if set(encoded_x) != set(self._message_keys):
        raise errors.InvalidValueError(
            'SimpleEncoder.decode: the encoded value has keys '
            f'{sorted(encoded_x)}, expected '
            f'{sorted(self._message_keys)}.')
      message = self._message.pack([encoded_x[k] for k in self._message_keys],
                                   'encoded value')
      return tf.ensure_shape(self._decode_structure(message),
                             self._tensorspec.shape)

  def _encode_structure(self, x, state):
    encode_params, decode_params = self._encoder.get_params(state)
    encoded, state_update, shapes = self._encoder.encode(x, encode_params)
    new_state = self._encoder.update_state(state, state_update)
    message = {_TENSORS: encoded, _PARAMS: decode_params, _SHAPES: shapes}
    return message, new_state

  def _decode_structure(self, message):
    return self._encoder.decode(message[_TENSORS], message[_PARAMS],
                                message[_SHAPES])
