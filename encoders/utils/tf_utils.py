"""TensorFlow building blocks for encoding stages: rotation, random bits, packing.

Same names and behaviour as tensor_encoding's `utils.tf_utils`. Every function
is pure: randomness comes from a seed tensor passed in, never from a stateful
op, so a graph that uses them gives the same result each time it runs.
"""

import numbers

import numpy as np
import tensorflow as tf

from encoders import errors
from encoders.core import seeds


# ---------------------------------------------------------------------------
# Walsh-Hadamard transform.


def _is_power_of_two(n):
  return n > 0 and n & (n - 1) == 0


def _butterfly(x, half):
  """One stage of the transform: `(a, b) -> (a + b, a - b)` for each pair of
  entries `half` apart inside consecutive blocks of `2 * half` entries.

  The blocks never cross rows, since every row's length is a multiple of
  `2 * half`; so the whole batch is one reshape.
  """
  pairs = tf.reshape(x, [-1, 2, half])
  first, second = pairs[:, 0], pairs[:, 1]
  mixed = tf.stack([first + second, first - second], axis=1)
  return tf.reshape(mixed, tf.shape(x))


def _static_transform(x, dim):
  half = 1
  while half < dim:
    x = _butterfly(x, half)
    half *= 2
  return x


def _dynamic_transform(x, dim):
  check = tf.debugging.assert_equal(
      tf.bitwise.bitwise_and(dim, dim - 1), 0,
      message='The dimension of x must be a power of two.')
  with tf.control_dependencies([check]):
    x = tf.identity(x)

  def body(transformed, half):
    transformed = _butterfly(transformed, half)
    transformed.set_shape(x.shape)
    return transformed, half * 2

  x, _ = tf.while_loop(lambda _, half: half < dim, body,
                       [x, tf.constant(1, dim.dtype)])
  return x


def fast_walsh_hadamard_transform(x):
  """Applies the orthonormal Walsh-Hadamard matrix to each row of `x`.

  Returns `x @ H / sqrt(d)` for `x` of shape `[batch, d]`, with `H` the
  Sylvester-ordered Hadamard matrix of order `d` (as `scipy.linalg.hadamard`),
  in `log2(d)` passes of additions instead of a `d x d` matmul. The
  transform is symmetric and orthogonal: it keeps norms and is its own
  inverse. `d` must be a power of two; when it is known only at run time it
  is checked then, with an assertion.
  """
  x = tf.convert_to_tensor(x)
  if x.shape.rank != 2:
    raise errors.InvalidValueError('Number of dimensions of x must be 2. '
                                   f'Shape of x: {x.shape}')
  if not x.dtype.is_floating:
    raise errors.InvalidTypeError(
        f'x must be a floating point tensor, got dtype {x.dtype}.')
  dim = x.shape[1]
  if dim is not None:
    if not _is_power_of_two(dim):
      raise errors.InvalidValueError(
          'The dimension of x must be a power of two. '
          f'Provided dimension is: {dim}')
    transformed = _static_transform(x, dim)
    scale = tf.constant(1 / np.sqrt(dim), x.dtype)
  else:
    dim = tf.shape(x)[1]
    transformed = _dynamic_transform(x, dim)
    scale = tf.math.rsqrt(tf.cast(dim, x.dtype))
  return transformed * scale


# ---------------------------------------------------------------------------
# Random values from stateless TF ops.


def _check_float_dtype(dtype):
  dtype = tf.as_dtype(dtype)
  if dtype not in (tf.float32, tf.float64):
    raise errors.InvalidTypeError(
        'Supported types are tf.float32 and tf.float64 values, '
        f'got {dtype.name}.')
  return dtype


def _check_sign_dtype(dtype):
  """Signs need a type that holds -1: a float or a signed integer."""
  dtype = tf.as_dtype(dtype)
  if not (dtype.is_floating or (dtype.is_integer and not dtype.is_unsigned)):
    raise errors.InvalidTypeError(
        'Random signs need a floating point or signed integer '
        f'dtype, got {dtype.name}.')
  return dtype


def random_signs(num_elements, seed, dtype=tf.float32):
  """`num_elements` values, each -1 or +1 with equal chance, fixed by `seed`.

  `seed` is a shape [2] int32/int64 tensor as `tf.random.stateless_uniform`
  takes. The algorithm is named (Philox), so every device draws the same
  signs for a seed: an encoder and its decoder on different machines agree.
  """
  dtype = _check_sign_dtype(dtype)
  bits = tf.random.stateless_uniform(
      [num_elements], seed=seed, minval=0, maxval=2, dtype=tf.int32,
      alg=seeds.ALGORITHM)
  return tf.cast(1 - 2 * bits, dtype)


def random_floats(num_elements, seed, dtype=tf.float32):
  """`num_elements` uniform values in [0, 1), fixed by the shape [2] `seed`."""
  dtype = _check_float_dtype(dtype)
  return tf.random.stateless_uniform(
      [num_elements], seed=seed, dtype=dtype, alg=seeds.ALGORITHM)


# ---------------------------------------------------------------------------
# Complementary-multiply-with-carry (CMWC) random values.
#
# For where results must be reproducible outside TensorFlow (another runtime
# that has to draw the same signs from the same seed): unlike TF's stateless
# ops, every step below is plain 64-bit integer arithmetic that any language
# can repeat exactly.
#
# The sequence interleaves _CMWC_LANES independent lag-1 CMWC generators,
# element j coming from lane j % _CMWC_LANES, so each step of the loop makes
# _CMWC_LANES values at once. A lane's state (x, c), 0 <= x < b, 0 <= c < a,
# steps as
#     t = a * x + c;   c <- t // b;   x <- (b - 1) - t % b,
# and outputs the new x. With b = 2**32 - 1 and the multiplier a below,
# p = a * b + 1 is prime and b is a primitive root modulo p, so every one of
# the a * b states lies on a single cycle of length p - 1 (about 2**62.7):
# no seed can land in a short or stuck cycle. t < 2**63, so signed or
# unsigned 64-bit arithmetic both work.
#
# Lane i starts from splitmix64(seed + (i + 1) * 0x9E3779B97F4A7C15): its low
# 32 bits modulo b give x, its high 32 bits modulo a give c. The lane count is
# fixed, so a shorter sequence for a seed is a prefix of a longer one.

_CMWC_MULTIPLIER = 1799596406  # a
_CMWC_BASE = 2**32 - 1  # b
_CMWC_LANES = 1024
_GOLDEN_GAMMA = 0x9E3779B97F4A7C15
_MIX_1 = 0xBF58476D1CE4E5B9
_MIX_2 = 0x94D049BB133111EB


def _u64(value):
  return tf.constant(value, tf.uint64)


def _xor_shift_right(z, bits):
  return tf.bitwise.bitwise_xor(z, tf.bitwise.right_shift(z, _u64(bits)))


def _splitmix64(state):
  """Steele et al.'s 64-bit finalizer: spreads nearby states far apart."""
  z = _xor_shift_right(state, 30) * _u64(_MIX_1)
  z = _xor_shift_right(z, 27) * _u64(_MIX_2)
  return _xor_shift_right(z, 31)


def _cmwc_initial_state(seed):
  seed = tf.bitcast(seed, tf.uint64)  # Two's complement: -1 -> 2**64 - 1.
  lanes = tf.range(1, _CMWC_LANES + 1, dtype=tf.int64)
  mixed = _splitmix64(seed + tf.bitcast(lanes, tf.uint64) * _u64(_GOLDEN_GAMMA))
  low = tf.bitwise.bitwise_and(mixed, _u64(2**32 - 1))
  high = tf.bitwise.right_shift(mixed, _u64(32))
  return low % _u64(_CMWC_BASE), high % _u64(_CMWC_MULTIPLIER)


def _cmwc_step(state, _):
  x, carry = state
  t = _u64(_CMWC_MULTIPLIER) * x + carry
  return _u64(_CMWC_BASE - 1) - t % _u64(_CMWC_BASE), t // _u64(_CMWC_BASE)


def _check_cmwc_args(num_elements, seed):
  if (not isinstance(num_elements, numbers.Integral)
      or isinstance(num_elements, bool)):
    raise errors.InvalidTypeError(
        'num_elements must be a Python integer, got '
        f'{type(num_elements).__name__}: {num_elements!r}')
  if num_elements <= 0:
    raise errors.InvalidValueError(
        f'num_elements must be positive, got {num_elements}.')
  if not (tf.is_tensor(seed) and seed.dtype == tf.int64):
    raise errors.InvalidTypeError('seed must be a scalar tf.int64 Tensor, got '
                                  f'{type(seed).__name__}: {seed!r}')
  if seed.shape.rank not in (None, 0):
    raise errors.InvalidValueError(
        f'seed must be a scalar, got shape {seed.shape}.')


def _cmwc_words(num_elements, seed):
  """`num_elements` uint64 values, uniform over [0, 2**32 - 1)."""
  _check_cmwc_args(num_elements, seed)
  num_steps = -(-int(num_elements) // _CMWC_LANES)
  outputs, _ = tf.scan(_cmwc_step, tf.range(num_steps),
                       initializer=_cmwc_initial_state(tf.reshape(seed, [])))
  return tf.reshape(outputs, [-1])[:num_elements]


def _cmwc_random_sequence(num_elements, seed):
  """`num_elements` float64 values uniform in [0, 1), from a CMWC generator.

  `num_elements` must be a positive Python int (the loop length is fixed
  when the graph is built) and `seed` a scalar tf.int64 tensor.
  """
  words = _cmwc_words(num_elements, seed)
  return tf.cast(words, tf.float64) * 2.0**-32


def random_signs_cmwc(num_elements, seed, dtype=tf.float32):
  """`num_elements` values of -1 or +1 from the CMWC generator.

  Like `random_signs`, but reproducible outside TF (see above); `seed` is a
  scalar tf.int64 tensor. The sign is the top bit of each value.
  """
  dtype = _check_sign_dtype(dtype)
  top_bits = tf.bitwise.right_shift(_cmwc_words(num_elements, seed), _u64(31))
  return tf.cast(1 - 2 * tf.cast(top_bits, tf.int32), dtype)


def random_floats_cmwc(num_elements, seed, dtype=tf.float32):
  """`num_elements` uniform values in [0, 1) from the CMWC generator.

  float32 values take the top 24 bits of each value, so rounding can never
  turn one into 1.0.
  """
  dtype = _check_float_dtype(dtype)
  words = _cmwc_words(num_elements, seed)
  if dtype == tf.float64:
    return tf.cast(words, tf.float64) * 2.0**-32
  top = tf.bitwise.right_shift(words, _u64(8))
  return tf.cast(top, tf.float32) * 2.0**-24


# ---------------------------------------------------------------------------
# Bit packing.
#
# The values' low bits, least significant first, are laid end to end in one
# bit stream, cut into words of `target_bitrange` bits (the last one padded
# with zeros); a value may straddle two words. Bit k of a word is stream bit
# `word_index * target_bitrange + k`.


def _check_packing_args(dtype, value_bits, target_bitrange, value_arg):
  if dtype not in (tf.int32, tf.int64):
    raise errors.InvalidTypeError(
        f'Bit packing works on tf.int32 and tf.int64 tensors, '
        f'got {dtype.name}.')
  max_bits = dtype.size * 8 - 1  # Packed words stay non-negative.
  for name, bits in ((value_arg, value_bits),
                     ('target_bitrange', target_bitrange)):
    if (not isinstance(bits, numbers.Integral) or isinstance(bits, bool)
        or not 1 <= bits <= max_bits):
      raise errors.InvalidValueError(
          f'{name} must be an integer from 1 to {max_bits} for '
          f'{dtype.name}, got {bits!r}.')


def _low_bits(values, num_bits):
  """`[n] -> [n * num_bits]`: each value's low bits, least significant first."""
  shifts = tf.range(num_bits, dtype=values.dtype)
  bits = tf.bitwise.right_shift(values[:, None], shifts)
  return tf.reshape(tf.bitwise.bitwise_and(bits, 1), [-1])


def _from_bits(bits, num_bits):
  """`[m, num_bits]` bits, least significant first -> `[m]` integers."""
  weights = tf.bitwise.left_shift(tf.ones([], bits.dtype),
                                  tf.range(num_bits, dtype=bits.dtype))
  return tf.reduce_sum(bits * weights, axis=1)


def pack_into_int(value, input_bitrange, target_bitrange):
  """Packs the values of an int tensor densely into `target_bitrange`-bit words.

  Only the low `input_bitrange` bits of each value are kept, so values must
  lie in [0, 2**input_bitrange). n values become `ceil(n * input_bitrange /
  target_bitrange)` words, returned with shape `[num_words, 1]` and the input
  dtype. `unpack_from_int` inverts this.
  """
  value = tf.convert_to_tensor(value)
  _check_packing_args(value.dtype, input_bitrange, target_bitrange,
                      'input_bitrange')
  stream = _low_bits(tf.reshape(value, [-1]), input_bitrange)
  padding = -tf.size(stream) % target_bitrange
  stream = tf.pad(stream, [[0, padding]])
  words = _from_bits(tf.reshape(stream, [-1, target_bitrange]),
                     target_bitrange)
  return words[:, None]


def _num_elements(shape):
  """The element count of `shape` (a shape object, list or tensor)."""
  if isinstance(shape, tf.TensorShape):
    if not shape.is_fully_defined():
      raise errors.InvalidValueError(
          f'shape must be fully defined, got {shape}.')
    shape = shape.as_list()
  if tf.is_tensor(shape):
    return tf.reduce_prod(shape), shape
  shape = [int(d) for d in shape]
  return int(np.prod(shape, dtype=np.int64)), shape


def unpack_from_int(value, original_bitrange, target_bitrange, shape):
  """Recovers the tensor of `shape` that `pack_into_int` packed into `value`.

  `original_bitrange` and `target_bitrange` must be the ones used to pack;
  `shape` says how many values to read and how to arrange them. The result
  has the dtype of `value`.
  """
  value = tf.convert_to_tensor(value)
  _check_packing_args(value.dtype, original_bitrange, target_bitrange,
                      'original_bitrange')
  count, shape = _num_elements(shape)
  stream = _low_bits(tf.reshape(value, [-1]), target_bitrange)
  if tf.is_tensor(count):
    count = tf.cast(count, tf.int32)
  stream = stream[:count * original_bitrange]
  values = _from_bits(tf.reshape(stream, [-1, original_bitrange]),
                      original_bitrange)
  return tf.reshape(values, shape)
