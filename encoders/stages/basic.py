"""Basic stages: identity, flatten, a narrowing float cast and clipping.

Also the dtype tag: a zero-element tensor of the input's dtype that a stage
emits when its other outputs do not carry that dtype (integer levels, a
narrower float). It costs no bits on the wire, survives separate encode and
decode traces and sums across clients, and tells `decode` what to return.
"""

import numbers

import numpy as np
import tensorflow as tf

from encoders import errors
from encoders.core import encoding_stage

DTYPE_TAG_KEY = 'dtype_tag'

FLOAT_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)


def dtype_tag(dtype):
  """An empty tensor of `dtype`: names the dtype to `decode`, costs no bits."""
  return tf.zeros([0], dtype=dtype)


def tagged_dtype(tag):
  """The dtype a tag made by `dtype_tag` names."""
  return tf.convert_to_tensor(tag).dtype


def check_float_input(stage_name, x):
  """Raises a `TypeError` naming the stage unless `x` has a float dtype."""
  if x.dtype not in FLOAT_DTYPES:
    raise errors.InvalidTypeError(
        f'{stage_name}: input dtype {x.dtype.name} is not supported; expected '
        'float16, bfloat16, float32 or float64.')


def _check_number(stage_name, arg_name, value):
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    raise errors.InvalidTypeError(
        f'{stage_name}: {arg_name} must be a number, got '
        f'{value!r}.')
  if np.isnan(value):
    raise errors.InvalidValueError(f'{stage_name}: {arg_name} must not be NaN.')


@encoding_stage.tf_style_encoding_stage
class IdentityEncodingStage(encoding_stage.EncodingStageInterface):
  """Sends the input unchanged: a root for trees, or a baseline."""

  ENCODED_VALUES_KEY = 'identity_values'

  @property
  def name(self):
    return 'identity'

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
    return {self.ENCODED_VALUES_KEY: tf.identity(x)}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del decode_params, num_summands, shape  # Unused.
    return tf.identity(encoded_tensors[self.ENCODED_VALUES_KEY])


@encoding_stage.tf_style_encoding_stage
class FlattenEncodingStage(encoding_stage.EncodingStageInterface):
  """Reshapes to rank 1, so rank-1 stages (bitpacking) apply to any tensor.

  A scalar becomes a vector of one element; decode restores the input shape,
  static or known only at run time.
  """

  ENCODED_VALUES_KEY = 'flattened_values'

  @property
  def name(self):
    return 'flatten'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_VALUES_KEY]

  @property
  def commutes_with_sum(self):
    return True

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
    return {self.ENCODED_VALUES_KEY: tf.reshape(x, [-1])}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del decode_params, num_summands  # Unused.
    if shape is None:
      raise errors.InvalidValueError(
          'FlattenEncodingStage: decode needs the input shape.')
    return tf.reshape(encoded_tensors[self.ENCODED_VALUES_KEY], shape)


@encoding_stage.tf_style_encoding_stage
class CastEncodingStage(encoding_stage.EncodingStageInterface):
  """Casts floats to a narrower float dtype; decode casts back.

  The input dtype travels as a dtype tag, so decode returns it without being
  told. An input already of `dtype` passes unchanged; an input no wider than
  `dtype` (float16 to bfloat16, float32 to float32 of another kind) is an
  error, since the cast would save nothing. Rounding makes the stage lossy, and
  a sum of rounded values in the narrow dtype differs from the sum of the
  decoded values, so it does not commute with sum.
  """

  ENCODED_VALUES_KEY = 'cast_values'

  def __init__(self, dtype=tf.float16):
    dtype = tf.as_dtype(dtype)
    if dtype not in FLOAT_DTYPES:
      raise errors.InvalidValueError(
          f'CastEncodingStage: dtype must be float16, bfloat16, float32 or '
          f'float64, got {dtype.name}.')
    self._dtype = dtype

  @property
  def dtype(self):
    return self._dtype

  @property
  def name(self):
    return 'cast'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_VALUES_KEY]

  @property
  def commutes_with_sum(self):
    return False

  @property
  def decode_needs_input_shape(self):
    return False

  def get_params(self):
    return {}, {}

  def encode(self, x, encode_params):
    del encode_params  # Unused.
    check_float_input('CastEncodingStage', x)
    if x.dtype != self._dtype and x.dtype.size <= self._dtype.size:
      raise errors.InvalidValueError(
          f'CastEncodingStage: casting {x.dtype.name} to {self._dtype.name} '
          'does not narrow the input; use a narrower dtype.')
    return {
        self.ENCODED_VALUES_KEY: tf.cast(x, self._dtype),
        DTYPE_TAG_KEY: dtype_tag(x.dtype),
    }

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del decode_params, num_summands, shape  # Unused.
    return tf.cast(encoded_tensors[self.ENCODED_VALUES_KEY],
                   tagged_dtype(encoded_tensors[DTYPE_TAG_KEY]))


def wide_dtype(dtype):
  """float64 for float64, else float32: half precision overflows a norm and
  loses bits over the long sums of a transform."""
  return tf.float64 if dtype == tf.float64 else tf.float32


def global_l2_norm(values):
  """The L2 norm of a structure's tensors taken as one vector: float64 if
  one of them is, else float32 (half precision overflows a norm)."""
  leaves = [tf.convert_to_tensor(x) for x in tf.nest.flatten(values)]
  norm_dtype = (tf.float64 if any(x.dtype == tf.float64 for x in leaves)
                else tf.float32)
  if not leaves:
    return tf.constant(0, norm_dtype)
  # l2_loss is sum(x**2) / 2 in a single pass over memory.
  return tf.sqrt(tf.add_n([2 * tf.nn.l2_loss(tf.cast(x, norm_dtype))
                           for x in leaves]))


def clip_by_global_l2_norm(values, clip_norm):
  """`(values scaled to global L2 norm <= clip_norm, their norm)`: the one
  clipping every clip of the project uses (the clipping stages, TFF's
  clipping and DP factories, the secure DP mean). Each tensor keeps its
  dtype; the scaling is done in the norm's dtype. A zero structure stays
  zero (the factor is clip / max(norm, clip), never 0/0)."""
  norm = global_l2_norm(values)
  factor = tf.cast(clip_norm, norm.dtype) / tf.maximum(
      norm, tf.cast(clip_norm, norm.dtype))
  clipped = tf.nest.map_structure(
      lambda x: tf.cast(tf.cast(x, norm.dtype) * factor, x.dtype), values)
  return clipped, norm


def clip_by_l2_norm(x, clip_norm):
  """`(x scaled to L2 norm <= clip_norm, norm of x)`: one tensor's
  `clip_by_global_l2_norm`."""
  return clip_by_global_l2_norm(tf.convert_to_tensor(x), clip_norm)


@encoding_stage.tf_style_encoding_stage
class ClipByNormEncodingStage(encoding_stage.EncodingStageInterface):
  """Scales the input down to L2 norm `clip_norm` when it is longer.

  Bounds a client's contribution (differential privacy, robustness). The
  clipping is applied by encode and not undone: decode is the identity, hence
  the stage commutes with sum.
  """

  ENCODED_VALUES_KEY = 'clipped_values'
  CLIP_NORM_PARAMS_KEY = 'clip_norm'

  def __init__(self, clip_norm):
    if not tf.is_tensor(clip_norm):
      _check_number('ClipByNormEncodingStage', 'clip_norm', clip_norm)
      if not 0 < clip_norm < np.inf:
        raise errors.InvalidValueError(
            'ClipByNormEncodingStage: clip_norm must be positive '
            f'and finite, got {clip_norm}.')
    self._clip_norm = clip_norm

  @property
  def name(self):
    return 'clip_by_norm'

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
    return {self.CLIP_NORM_PARAMS_KEY: self._clip_norm}, {}

  def encode(self, x, encode_params):
    check_float_input('ClipByNormEncodingStage', x)
    clipped, _ = clip_by_l2_norm(x, encode_params[self.CLIP_NORM_PARAMS_KEY])
    return {self.ENCODED_VALUES_KEY: clipped}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del decode_params, num_summands, shape  # Unused.
    return tf.identity(encoded_tensors[self.ENCODED_VALUES_KEY])


@encoding_stage.tf_style_encoding_stage
class ClipByValueEncodingStage(encoding_stage.EncodingStageInterface):
  """Clips values to `[clip_value_min, clip_value_max]`; decode is identity."""

  ENCODED_VALUES_KEY = 'clipped_values'
  MIN_PARAMS_KEY = 'clip_value_min'
  MAX_PARAMS_KEY = 'clip_value_max'

  def __init__(self, clip_value_min, clip_value_max):
    for arg_name, value in (('clip_value_min', clip_value_min),
                            ('clip_value_max', clip_value_max)):
      if not tf.is_tensor(value):
        _check_number('ClipByValueEncodingStage', arg_name, value)
    if (not tf.is_tensor(clip_value_min) and not tf.is_tensor(clip_value_max)
        and clip_value_min > clip_value_max):
      raise errors.InvalidValueError(
          'ClipByValueEncodingStage: clip_value_min must not exceed '
          f'clip_value_max, got {clip_value_min} > {clip_value_max}.')
    self._clip_value_min = clip_value_min
    self._clip_value_max = clip_value_max

  @property
  def name(self):
    return 'clip_by_value'

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
    return {self.MIN_PARAMS_KEY: self._clip_value_min,
            self.MAX_PARAMS_KEY: self._clip_value_max}, {}

  def encode(self, x, encode_params):
    check_float_input('ClipByValueEncodingStage', x)
    # The raw op clips in one pass; tf.clip_by_value takes two.
    clipped = tf.raw_ops.ClipByValue(
        t=x,
        clip_value_min=tf.cast(encode_params[self.MIN_PARAMS_KEY], x.dtype),
        clip_value_max=tf.cast(encode_params[self.MAX_PARAMS_KEY], x.dtype))
    return {self.ENCODED_VALUES_KEY: clipped}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del decode_params, num_summands, shape  # Unused.
    return tf.identity(encoded_tensors[self.ENCODED_VALUES_KEY])
