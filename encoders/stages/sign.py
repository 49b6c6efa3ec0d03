"""One bit per value: the sign, times one scale shared by the whole tensor."""

import tensorflow as tf

from encoders import errors
from encoders.core import encoding_stage
from encoders.stages import basic


def _mean_abs_scale(flat, abs_sum):
  count = tf.cast(tf.size(flat), abs_sum.dtype)
  return tf.math.divide_no_nan(abs_sum, count)


def _drive_scale(flat, abs_sum):
  return tf.math.divide_no_nan(tf.reduce_sum(tf.square(flat)), abs_sum)


# Scale name -> (flat, ||flat||_1) -> scale.
_SCALES = {'mean_abs': _mean_abs_scale, 'drive': _drive_scale}


@encoding_stage.tf_style_encoding_stage
class SignEncodingStage(encoding_stage.EncodingStageInterface):
  """Sends sign(x) as 0/1 ints and one scale; decodes to +-scale.

  `scale='mean_abs'` uses ||x||_1 / n, the magnitude of signSGD-style
  compressors (the least-squares scale for the signs). `scale='drive'` uses
  ||x||_2^2 / ||x||_1, which DRIVE shows makes the estimate unbiased when the
  input was randomly rotated first (e.g. by `UnpaddedHadamardEncodingStage`, sharing
  the rotation seed across clients).

  Zero counts as positive: it decodes to +scale. The signs are flattened to
  rank 1 and are int32 0 (negative) or 1 (non-negative), so
  `BitpackingEncodingStage(input_bits=1)` packs them to one bit each. The
  scale is one float32 scalar; a zero-size dtype tag tells decode the dtype.
  """

  SIGNS_KEY = 'signs'
  SCALE_KEY = 'scale'

  def __init__(self, scale='mean_abs'):
    if scale not in _SCALES:
      raise errors.InvalidValueError(f'SignEncodingStage: scale must be one of '
                                     f'{sorted(_SCALES)}, got {scale!r}.')
    self._scale = scale

  @property
  def name(self):
    return 'sign'

  @property
  def compressible_tensors_keys(self):
    return [self.SIGNS_KEY]

  @property
  def commutes_with_sum(self):
    return False

  @property
  def decode_needs_input_shape(self):
    return True

  @property
  def xla_compatible(self):
    return True

  def get_params(self):
    return {}, {}

  def encode(self, x, encode_params):
    del encode_params  # Unused.
    basic.check_float_input('SignEncodingStage', x)
    flat = tf.reshape(x, [-1])
    # Sums of half-precision values lose bits: accumulate in float32 at least.
    wide = flat if x.dtype == tf.float64 else tf.cast(flat, tf.float32)
    abs_sum = tf.reduce_sum(tf.abs(wide))
    scale = _SCALES[self._scale](wide, abs_sum)
    return {
        self.SIGNS_KEY: tf.cast(flat >= 0, tf.int32),
        self.SCALE_KEY: tf.cast(scale, tf.float32),
        basic.DTYPE_TAG_KEY: basic.dtype_tag(x.dtype),
    }

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del decode_params, num_summands  # Unused; sums are not decodable.
    if shape is None:
      raise errors.InvalidValueError(
          'SignEncodingStage: decode needs the input shape.')
    dtype = basic.tagged_dtype(encoded_tensors[basic.DTYPE_TAG_KEY])
    scale = tf.cast(encoded_tensors[self.SCALE_KEY], dtype)
    positive = tf.cast(encoded_tensors[self.SIGNS_KEY], tf.bool)
    return tf.reshape(tf.where(positive, scale, -scale), shape)
