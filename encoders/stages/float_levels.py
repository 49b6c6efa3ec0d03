"""tensor_encoding's quantization and bitpacking: levels are whole-valued floats.

`UniformQuantizationEncodingStage` sends its levels as floats of the input's
precision (float32, or float64 for float64 input), so any float stage can follow
it, and `BitpackingEncodingStage` packs such float levels. They share the
arithmetic of `quantization.py` (one fused pass, 16-bit dither) and its dense
packing: `bits` bits per value in 32-bit words (64-bit for float64 levels), so
8-bit levels cost 8.0 bits, not the 9.14 of packing into 28 of every 32 bits.

The `Integer*` stages in `quantization.py` send int32 levels instead, whose sums
over any number of clients stay exact.
"""

import numpy as np
import tensorflow as tf

from encoders import errors
from encoders.core import encoding_stage
from encoders.core import seeds
from encoders.stages import basic
from encoders.stages import quantization

_NAME = 'UniformQuantizationEncodingStage'
# The precision levels travel in, per input dtype; half precision would round
# levels above 2**11 (float16) or 2**8 (bfloat16), so it travels as float32
# with a tag naming the dtype to decode to.
_LEVELS_DTYPE = {tf.float32: tf.float32, tf.float64: tf.float64,
                 tf.float16: tf.float32, tf.bfloat16: tf.float32}
# Packed words per level dtype: the word's width tells decode the dtype back.
_WORD_DTYPE = {tf.float32: tf.int32, tf.float64: tf.int64}
_LEVELS_OF_WORD = {tf.int32: tf.float32, tf.int64: tf.float64}


def check_bits(name, bits):
  if tf.is_tensor(bits) or isinstance(bits, tf.Variable):
    raise errors.InvalidTypeError(
        f'{name}: bits cannot be a TensorFlow value; pass a '
        f'Python int, got {bits!r}.')
  if (isinstance(bits, bool) or not isinstance(bits, (int, np.integer))
      or not 1 <= bits <= 16):
    raise errors.InvalidValueError(
        f'{name}: bits must be an integer between 1 and 16, got '
        f'{bits!r}.')
  return int(bits)


def _check_min_max(min_max):
  """None, a Python pair (lo < hi), or a float Tensor of shape (2)."""
  if min_max is None:
    return None
  if tf.is_tensor(min_max) or isinstance(min_max, tf.Variable):
    if min_max.shape.as_list() != [2] or not min_max.dtype.is_floating:
      raise errors.InvalidValueError(
          f'{_NAME}: a Tensor min_max must be of shape (2) and a '
          f'float dtype, got {min_max!r}.')
    return min_max
  if not isinstance(min_max, (list, tuple, np.ndarray)) or len(min_max) != 2:
    raise errors.InvalidValueError(
        f'{_NAME}: min_max must be None, a Tensor of shape (2) or '
        f'a list with two elements, got {min_max!r}.')
  lo, hi = (float(v) for v in min_max)
  if not lo < hi:
    raise errors.InvalidValueError(
        f'{_NAME}: the first element of min_max must be smaller '
        f'than the second, got {min_max!r}.')
  return [lo, hi]


@encoding_stage.tf_style_encoding_stage
class UniformQuantizationEncodingStage(encoding_stage.EncodingStageInterface):
  """Quantizes to `2**bits` evenly spaced levels, sent as whole-valued floats.

  The range is the input's own `[min, max]` (sent as `min_max`), or a fixed
  `min_max` (a Python pair or a Tensor of shape (2)) known to both sides, into
  which values are clipped; with a fixed range the stage commutes with sum.
  `stochastic=True` rounds at random, unbiased inside the range, with fresh
  noise on every encode (pure inside a form: `seeds.encode_seed`);
  `stochastic=False` rounds to nearest.
  """

  ENCODED_VALUES_KEY = 'quantized_values'
  MIN_MAX_VALUES_KEY = 'min_max'
  MIN_MAX_PARAMS_KEY = 'min_max'
  SEED_PARAMS_KEY = 'seed'

  def __init__(self, bits=8, min_max=None, stochastic=True, seed=None):
    self._bits = check_bits(_NAME, bits)
    self._min_max = _check_min_max(min_max)
    if not isinstance(stochastic, bool):
      raise errors.InvalidTypeError(
          f'{_NAME}: stochastic must be a Python bool, got '
          f'{stochastic!r}.')
    self._stochastic = stochastic
    self._seed = seeds.check_seed(_NAME, seed)

  @property
  def bits(self):
    return self._bits

  @property
  def min_max(self):
    return self._min_max

  @property
  def stochastic(self):
    return self._stochastic

  @property
  def name(self):
    return 'uniform_quantization'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_VALUES_KEY]

  @property
  def commutes_with_sum(self):
    return self._min_max is not None

  @property
  def decode_needs_input_shape(self):
    return False

  @property
  def xla_compatible(self):
    return True

  def get_params(self):
    encode_params, decode_params = {}, {}
    if self._min_max is not None:
      min_max = tf.cast(self._min_max, tf.float32)
      encode_params[self.MIN_MAX_PARAMS_KEY] = min_max
      decode_params[self.MIN_MAX_PARAMS_KEY] = min_max
    if self._stochastic:
      encode_params[self.SEED_PARAMS_KEY] = seeds.params_seed(self._seed)
    return encode_params, decode_params

  def encode(self, x, encode_params):
    basic.check_float_input(_NAME, x)
    values = tf.cast(x, tf.float32)
    levels_dtype = _LEVELS_DTYPE[x.dtype]
    encoded = {}
    if self._min_max is None:
      lo, hi = quantization.range_of(values)
      encoded[self.MIN_MAX_VALUES_KEY] = tf.cast(tf.stack([lo, hi]),
                                                 levels_dtype)
    else:
      lo, hi = tf.unstack(encode_params[self.MIN_MAX_PARAMS_KEY])
      values = tf.raw_ops.ClipByValue(t=values, clip_value_min=lo,
                                      clip_value_max=hi)
    seed = None
    if self._stochastic:
      seed = seeds.encode_seed(encode_params[self.SEED_PARAMS_KEY], x)
    levels = quantization.quantize(values, lo, self._step(lo, hi), seed,
                                    2**self._bits - 1)
    encoded[self.ENCODED_VALUES_KEY] = tf.cast(levels, levels_dtype)
    if levels_dtype != x.dtype:
      encoded[basic.DTYPE_TAG_KEY] = basic.dtype_tag(x.dtype)
    return encoded

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del shape  # Unused.
    levels = encoded_tensors[self.ENCODED_VALUES_KEY]
    if self._min_max is None:
      lo, hi = tf.unstack(tf.cast(encoded_tensors[self.MIN_MAX_VALUES_KEY],
                                  tf.float32))
      num_summands = None  # Never summed: the stage does not commute.
    else:
      lo, hi = tf.unstack(decode_params[self.MIN_MAX_PARAMS_KEY])
    dtype = levels.dtype
    if basic.DTYPE_TAG_KEY in encoded_tensors:
      dtype = basic.tagged_dtype(encoded_tensors[basic.DTYPE_TAG_KEY])
    return quantization.dequantize(levels, lo, hi, 2**self._bits - 1,
                                   num_summands, dtype)

  def _step(self, lo, hi):
    return quantization.level_step(hi - lo, 2**self._bits - 1)


@encoding_stage.tf_style_encoding_stage
class BitpackingEncodingStage(encoding_stage.EncodingStageInterface):
  """Packs whole-valued float levels in `[0, 2**input_bits)` densely into words.

  Any shape (decode needs it); float32 levels pack into int32 words, float64
  levels into int64, as a `[words, 1]` tensor, least significant bits first.
  Levels outside the range are not checked and decode to other values.
  """

  ENCODED_VALUES_KEY = 'bitpacked_values'

  def __init__(self, input_bits):
    self._bits = check_bits('BitpackingEncodingStage', input_bits)
    self._plan = quantization.packing_plan(self._bits)

  @property
  def input_bits(self):
    return self._bits

  @property
  def name(self):
    return 'bitpacking'

  @property
  def compressible_tensors_keys(self):
    return []

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
    if x.dtype not in _WORD_DTYPE:
      raise errors.InvalidTypeError(
          'BitpackingEncodingStage: Unsupported packing type '
          f'{x.dtype.name}; the levels must be float32 or float64.')
    word_dtype = _WORD_DTYPE[x.dtype]
    packed = quantization.pack(self._plan,
                               tf.cast(tf.reshape(x, [-1]), tf.int32))
    # uint16 (16 bits) -> its two bytes, least significant first.
    packed = tf.reshape(tf.bitcast(packed, tf.uint8), [-1])
    word_bytes = word_dtype.size
    packed = tf.pad(packed, [[0, -tf.size(packed) % word_bytes]])
    words = tf.bitcast(tf.reshape(packed, [-1, word_bytes]), word_dtype)
    return {self.ENCODED_VALUES_KEY: tf.reshape(words, [-1, 1])}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del decode_params, num_summands  # Unused.
    if shape is None:
      raise errors.InvalidValueError(
          'BitpackingEncodingStage: decode needs the input shape.')
    words = encoded_tensors[self.ENCODED_VALUES_KEY]
    packed = tf.reshape(tf.bitcast(tf.reshape(words, [-1]), tf.uint8), [-1])
    size = tf.reduce_prod(shape)
    if self._bits == 16:
      packed = tf.bitcast(tf.reshape(packed[:2 * size], [-1, 2]), tf.uint16)
    else:
      packed = packed[:(size * self._bits + 7) // 8]
    levels = quantization.unpack(self._plan, packed, size)
    return tf.reshape(tf.cast(levels, _LEVELS_OF_WORD[words.dtype]), shape)
