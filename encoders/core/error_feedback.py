"""Error feedback: what a lossy encoding dropped is added to the next round's input.

The residual stays on the client and is never sent; a runtime keeps it as client
state. Everything here is a pure function of its inputs.
"""

import tensorflow as tf

from encoders import errors
from encoders.core import gather_encoder as gather_encoder_lib
from encoders.core.tensor_types import TensorLike
from encoders.core.tensor_types import TensorTuple


class ErrorFeedback:
  """Wraps a `GatherEncoder`: `encode(x, residual, params)` also returns the new residual."""

  def __init__(self, gather_encoder: gather_encoder_lib.GatherEncoder):
    if not isinstance(gather_encoder, gather_encoder_lib.GatherEncoder):
      raise errors.InvalidTypeError('ErrorFeedback wraps a GatherEncoder (from '
                                    'as_gather_encoder), got '
                                    f'{type(gather_encoder).__name__}.')
    self._encoder = gather_encoder

  @property
  def gather_encoder(self) -> gather_encoder_lib.GatherEncoder:
    return self._encoder

  @property
  def residual_spec(self) -> tf.TensorSpec:
    return self._encoder.input_tensorspec

  def initial_residual(self) -> tf.Tensor:
    spec = self.residual_spec
    return tf.zeros(spec.shape, spec.dtype)

  def encode(
      self, x: TensorLike, residual: TensorLike,
      params: gather_encoder_lib.GatherParams
  ) -> tuple[dict[str, tf.Tensor], TensorTuple, tf.Tensor]:
    """Returns `(encoded_x, state_update_tensors, new_residual)`.

    `params` is the triple from `GatherEncoder.get_params`; the client decodes
    its own message to learn exactly what the server will receive from it:
    `new_residual = x + residual - decode(encoded_x)`.
    """
    corrected = tf.convert_to_tensor(x) + residual
    encoded, state_update = self._encoder.encode(corrected, params[0])
    new_residual = corrected - self._encoder.decode(encoded, params)
    return encoded, state_update, new_residual
