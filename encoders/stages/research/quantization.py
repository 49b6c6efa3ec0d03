"""Uniform quantization variants: per-channel ranges and subtractive dithering.

Every stage here maps values onto `2**bits` evenly spaced levels between a
minimum and a maximum taken from the data, and sends the level indices as
float32 whole numbers together with the range (`MIN_MAX_VALUES_KEY`, in the
input's dtype, which tells decode what dtype to return).

- Per-channel stages take one range per index of the last axis (the output
  channel of a kernel), so one channel of large values does not coarsen the
  others. A rank-1 input is one value per channel, hence sent exactly.
- The PRNG stages use subtractive dithering: encode adds uniform noise u in
  [0, 1) (in units of one level) and rounds down; decode regenerates the same
  u from the shared seed and a per-encoding nonce and returns
  `level + 1/2 - u`. The error is then uniform in (-1/2, 1/2] of a level and
  independent of the input: unbiased, and half the mean squared error of
  plain stochastic rounding. The nonce (one int32) comes from
  `seeds.encode_seed`, so each encoding, and each client inside a compiled
  form, draws its own noise instead of all clients sharing one pattern.
"""


import tensorflow as tf

from encoders import errors
from encoders.core import encoding_stage
from encoders.core import seeds
from encoders.stages import basic
from encoders.stages import float_levels


def _value_range(x, per_channel):
  """(min, max) of `x` in its dtype: overall, or per index of the last axis.

  An empty input (or channel) gets the range (0, 0), not (inf, -inf).
  """
  if per_channel:
    rank = x.shape.rank
    axes = (list(range(rank - 1)) if rank is not None else
            tf.range(tf.rank(x) - 1))
  else:
    axes = None
  lo = tf.reduce_min(x, axis=axes)
  hi = tf.reduce_max(x, axis=axes)
  ordered = lo <= hi
  return (tf.where(ordered, lo, tf.zeros_like(lo)),
          tf.where(ordered, hi, tf.zeros_like(hi)))


def _levels_per_value(lo, hi, num_levels, dtype):
  """(num_levels - 1) / (hi - lo), or 0 where that is not finite (hi == lo)."""
  ratio = (num_levels - 1) / tf.cast(hi - lo, dtype)
  return tf.where(tf.math.is_finite(ratio), ratio, tf.zeros_like(ratio))


def _quantize(x, lo, hi, bits, noise_fn):
  """float32 levels in [0, 2**bits - 1] of `x`, and its compute dtype.

  `noise_fn(shape, dtype)` gives uniform [0, 1) noise added before rounding
  down (stochastic rounding or dither); None rounds to nearest.
  """
  dtype = basic.wide_dtype(x.dtype)
  num_levels = 2**bits
  scaled = (tf.cast(x, dtype) - tf.cast(lo, dtype)) * _levels_per_value(
      lo, hi, num_levels, dtype)
  if noise_fn is None:
    levels = tf.round(scaled)
  else:
    levels = tf.floor(scaled + noise_fn(tf.shape(x), dtype))
  # Float rounding of the top value may land a hair past the last level.
  levels = tf.clip_by_value(levels, 0.0, num_levels - 1.0)
  return tf.cast(levels, tf.float32)


def _dequantize(levels, min_max, bits, offset=None):
  """`lo + (levels + offset) * step` in the dtype of `min_max`."""
  dtype = basic.wide_dtype(min_max.dtype)
  lo = tf.cast(min_max[0], dtype)
  hi = tf.cast(min_max[1], dtype)
  step = (hi - lo) / (2**bits - 1)
  values = tf.cast(levels, dtype)
  if offset is not None:
    values = values + offset
  return tf.cast(lo + values * step, min_max.dtype)


def _uniform_noise(seed):
  def noise(shape, dtype):
    return tf.random.stateless_uniform(shape, seed=seed, dtype=dtype,
                                       alg=seeds.ALGORITHM)
  return noise


def _dither_nonce(params_seed, x):
  """An int32 scalar naming this encoding's dither, fresh per encoding."""
  return tf.random.stateless_uniform(
      [], seed=seeds.encode_seed(tf.cast(params_seed, tf.int64), x),
      minval=None, maxval=None, dtype=tf.int32, alg=seeds.ALGORITHM)


def _dither_seed(params_seed, nonce):
  return seeds.fold_in(params_seed, nonce)


class _DitheredQuantization:
  """Encode and decode shared by the two subtractive-dither stages."""

  ENCODED_VALUES_KEY = 'quantized_values'
  MIN_MAX_VALUES_KEY = 'min_max'
  DITHER_NONCE_KEY = 'dither_nonce'
  SEED_PARAMS_KEY = 'seed'

  _PER_CHANNEL = False

  def __init__(self, bits=8, seed=None):
    self._bits = float_levels.check_bits(type(self).__name__, bits)
    self._seed = seeds.check_seed(type(self).__name__, seed)

  @property
  def bits(self):
    return self._bits

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
    params = {self.SEED_PARAMS_KEY: seeds.params_seed(self._seed)}
    return params, dict(params)

  def encode(self, x, encode_params):
    basic.check_float_input(type(self).__name__, x)
    params_seed = encode_params[self.SEED_PARAMS_KEY]
    nonce = _dither_nonce(params_seed, x)
    lo, hi = _value_range(x, self._PER_CHANNEL)
    levels = _quantize(x, lo, hi, self._bits,
                       _uniform_noise(_dither_seed(params_seed, nonce)))
    return {
        self.ENCODED_VALUES_KEY: levels,
        self.MIN_MAX_VALUES_KEY: tf.stack([lo, hi]),
        self.DITHER_NONCE_KEY: nonce,
    }

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del num_summands, shape  # Unused.
    levels = encoded_tensors[self.ENCODED_VALUES_KEY]
    min_max = encoded_tensors[self.MIN_MAX_VALUES_KEY]
    seed = _dither_seed(decode_params[self.SEED_PARAMS_KEY],
                        encoded_tensors[self.DITHER_NONCE_KEY])
    dither = _uniform_noise(seed)(tf.shape(levels),
                                  basic.wide_dtype(min_max.dtype))
    return _dequantize(levels, min_max, self._bits, offset=0.5 - dither)


@encoding_stage.tf_style_encoding_stage
class PRNGUniformQuantizationEncodingStage(
    _DitheredQuantization, encoding_stage.EncodingStageInterface):
  """Uniform quantization over the input's [min, max] with subtractive dither.

  Decoding is unbiased with error at most half a level,
  (max - min) / (2 * (2**bits - 1)); see the module docstring. `seed` (a
  Python int, or None for a fresh one per `get_params`) seeds the dither.
  """

  @property
  def name(self):
    return 'prng_uniform_quantization'


@encoding_stage.tf_style_encoding_stage
class PerChannelPRNGUniformQuantizationEncodingStage(
    _DitheredQuantization, encoding_stage.EncodingStageInterface):
  """Like `PRNGUniformQuantizationEncodingStage`, one range per channel.

  Channels index the last axis; the range tensor has shape [2, channels].
  """

  _PER_CHANNEL = True

  @property
  def name(self):
    return 'per_channel_prng_uniform_quantization'


@encoding_stage.tf_style_encoding_stage
class PerChannelUniformQuantizationEncodingStage(
    encoding_stage.EncodingStageInterface):
  """Uniform quantization with one [min, max] range per channel (last axis).

  `stochastic=True` rounds up or down at random with the probabilities that
  make decoding unbiased (error below one level); `stochastic=False` rounds to
  nearest (error at most half a level, biased). The noise is fresh for every
  encoding (`seeds.encode_seed`), so decode needs no seed.
  """

  ENCODED_VALUES_KEY = 'quantized_values'
  MIN_MAX_VALUES_KEY = 'min_max'
  SEED_PARAMS_KEY = 'seed'

  def __init__(self, bits=8, stochastic=True, seed=None):
    name = 'PerChannelUniformQuantizationEncodingStage'
    self._bits = float_levels.check_bits(name, bits)
    if not isinstance(stochastic, bool):
      raise errors.InvalidTypeError(
          f'{name}: stochastic must be a Python bool (it fixes '
          f'the graph), got {stochastic!r}.')
    self._stochastic = stochastic
    self._seed = seeds.check_seed(name, seed)

  @property
  def bits(self):
    return self._bits

  @property
  def stochastic(self):
    return self._stochastic

  @property
  def name(self):
    return 'per_channel_uniform_quantization'

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
    if not self._stochastic:
      return {}, {}
    return {self.SEED_PARAMS_KEY: seeds.params_seed(self._seed)}, {}

  def encode(self, x, encode_params):
    basic.check_float_input('PerChannelUniformQuantizationEncodingStage', x)
    noise_fn = None
    if self._stochastic:
      noise_fn = _uniform_noise(
          seeds.encode_seed(
              tf.cast(encode_params[self.SEED_PARAMS_KEY], tf.int64), x))
    lo, hi = _value_range(x, per_channel=True)
    return {
        self.ENCODED_VALUES_KEY: _quantize(x, lo, hi, self._bits, noise_fn),
        self.MIN_MAX_VALUES_KEY: tf.stack([lo, hi]),
    }

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del decode_params, num_summands, shape  # Unused.
    return _dequantize(encoded_tensors[self.ENCODED_VALUES_KEY],
                       encoded_tensors[self.MIN_MAX_VALUES_KEY], self._bits)
