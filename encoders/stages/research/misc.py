"""Small building blocks for sparse encodings.

`SplitBySmallValueEncodingStage` keeps only the values that matter (a dense
vector becomes values plus int32 positions), and
`DifferenceBetweenIntegersEncodingStage` turns sorted positions into small
gaps, which a later entropy or bit-width stage codes in fewer bits.
"""

import numbers

import tensorflow as tf

from encoders import errors
from encoders.core import encoding_stage
from encoders.stages import basic


@encoding_stage.tf_style_encoding_stage
class SplitBySmallValueEncodingStage(encoding_stage.EncodingStageInterface):
  """Sends the values with |x| > threshold and their flat int32 positions.

  Decode scatters them into zeros of the input shape, so values at most
  `threshold` in magnitude are lost (hence lossy; exact when none are that
  small). Positions are increasing, which suits
  `DifferenceBetweenIntegersEncodingStage`. Different inputs keep different
  positions, so the stage does not commute with sum.
  """

  ENCODED_VALUES_KEY = 'large_values'
  ENCODED_INDICES_KEY = 'large_indices'
  THRESHOLD_PARAMS_KEY = 'threshold'

  def __init__(self, threshold=1e-8):
    if not tf.is_tensor(threshold):
      if isinstance(threshold, bool) or not isinstance(threshold,
                                                       numbers.Real):
        raise errors.InvalidTypeError(
            'SplitBySmallValueEncodingStage: threshold must be a '
            f'number or a scalar tensor, got {threshold!r}.')
      if not threshold >= 0:
        raise errors.InvalidValueError(
            'SplitBySmallValueEncodingStage: threshold must be '
            f'non-negative, got {threshold!r}.')
    self._threshold = threshold

  @property
  def name(self):
    return 'split_by_small_value'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_VALUES_KEY, self.ENCODED_INDICES_KEY]

  @property
  def commutes_with_sum(self):
    return False

  @property
  def decode_needs_input_shape(self):
    return True

  def get_params(self):
    return {self.THRESHOLD_PARAMS_KEY: self._threshold}, {}

  def encode(self, x, encode_params):
    basic.check_float_input('SplitBySmallValueEncodingStage', x)
    flat = tf.reshape(x, [-1])
    threshold = tf.cast(encode_params[self.THRESHOLD_PARAMS_KEY], x.dtype)
    indices = tf.cast(
        tf.reshape(tf.where(tf.abs(flat) > threshold), [-1]), tf.int32)
    return {
        self.ENCODED_VALUES_KEY: tf.gather(flat, indices),
        self.ENCODED_INDICES_KEY: indices,
    }

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del decode_params, num_summands  # Unused.
    if shape is None:
      raise errors.InvalidValueError(
          'SplitBySmallValueEncodingStage: decode needs the '
          'input shape.')
    values = encoded_tensors[self.ENCODED_VALUES_KEY]
    indices = encoded_tensors[self.ENCODED_INDICES_KEY]
    size = tf.reduce_prod(shape)
    dense = tf.scatter_nd(tf.expand_dims(indices, 1), values,
                          tf.reshape(tf.cast(size, indices.dtype), [1]))
    return tf.reshape(dense, shape)


_INTEGER_DTYPES = (tf.int8, tf.int16, tf.int32, tf.int64, tf.uint8,
                   tf.uint16, tf.uint32, tf.uint64)


@encoding_stage.tf_style_encoding_stage
class DifferenceBetweenIntegersEncodingStage(
    encoding_stage.EncodingStageInterface):
  """Sends the first integer of a vector and then each one's step from the last.

  Increasing positions (from `SplitBySmallValueEncodingStage`) become small
  gaps. Decoding is a cumulative sum: exact, also when a difference wraps
  around (integer arithmetic is modular), and linear, so the stage commutes
  with sum. Takes a rank-1 integer tensor, possibly empty or of unknown
  length.
  """

  ENCODED_VALUES_KEY = 'integer_differences'

  @property
  def name(self):
    return 'difference_between_integers'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_VALUES_KEY]

  @property
  def commutes_with_sum(self):
    return True

  @property
  def decode_needs_input_shape(self):
    return False

  def get_params(self):
    return {}, {}

  def encode(self, x, encode_params):
    del encode_params  # Unused.
    if x.dtype not in _INTEGER_DTYPES:
      raise errors.InvalidTypeError(
          'DifferenceBetweenIntegersEncodingStage: Unsupported '
          f'input type {x.dtype.name}; expected an integer dtype.')
    if x.shape.rank != 1:
      raise errors.InvalidValueError(
          'DifferenceBetweenIntegersEncodingStage: Number of '
          f'dimensions must be 1, got shape {x.shape}.')
    differences = tf.concat([x[:1], x[1:] - x[:-1]], 0)
    return {self.ENCODED_VALUES_KEY: differences}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del decode_params, num_summands, shape  # Unused.
    return tf.cumsum(encoded_tensors[self.ENCODED_VALUES_KEY])
