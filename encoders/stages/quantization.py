"""Uniform quantization to integer levels, and dense bitpacking of those levels.

Quantization emits int32 levels, so sums over clients are exact and do not
depend on their order; `BitpackingEncodingStage` then packs each level into
exactly `bits` bits for the wire. All arithmetic runs in float32 (float16,
bfloat16 and float64 inputs are cast on the way in and back on the way out).

Stochastic rounding adds a 16-bit dither per value, hashed from the value's
index and a per-client key inside one XLA-fused pass (see `_dithered_levels`):
level = floor(v + (k + 1/2) / 2**16), k uniform in [0, 2**16), is
unbiased up to 2**-17 of a level, no more than float32's own rounding of the
scaled value at 8 bits (and less than it at more bits).
"""

import math

import numpy as np
import tensorflow as tf

from encoders import errors
from encoders.core import encoding_stage
from encoders.core import seeds
from encoders.stages import basic

_DITHER_UNITS = 2.0**16
# A dither of k + 1/2 units; the half unit is folded into the range minimum.
_HALF_DITHER = 0.5 / _DITHER_UNITS
# AdaptiveRangeQuantizationEncodingStage's range never shrinks below this, so
# it never reaches 0 and 2**16 / step stays finite in float32 at 16 bits.
_MIN_ADAPTIVE_RANGE = 1e-20


def _check_bits(stage_name, arg_name, bits):
  if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)):
    raise errors.InvalidTypeError(
        f'{stage_name}: {arg_name} must be an int, got {bits!r}.')
  if not 1 <= bits <= 16:
    raise errors.InvalidValueError(
        f'{stage_name}: {arg_name} must be in [1, 16], got '
        f'{bits}.')
  return int(bits)


def _is_number(value):
  return (isinstance(value, (int, float, np.number)) and
          not isinstance(value, bool))


def _finite_reciprocal(numerator, denominator):
  """numerator / denominator, or 0 where that is not finite (a zero range)."""
  ratio = numerator / denominator
  return tf.where(tf.math.is_finite(ratio), ratio, tf.zeros_like(ratio))


def _hash32(v):
  """A 32-bit integer mixing function (Wellons' lowbias32): counter -> noise."""
  v = tf.bitwise.bitwise_xor(v, tf.bitwise.right_shift(v, 16))
  v = v * tf.constant(0x7feb352d, tf.uint32)
  v = tf.bitwise.bitwise_xor(v, tf.bitwise.right_shift(v, 15))
  v = v * tf.constant(0x846ca68b, tf.uint32)
  return tf.bitwise.bitwise_xor(v, tf.bitwise.right_shift(v, 16))


@tf.function(jit_compile=True, autograph=False)
def _dithered_levels(x, centred_lo, scale, key, top):
  """min(floor((x - centred_lo) * scale + dither) / 2**16, top), in one fused pass.

  The 16-bit dither of each value is the top half of a hash of its index and
  the client's key: counter-based noise that XLA fuses with the arithmetic, so
  no random buffer is written or read (drawing it with Philox cost as much as
  all the rest of encoding). The clamp only catches float32 rounding of the
  top value plus the largest dither.
  """
  index = tf.reshape(tf.range(tf.size(x)), tf.shape(x))
  noise = _hash32(tf.bitwise.bitwise_xor(tf.cast(index, tf.uint32), key))
  dither = tf.cast(tf.bitwise.right_shift(noise, 16), tf.float32)
  level = ((x - centred_lo) * scale + dither) * (1.0 / _DITHER_UNITS)
  return tf.cast(tf.minimum(level, top), tf.int32)


def _dither_key(seed):
  """A well-mixed 32-bit key from a [2] int64 seed: one Philox draw."""
  return tf.random.stateless_uniform([], seed, minval=None, maxval=None,
                                     dtype=tf.uint32, alg=seeds.ALGORITHM)


def level_step(span, levels):
  """The value between adjacent levels when `levels + 1` of them cover `span`."""
  return span / levels


def quantize(x, lo, step, seed, levels):
  """int32 levels in [0, levels] of float32 `x` in [lo, lo + levels * step].

  Rounds stochastically when `seed` is given, else to nearest. Either way the
  quantity cast to int32 is non-negative, so the cast floors it; rounding to
  nearest stays below `levels + 1/2`, so only stochastic rounding needs the
  clamp at the top.
  """
  if seed is None:
    scale = _finite_reciprocal(1.0, step)
    centred_lo = lo - 0.5 * step
    return tf.cast((x - centred_lo) * scale, tf.int32)
  scale = _finite_reciprocal(_DITHER_UNITS, step)
  centred_lo = lo - _HALF_DITHER * step
  return _dithered_levels(x, centred_lo, scale, _dither_key(seed),
                          tf.constant(levels, tf.float32))


def dequantize(levels, lo, hi, top, num_summands, dtype):
  """The value of `levels` in [0, top] on [lo, hi] (or of a sum of n) as `dtype`.

  With t = level / top the value is `lo * (1 - t) + hi * t`, so the end levels
  decode to exactly lo and hi; a sum of n clients' levels, with t their sum /
  top, decodes as `lo * (n - t) + hi * t`.
  """
  count = (tf.constant(1.0) if num_summands is None
           else tf.cast(num_summands, tf.float32))
  return _levels_to_values(levels, lo, hi, tf.constant(1.0 / top), count,
                           dtype)


@tf.function(jit_compile=True, autograph=False)
def _levels_to_values(levels, lo, hi, inverse_top, count, dtype):
  """`lo * (count - t) + hi * t` as `dtype`, fused into one pass by XLA."""
  t = tf.cast(levels, tf.float32) * inverse_top
  return tf.cast(lo * (count - t) + hi * t, dtype)


@tf.function(jit_compile=True, autograph=False)
def range_of(x):
  """(min, max) of float32 `x`, (0, 0) when empty: one fused pass under XLA."""
  nonempty = tf.size(x) > 0
  lo = tf.where(nonempty, tf.reduce_min(x), 0.0)
  hi = tf.where(nonempty, tf.reduce_max(x), 0.0)
  return lo, hi


@encoding_stage.tf_style_encoding_stage
class IntegerUniformQuantizationEncodingStage(
    encoding_stage.EncodingStageInterface):
  """Quantizes to `2**bits` evenly spaced levels, sent as int32 level indices.

  Integer levels make sums over any number of clients exact and independent of
  their order; `IntegerBitpackingEncodingStage` packs them. tensor_encoding's
  `UniformQuantizationEncodingStage` (float levels) is the other class here.

  The range is the input's own `[min, max]` (two float32 scalars on the wire),
  or a fixed `min_max=(lo, hi)` known to both sides, into which values are
  clipped and which costs nothing to send. With a fixed range every client
  uses the same levels, so the stage commutes with sum: a sum of n clients'
  levels decodes as `sum * step + n * lo`. With a data range it does not.

  `stochastic=True` rounds up or down at random so that the decoded value is
  unbiased for values inside the range: every encode draws fresh noise when
  run directly, and inside a form each client's noise follows from its input,
  the round and `seed` (`seeds.encode_seed`). `stochastic=False` rounds to
  nearest. Inputs must be finite.
  """

  ENCODED_VALUES_KEY = 'quantized_values'
  MIN_VALUES_KEY = 'min'
  MAX_VALUES_KEY = 'max'
  SEED_PARAMS_KEY = 'seed'
  MIN_PARAMS_KEY = 'min'
  MAX_PARAMS_KEY = 'max'

  def __init__(self, bits=8, min_max=None, stochastic=True, seed=None):
    name = 'IntegerUniformQuantizationEncodingStage'
    self._bits = _check_bits(name, 'bits', bits)
    if min_max is not None:
      try:
        lo, hi = (float(v) for v in min_max)
      except (TypeError, ValueError):
        raise errors.InvalidTypeError(
            f'{name}: min_max must be a pair of numbers (lo, hi), '
            f'got {min_max!r}.') from None
      if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise errors.InvalidValueError(
            f'{name}: min_max must be finite with lo < hi, got '
            f'{min_max!r}.')
      min_max = (lo, hi)
    self._min_max = min_max
    self._stochastic = bool(stochastic)
    self._seed = seeds.check_seed(name, seed)

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
    return 'integer_uniform_quantization'

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
      for params in (encode_params, decode_params):
        params[self.MIN_PARAMS_KEY] = self._min_max[0]
        params[self.MAX_PARAMS_KEY] = self._min_max[1]
    if self._stochastic:
      encode_params[self.SEED_PARAMS_KEY] = seeds.params_seed(self._seed)
    return encode_params, decode_params

  def encode(self, x, encode_params):
    basic.check_float_input('IntegerUniformQuantizationEncodingStage', x)
    values = tf.cast(x, tf.float32)
    encoded = {basic.DTYPE_TAG_KEY: basic.dtype_tag(x.dtype)}
    if self._min_max is None:
      lo, hi = range_of(values)
      encoded[self.MIN_VALUES_KEY] = lo
      encoded[self.MAX_VALUES_KEY] = hi
    else:
      lo = tf.cast(encode_params[self.MIN_PARAMS_KEY], tf.float32)
      hi = tf.cast(encode_params[self.MAX_PARAMS_KEY], tf.float32)
      values = tf.raw_ops.ClipByValue(t=values, clip_value_min=lo,
                                      clip_value_max=hi)
    seed = None
    if self._stochastic:
      seed = seeds.encode_seed(encode_params[self.SEED_PARAMS_KEY], x)
    encoded[self.ENCODED_VALUES_KEY] = quantize(
        values, lo, self._step(lo, hi), seed, 2**self._bits - 1)
    return encoded

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del shape  # Unused.
    if self._min_max is None:
      lo = encoded_tensors[self.MIN_VALUES_KEY]
      hi = encoded_tensors[self.MAX_VALUES_KEY]
      num_summands = None  # Never summed: the stage does not commute.
    else:
      lo = tf.cast(decode_params[self.MIN_PARAMS_KEY], tf.float32)
      hi = tf.cast(decode_params[self.MAX_PARAMS_KEY], tf.float32)
    return dequantize(encoded_tensors[self.ENCODED_VALUES_KEY], lo, hi,
                      2**self._bits - 1, num_summands,
                      basic.tagged_dtype(encoded_tensors[basic.DTYPE_TAG_KEY]))

  def _step(self, lo, hi):
    return level_step(hi - lo, 2**self._bits - 1)


@encoding_stage.tf_style_adaptive_encoding_stage
class AdaptiveRangeQuantizationEncodingStage(
    encoding_stage.AdaptiveEncodingStageInterface):
  """Uniform quantization on a symmetric range `[-r, r]` that follows the data.

  Every client quantizes with the same `r`, taken from the state, so nothing
  but the int32 levels is sent and the server can sum exact integer levels and
  decode once: the stage commutes with sum. Values outside `[-r, r]` are
  clipped.

  Each client reports its max |x|, aggregated with MAX: the smallest range
  that would have clipped no client, so when the data settles clipping (the
  only source of bias) stops. An L2-norm average would give a finer step but
  keep clipping the largest values every round. `update_state` moves `r`
  toward the report: `r <- decay * r + (1 - decay) * reported`, never below
  1e-20, so `r` never reaches 0.
  """

  ENCODED_VALUES_KEY = 'quantized_values'
  RANGE_STATE_KEY = 'range'
  MAX_ABS_STATE_UPDATE_KEY = 'max_abs'
  RANGE_PARAMS_KEY = 'range'
  SEED_PARAMS_KEY = 'seed'

  def __init__(self, bits=8, initial_range=1.0, decay=0.5, stochastic=True,
               seed=None):
    name = 'AdaptiveRangeQuantizationEncodingStage'
    self._bits = _check_bits(name, 'bits', bits)
    if not (_is_number(initial_range) and 0 < initial_range < np.inf):
      raise errors.InvalidValueError(
          f'{name}: initial_range must be a positive finite '
          f'number, got {initial_range!r}.')
    if not (_is_number(decay) and 0 <= decay < 1):
      raise errors.InvalidValueError(
          f'{name}: decay must be in [0, 1), got {decay!r}.')
    self._initial_range = float(initial_range)
    self._decay = float(decay)
    self._stochastic = bool(stochastic)
    self._seed = seeds.check_seed(name, seed)

  @property
  def bits(self):
    return self._bits

  @property
  def name(self):
    return 'adaptive_range_quantization'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_VALUES_KEY]

  @property
  def commutes_with_sum(self):
    return True

  @property
  def decode_needs_input_shape(self):
    return False

  @property
  def xla_compatible(self):
    return True

  @property
  def state_update_aggregation_modes(self):
    return {
        self.MAX_ABS_STATE_UPDATE_KEY: encoding_stage.StateAggregationMode.MAX
    }

  def initial_state(self):
    return {self.RANGE_STATE_KEY: tf.constant(self._initial_range, tf.float32)}

  def update_state(self, state, state_update_tensors):
    reported = tf.cast(state_update_tensors[self.MAX_ABS_STATE_UPDATE_KEY],
                       tf.float32)
    previous = tf.cast(state[self.RANGE_STATE_KEY], tf.float32)
    # No clients report -inf (the MAX identity); count that as 0.
    blended = (self._decay * previous +
               (1 - self._decay) * tf.maximum(reported, 0.0))
    return {self.RANGE_STATE_KEY: tf.maximum(blended, _MIN_ADAPTIVE_RANGE)}

  def get_params(self, state):
    value_range = state[self.RANGE_STATE_KEY]
    encode_params = {self.RANGE_PARAMS_KEY: value_range}
    if self._stochastic:
      encode_params[self.SEED_PARAMS_KEY] = seeds.params_seed(self._seed)
    return encode_params, {self.RANGE_PARAMS_KEY: value_range}

  def encode(self, x, encode_params):
    basic.check_float_input('AdaptiveRangeQuantizationEncodingStage', x)
    values = tf.cast(x, tf.float32)
    hi = tf.cast(encode_params[self.RANGE_PARAMS_KEY], tf.float32)
    # Two read-only reductions; max(|x|) would first write |x|.
    data_lo, data_hi = range_of(values)
    max_abs = tf.maximum(data_hi, -data_lo)
    values = tf.raw_ops.ClipByValue(t=values, clip_value_min=-hi,
                                    clip_value_max=hi)
    seed = None
    if self._stochastic:
      seed = seeds.encode_seed(encode_params[self.SEED_PARAMS_KEY], x)
    encoded = {
        self.ENCODED_VALUES_KEY: quantize(values, -hi, self._step(hi), seed,
                                           2**self._bits - 1),
        basic.DTYPE_TAG_KEY: basic.dtype_tag(x.dtype),
    }
    return encoded, {self.MAX_ABS_STATE_UPDATE_KEY: max_abs}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del shape  # Unused.
    hi = tf.cast(decode_params[self.RANGE_PARAMS_KEY], tf.float32)
    return dequantize(encoded_tensors[self.ENCODED_VALUES_KEY], -hi, hi,
                      2**self._bits - 1, num_summands,
                      basic.tagged_dtype(encoded_tensors[basic.DTYPE_TAG_KEY]))

  def _step(self, value_range):
    return level_step(2 * value_range, 2**self._bits - 1)


class _PackingPlan:
  """How `bits`-bit values lie in the packed bytes, worked on 64 bits at a time.

  `group = 8 / gcd(bits, 8)` values end exactly on a byte boundary, in
  `width = bits * group / 8` bytes (at most 15). Value j of a group holds bits
  `[bits * j, bits * (j + 1))` of it, least significant first; lane k, a
  uint64, holds bits `[64 k, 64 k + 64)`. So a lane is a sum of whole columns
  of the `[groups, group]` values, each shifted into place (bit fields that do
  not overlap add like an or), and a value is its lane shifted back, plus the
  high bits from the next lane when it straddles two. Every step is a shift,
  a mask or a row sum over a few columns: XLA fuses them with the quantizer
  before and the dequantizer after into passes it vectorizes (per-column
  slices of a fused producer compiled to scalar loops ~20x slower).
  """

  def __init__(self, bits):
    self.bits = bits
    self.group = 8 // math.gcd(bits, 8)
    self.width = bits * self.group // 8
    self.lanes = _ceil_div(self.width, 8)
    self.mask = 2**bits - 1
    self.pack = tf.function(self._pack, jit_compile=True, autograph=False)
    self.unpack = tf.function(self._unpack, jit_compile=True, autograph=False)

  def _lane_columns(self, lane):
    """[(column, shift)]: the values in `lane` and where they start relative to it."""
    return [(j, self.bits * j - 64 * lane) for j in range(self.group)
            if self.bits * j < 64 * (lane + 1)
            and self.bits * (j + 1) > 64 * lane]

  def _pack(self, x):
    """Rank-1 int32 levels -> uint8 bytes, `ceil(n * bits / 8)` of them."""
    n = tf.size(x)
    values = tf.reshape(tf.cast(tf.pad(x, [[0, -n % self.group]]), tf.uint64),
                        [-1, self.group])
    lanes = []
    for lane in range(self.lanes):
      columns = self._lane_columns(lane)
      first = columns[0][0]
      part = values[:, first:columns[-1][0] + 1]
      left = tf.constant([max(s, 0) for _, s in columns], tf.uint64)
      right = tf.constant([max(-s, 0) for _, s in columns], tf.uint64)
      part = tf.bitwise.right_shift(tf.bitwise.left_shift(part, left), right)
      lanes.append(tf.reduce_sum(part, axis=1))
    data = tf.bitcast(tf.stack(lanes, axis=1), tf.uint8)
    data = tf.reshape(data, [-1, 8 * self.lanes])[:, :self.width]
    return tf.reshape(data, [-1])[:(n * self.bits + 7) // 8]

  def _unpack(self, packed, n):
    """The `n` int32 levels `_pack` turned into `packed`."""
    groups = (n + self.group - 1) // self.group
    data = tf.pad(packed, [[0, groups * self.width - tf.size(packed)]])
    data = tf.pad(tf.reshape(data, [groups, self.width]),
                  [[0, 0], [0, 8 * self.lanes - self.width]])
    lanes = tf.bitcast(tf.reshape(data, [groups, self.lanes, 8]), tf.uint64)
    # Per lane, the values starting in it, each a broadcast shift of the lane
    # (plus its high bits from the next lane when it straddles the two).
    parts = []
    for lane in range(self.lanes):
      starts = [self.bits * j - 64 * lane for j in range(self.group)
                if self.bits * j // 64 == lane]
      if not starts:  # The lane holds only a straddler's high bits.
        continue
      value = tf.bitwise.right_shift(lanes[:, lane:lane + 1],
                                     tf.constant(starts, tf.uint64))
      if starts[-1] + self.bits > 64:
        # Only the last value of a lane can straddle; 0 shifts mask the rest.
        high = tf.bitwise.left_shift(
            lanes[:, lane + 1:lane + 2],
            tf.constant([0] * (len(starts) - 1) + [64 - starts[-1]], tf.uint64))
        keep = tf.constant(
            np.array([0] * (len(starts) - 1) + [2**64 - 1], np.uint64))
        value = tf.bitwise.bitwise_or(value, tf.bitwise.bitwise_and(high, keep))
      parts.append(value)
    values = tf.bitwise.bitwise_and(tf.concat(parts, axis=1),
                                    tf.constant(self.mask, tf.uint64))
    values = tf.reshape(values, [-1])[:n]
    return tf.cast(values, tf.int32)


@encoding_stage.tf_style_encoding_stage
class IntegerBitpackingEncodingStage(encoding_stage.EncodingStageInterface):
  """Packs non-negative int32 values below `2**input_bits` densely into bytes.

  n values cost exactly `ceil(n * input_bits / 8)` bytes (uint8; uint16 for 16
  bits). The input must be rank 1 (put `FlattenEncodingStage` first for other
  shapes); decode needs its length to drop the padding of the last byte.

  Layout: see `pack`.

  Values outside `[0, 2**input_bits)` corrupt their neighbours: they are
  rejected at trace time when the input is a constant, and at run time only
  with `check_values=True` (two extra read-only passes over the input).
  """

  ENCODED_VALUES_KEY = 'bitpacked_values'

  def __init__(self, input_bits, check_values=False):
    self._bits = _check_bits('IntegerBitpackingEncodingStage', 'input_bits',
                             input_bits)
    self._check_values = bool(check_values)
    self._plan = packing_plan(self._bits)

  @property
  def input_bits(self):
    return self._bits

  @property
  def name(self):
    return 'integer_bitpacking'

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
    return not self._check_values  # XLA drops assertions.

  def get_params(self):
    return {}, {}

  def encode(self, x, encode_params):
    del encode_params  # Unused.
    return {self.ENCODED_VALUES_KEY: pack(self._plan, self._checked_input(x))}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del decode_params, num_summands  # Unused.
    if shape is None:
      raise errors.InvalidValueError(
          'IntegerBitpackingEncodingStage: decode needs the input '
          'shape.')
    packed = encoded_tensors[self.ENCODED_VALUES_KEY]
    static_shape = tf.get_static_value(shape)
    if static_shape is not None:
      n = int(static_shape[0])
      expected = _ceil_div(n * self._bits, 8 * packed.dtype.size)
      if packed.shape[0] is not None and packed.shape[0] != expected:
        raise errors.InvalidValueError(
            f'IntegerBitpackingEncodingStage: {n} values of {self._bits} bits '
            f'pack into {expected} words, got {packed.shape[0]}.')
    else:
      n = tf.cast(tf.reshape(shape, [-1])[0], tf.int32)
    return unpack(self._plan, packed, n)

  def _checked_input(self, x):
    name = 'IntegerBitpackingEncodingStage'
    if x.dtype != tf.int32:
      raise errors.InvalidTypeError(
          f'{name}: input must be int32 (quantization levels), got '
          f'{x.dtype.name}.')
    if x.shape.rank != 1:
      raise errors.InvalidValueError(
          f'{name}: input must have rank 1, got shape {x.shape}; '
          'put a FlattenEncodingStage before it.')
    limit = 2**self._bits
    static_values = tf.get_static_value(x)
    if static_values is not None and static_values.size and (
        static_values.min() < 0 or static_values.max() >= limit):
      raise errors.InvalidValueError(
          f'{name}: values must be in [0, {limit}) for input_bits='
          f'{self._bits}, got values in [{static_values.min()}, '
          f'{static_values.max()}].')
    if self._check_values:
      message = f'{name}: values must be in [0, {limit})'
      with tf.control_dependencies([
          tf.debugging.assert_non_negative(x, message=message),
          tf.debugging.assert_less(x, limit, message=message)]):
        x = tf.identity(x)
    return x


def packing_plan(bits):
  """The `_PackingPlan` of `bits`, built once per width (its XLA functions too)."""
  if bits not in _PLANS:
    _PLANS[bits] = _PackingPlan(bits)
  return _PLANS[bits]


_PLANS = {}


def pack(plan, x):
  """Rank-1 int32 levels -> `ceil(n * bits / 8)` bytes (uint8; uint16 at 16 bits).

  Values are laid end to end, least significant bits first (tensor_encoding's
  order); 8 and 16 bits are a plain cast. See `_PackingPlan`.
  """
  if plan.bits in (8, 16):
    return tf.cast(x, tf.uint8 if plan.bits == 8 else tf.uint16)
  return plan.pack(x)


def unpack(plan, packed, n):
  """The `n` int32 levels `pack` turned into `packed`."""
  if plan.bits in (8, 16):
    return tf.cast(packed, tf.int32)
  # A tensor `n`, so one trace serves every length (XLA compiles per length).
  return tf.reshape(plan.unpack(packed, tf.convert_to_tensor(n)), [n])


def _ceil_div(a, b):
  return (a + b - 1) // b
