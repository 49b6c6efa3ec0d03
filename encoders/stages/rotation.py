"""Randomized Hadamard rotation: spreads a tensor's mass over its coordinates.

After the rotation every coordinate is close to a Gaussian of variance
||x||^2 / n, so a quantizer that follows sees a small, predictable range.

The rotation is orthogonal and keeps the size: no padding is sent. With
B = min(max_block_size, the largest power of two <= n), the flattened input
gets random signs, then every whole block of B values is rotated by the
normalized Walsh-Hadamard matrix H_B. If B does not divide n, the last B
values (the tail plus the end of the rotated blocks) get fresh random signs
and are rotated once more. A product of orthogonal maps is orthogonal, so this
costs nothing on the wire, where padding to a power of two would send up to
twice as many values. The fresh signs on the overlap keep the second rotation
from undoing the first.

H_B is a Kronecker product of Hadamard matrices of order <= 16, so rotating
the blocks is a few matmuls with small matrices on reshaped views: far fewer
passes over memory than a butterfly per doubling.

One sign pattern of length B serves all blocks: drawing n random values costs
as much as the rotation itself, and each block still gets a uniformly random
sign pattern, which is all that unbiasedness arguments (e.g. DRIVE) use.
"""

import tensorflow as tf

from encoders import errors
from encoders.core import encoding_stage
from encoders.core import seeds
from encoders.stages import basic
from encoders.stages import shapes

_LARGEST_MAX_BLOCK_SIZE = 2**20
# Factors of H_B are at most 16: measured fastest (2**14 as 8*8*16*16 ran
# 1.2-1.9x faster than 16*32*32 at 1e6 and 1e7 values, and 2.9x than 128*128).
_MAX_FACTOR_LOG2 = 4


def _compute_dtype(x):
  basic.check_float_input('HadamardEncodingStage', x)
  return basic.wide_dtype(x.dtype)


class _Layout:
  """Where the blocks and the overlap window lie in a vector of `size` values.

  Sizes are Python ints when `size` is static, scalar tensors otherwise.
  """

  def __init__(self, size, max_block_size):
    max_log2 = max_block_size.bit_length() - 1
    if isinstance(size, int):
      log2 = min(max(size, 1).bit_length() - 1, max_log2)
      num_factors = max(1, -(-log2 // _MAX_FACTOR_LOG2))
      self.factors = [2**((log2 + i) // num_factors)
                      for i in range(num_factors)]
      self.block = 2**log2
    else:
      # One factor count for every size (order-1 factors for tiny inputs).
      num_factors = max(1, -(-max_log2 // _MAX_FACTOR_LOG2))
      powers = tf.constant([2**j for j in range(1, max_log2 + 1)], size.dtype)
      log2 = tf.reduce_sum(tf.cast(size >= powers, size.dtype))
      one = tf.ones([], size.dtype)
      self.factors = [tf.bitwise.left_shift(one, (log2 + i) // num_factors)
                      for i in range(num_factors)]
      self.block = tf.bitwise.left_shift(one, log2)
    self.size = size
    self.num_blocks = size // self.block
    self.blocks_end = self.num_blocks * self.block
    self.tail = size - self.blocks_end
    self.last_block_start = self.blocks_end - self.block
    # The overlap window is the last `block` values; it exists iff tail > 0.
    self.window_start = size - self.block
    self.has_window = self.tail > 0


def _hadamard_matrix(order, dtype):
  """The orthonormal Sylvester-Hadamard matrix of a power-of-two `order`."""
  index = tf.range(order)
  common_bits = tf.bitwise.bitwise_and(index[:, None], index[None, :])
  parity = tf.bitwise.bitwise_and(tf.raw_ops.PopulationCount(x=common_bits), 1)
  return (1 - 2 * tf.cast(parity, dtype)) * tf.math.rsqrt(tf.cast(order, dtype))


def _hadamard_blocks(values, factors, dtype):
  """Flat `values` times H_B on each block of B = prod(factors) consecutive values.

  H_B = H_f1 (x) H_f2 (x) ..., so each factor is one matmul over a reshaped
  view: no transposes, and small factors keep the arithmetic per value low.
  """
  mixed = values
  for i, order in enumerate(factors):
    matrix = _hadamard_matrix(order, dtype)
    if i == len(factors) - 1:
      mixed = tf.matmul(tf.reshape(mixed, [-1, order]), matrix)
    else:
      later = factors[i + 1]
      for f in factors[i + 2:]:
        later = later * f
      mixed = tf.matmul(matrix, tf.reshape(mixed, [-1, order, later]))
  return tf.reshape(mixed, [-1])


def hadamard_rows(rows):
  """Each row of `rows` ([b, N], N a static power of two) times orthonormal H_N."""
  width = rows.shape[-1]
  factors = _Layout(width, width).factors
  return tf.reshape(_hadamard_blocks(tf.reshape(rows, [-1]), factors,
                                     rows.dtype), [-1, width])


class _BlockRotation:
  """H_B applied to each block of B consecutive values, with random signs."""

  def __init__(self, layout, seed, dtype):
    self._layout = layout
    self._dtype = dtype
    bits = tf.random.stateless_uniform(
        [2, layout.block], seed=seed, minval=0, maxval=2, dtype=tf.int32,
        alg=seeds.ALGORITHM)  # Named, so every device draws the same signs.
    signs = tf.cast(1 - 2 * bits, dtype)
    # Row 0 signs every block and the tail; row 1 the overlap window.
    self.block_signs = signs[0]
    self.window_signs = signs[1]

  def _hadamard(self, values):
    return _hadamard_blocks(values, self._layout.factors, self._dtype)

  def _signed(self, values, signs):
    return tf.reshape(
        tf.reshape(values, [-1, self._layout.block]) * signs, [-1])

  def forward(self, values, signs):
    return self._hadamard(self._signed(values, signs))

  def inverse(self, values, signs):
    return self._signed(self._hadamard(values), signs)


def rotate(flat, seed, max_block_size):
  """A flat tensor of any size times a random orthogonal matrix: Hadamard
  blocks of at most `max_block_size` with signs drawn from `seed` ([2]
  int64); the last block overlaps a window, so nothing is padded."""
  layout = _Layout(shapes.static_or_dynamic_size(flat), max_block_size)
  rotation = _BlockRotation(layout, seed, flat.dtype)
  signs = rotation.block_signs

  def with_window():
    # The last whole block is rotated apart, so only B values are sliced.
    head = rotation.forward(flat[:layout.last_block_start], signs)
    last = rotation.forward(
        flat[layout.last_block_start:layout.blocks_end], signs)
    tail = flat[layout.blocks_end:] * signs[:layout.tail]
    window = tf.concat([last[layout.tail:], tail], 0)
    window = rotation.forward(window, rotation.window_signs)
    return tf.concat([head, last[:layout.tail], window], 0)

  return shapes.cond(layout.has_window, with_window,
             lambda: rotation.forward(flat, signs))


def unrotate(flat, seed, max_block_size):
  """The inverse of `rotate` with the same seed and block size."""
  layout = _Layout(shapes.static_or_dynamic_size(flat), max_block_size)
  rotation = _BlockRotation(layout, seed, flat.dtype)
  signs = rotation.block_signs

  def with_window():
    window = rotation.inverse(flat[layout.window_start:], rotation.window_signs)
    overlap = layout.block - layout.tail
    last = tf.concat(
        [flat[layout.last_block_start:layout.window_start], window[:overlap]],
        0)
    return tf.concat([
        rotation.inverse(flat[:layout.last_block_start], signs),
        rotation.inverse(last, signs),
        window[overlap:] * signs[:layout.tail],
    ], 0)

  return shapes.cond(layout.has_window, with_window,
             lambda: rotation.inverse(flat, signs))


@encoding_stage.tf_style_encoding_stage
class HadamardEncodingStage(encoding_stage.EncodingStageInterface):
  """tensor_encoding's rotation: each row, zero-padded to a power of two, rotated.

  A rank-1 input is one row (encoded as `[1, 2**k]`), a rank-2 input `[b, d]`
  is b rows (`[b, 2**k]`, b may be unknown); `2**k` is the smallest power of
  two >= d, which must be static. The signs come from a seed drawn in
  `get_params` (fresh per call when run directly, from the round in a form),
  so repeated encodes rotate differently. Padding sends up to twice the values:
  `UnpaddedHadamardEncodingStage` rotates any size without it.
  """

  ENCODED_VALUES_KEY = 'hadamard_values'
  SEED_PARAMS_KEY = 'seed'

  def __init__(self, seed=None):
    self._seed = seeds.check_seed('HadamardEncodingStage', seed)

  @property
  def name(self):
    return 'hadamard'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_VALUES_KEY]

  @property
  def commutes_with_sum(self):
    return True

  @property
  def decode_needs_input_shape(self):
    return True

  def get_params(self):
    params = {self.SEED_PARAMS_KEY: seeds.params_seed(self._seed)}
    return params, dict(params)

  def encode(self, x, encode_params):
    rows = _as_rows(x)
    width = rows.shape[1]
    padded_width = 1 << max(width - 1, 0).bit_length()
    compute_dtype = _compute_dtype(x)
    rows = tf.pad(tf.cast(rows, compute_dtype),
                  [[0, 0], [0, padded_width - width]])
    rotation = _row_rotation(padded_width, encode_params[self.SEED_PARAMS_KEY],
                             compute_dtype)
    rotated = rotation.forward(tf.reshape(rows, [-1]), rotation.block_signs)
    return {self.ENCODED_VALUES_KEY: tf.cast(
        tf.reshape(rotated, [-1, padded_width]), x.dtype)}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del num_summands  # The rotation is linear: a sum decodes like one value.
    if shape is None:
      raise errors.InvalidValueError(
          'HadamardEncodingStage: decode needs the input shape.')
    values = encoded_tensors[self.ENCODED_VALUES_KEY]
    compute_dtype = _compute_dtype(values)
    padded_width = values.shape[1]
    rotation = _row_rotation(padded_width, decode_params[self.SEED_PARAMS_KEY],
                             compute_dtype)
    rows = rotation.inverse(tf.reshape(tf.cast(values, compute_dtype), [-1]),
                            rotation.block_signs)
    rows = tf.reshape(rows, [-1, padded_width])
    width = tf.reshape(shape, [-1])[-1]
    return tf.reshape(tf.cast(rows[:, :width], values.dtype), shape)


def _as_rows(x):
  """`x` as a matrix of rows: rank 1 is one row, rank 2 is itself."""
  if x.shape.rank is None or x.shape.rank == 0 or x.shape[-1] is None:
    raise errors.InvalidValueError(
        'HadamardEncodingStage: the number of dimensions and the '
        f'last dimension of the input must be fully known, got '
        f'shape {x.shape}.')
  if x.shape.rank > 2:
    raise errors.InvalidValueError(
        'HadamardEncodingStage: the number of dimensions of the '
        f'input must be 1 or 2., got shape {x.shape}.')
  return tf.reshape(x, [1, -1]) if x.shape.rank == 1 else x


def _row_rotation(width, seed, dtype):
  """The rotation of consecutive rows of `width` (a power of two) values."""
  return _BlockRotation(_Layout(width, width), seed, dtype)


@encoding_stage.tf_style_adaptive_encoding_stage
class UnpaddedHadamardEncodingStage(
    encoding_stage.AdaptiveEncodingStageInterface):
  """Rotates the flattened input by a random orthogonal Hadamard-based matrix.

  The rotation is linear and every client draws it from the same seed, so
  decoding commutes with summing encodings. The seed is the state: each round
  rotates differently, so no input stays badly aligned with the rotation.
  The encoded values are rank 1, as many as the input has, in its dtype: no
  padding, unlike tensor_encoding's `HadamardEncodingStage`.
  """

  ENCODED_VALUES_KEY = 'hadamard_values'
  SEED_PARAMS_KEY = 'seed'
  SEED_STATE_KEY = 'seed'

  def __init__(self, seed=0, max_block_size=2**14):
    """Args: `seed` (Python int) of round 0; `max_block_size`, a power of two.

    Larger blocks spread mass over more coordinates and cost more per value.
    """
    seed = seeds.check_seed('UnpaddedHadamardEncodingStage', seed) or 0
    if (isinstance(max_block_size, bool) or not isinstance(max_block_size, int)
        or max_block_size < 1 or max_block_size > _LARGEST_MAX_BLOCK_SIZE
        or max_block_size & (max_block_size - 1)):
      raise errors.InvalidValueError(
          'UnpaddedHadamardEncodingStage: max_block_size must be '
          f'a power of two in [1, {_LARGEST_MAX_BLOCK_SIZE}], got '
          f'{max_block_size!r}.')
    self._seed = seed
    self._max_block_size = max_block_size

  @property
  def name(self):
    return 'unpadded_hadamard'

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
  def state_update_aggregation_modes(self):
    return {}

  def initial_state(self):
    return {self.SEED_STATE_KEY: seeds.initial_seed(self._seed)}

  def update_state(self, state, state_update_tensors):
    del state_update_tensors  # The seed advances the same way every round.
    return {self.SEED_STATE_KEY: seeds.next_seed(state[self.SEED_STATE_KEY])}

  def get_params(self, state):
    params = {self.SEED_PARAMS_KEY: state[self.SEED_STATE_KEY]}
    return params, dict(params)

  def encode(self, x, encode_params):
    compute_dtype = _compute_dtype(x)
    flat = tf.cast(tf.reshape(x, [-1]), compute_dtype)
    rotated = rotate(flat, encode_params[self.SEED_PARAMS_KEY],
                      self._max_block_size)
    return {self.ENCODED_VALUES_KEY: tf.cast(rotated, x.dtype)}, {}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del num_summands  # The rotation is linear: a sum decodes like one value.
    if shape is None:
      raise errors.InvalidValueError(
          'UnpaddedHadamardEncodingStage: decode needs the input shape.')
    values = encoded_tensors[self.ENCODED_VALUES_KEY]
    compute_dtype = _compute_dtype(values)
    if values.shape.rank != 1:
      raise errors.InvalidValueError(
          'UnpaddedHadamardEncodingStage: encoded values must be rank 1, '
          f'got shape {values.shape}.')
    flat = unrotate(tf.cast(values, compute_dtype),
                     decode_params[self.SEED_PARAMS_KEY], self._max_block_size)
    return tf.reshape(tf.cast(flat, values.dtype), shape)
