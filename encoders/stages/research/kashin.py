"""Kashin's representation of vectors over a randomized Hadamard frame.

A vector x in R^n is written as x = U a, with a in R^N (N > n) whose entries
are all small: |a_j| <= K ||x|| / sqrt(N) for a constant K. A quantizer that
follows then needs no wide range for rare large values, which is what makes
coarse quantization of `a` accurate (Lyubarskii & Vershynin 2010, "Uncertainty
principles and vector quantization"; used for compression by Caldas et al.
2018 and Safaryan et al. 2020).

The frame: pad x with zeros to N (a power of two), flip signs at random and
apply the orthonormal Walsh-Hadamard matrix H_N, so U^T = H D P and
U U^T = I_n. The coefficients come from truncated iterations: with r = x,
a = 0 and level_i = eta^i ||x|| / sqrt(delta N), step i clips U^T r to
[-level_i, level_i], adds the clipped vector c to `a` and subtracts U c from
r. Each step shrinks the residual (r' = U (b - c), and |U v| <= |v| < |b| =
|r|); if the frame has the uncertainty principle with parameters
(eta, delta), the levels track the residual and
||a||_inf <= ||x|| / ((1 - eta) sqrt(delta N)). With `last_iter_clip=False`
the last step adds U^T r unclipped, so U a == x exactly: the stage is then
lossless and only the last step's coefficients may exceed the bound.
"""

import numbers

import tensorflow as tf

from encoders import errors
from encoders.core import encoding_stage
from encoders.core import seeds
from encoders.stages import basic
from encoders.stages import rotation

_STAGE = 'KashinHadamardEncodingStage'


def _is_real(value):
  return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _frame_size(n, pad_extra_level_threshold):
  """N: the power of two >= n, doubled once more when n fills it too much.

  A frame barely larger than n has little redundancy, and redundancy
  (N / n > 1) is what lets Kashin's coefficients be small.
  """
  size = 1
  while size < n:
    size *= 2
  if n / size > pad_extra_level_threshold:
    size *= 2
  return size


def _frame_signs(seed, size, dtype):
  """The frame's random signs, the same wherever `seed` is the same."""
  bits = tf.random.stateless_uniform(
      [size], seed=tf.cast(seed, tf.int64), minval=0, maxval=2,
      dtype=tf.int32, alg=seeds.ALGORITHM)
  return tf.cast(1 - 2 * bits, dtype)


def _analyze(rows, signs):
  """U^T r: frame coefficients of each row of `rows` ([b, n] -> [b, N])."""
  padding = signs.shape[0] - rows.shape[-1]
  return rotation.hadamard_rows(tf.pad(rows, [[0, 0], [0, padding]]) * signs)


def _synthesize(coefficients, signs, n):
  """U a: the vectors ([b, n]) that frame coefficients ([b, N]) represent."""
  return (rotation.hadamard_rows(coefficients) * signs)[:, :n]


@encoding_stage.tf_style_encoding_stage
class KashinHadamardEncodingStage(encoding_stage.EncodingStageInterface):
  """Kashin's representation of each row over a random Hadamard frame.

  Takes a rank-1 input (one vector) or a rank-2 input (a batch of row
  vectors; the batch may be unknown until run time) whose last dimension n is
  static. Emits coefficients of shape [rows, N], N the power of two >= n, or
  twice that when n / N > `pad_extra_level_threshold`; every entry is at most
  about ||row|| / ((1 - eta) sqrt(delta N)) in magnitude.

  The frame's signs come from the `seed` param, shared by encode and decode,
  and decoding is linear, so a sum of encodings made with one seed decodes to
  the sum of the inputs: the stage commutes with sum.

  Args:
    eta: in (0, 1): how fast the clipping level falls from one iteration to
      the next. A float or a scalar float tensor.
    delta: > 0: the first clipping level is ||x|| / sqrt(delta N). Larger
      values clip harder, giving smaller coefficients and, with
      `last_iter_clip`, a larger error. A float or a scalar float tensor.
    num_iters: number of iterations, a positive Python int.
    last_iter_clip: whether the last iteration clips too (bounded
      coefficients, lossy) or not (exact representation).
    pad_extra_level_threshold: a Python number in [0, 1]; see above.
    seed: a Python int fixing the frame, or None for a fresh one per
      `get_params` call (pure inside a compiled form).
  """

  ENCODED_VALUES_KEY = 'kashin_coefficients'
  SEED_PARAMS_KEY = 'seed'
  ETA_PARAMS_KEY = 'eta'
  DELTA_PARAMS_KEY = 'delta'

  def __init__(self, eta=0.9, delta=1.0, num_iters=3, last_iter_clip=False,
               pad_extra_level_threshold=0.85, seed=None):
    if not tf.is_tensor(eta):
      if not _is_real(eta) or not 0 < eta < 1:
        raise errors.InvalidValueError(
            f'{_STAGE}: eta must be a number between 0 and 1 '
            f'(exclusive), got {eta!r}.')
    if not tf.is_tensor(delta):
      if not _is_real(delta) or not delta > 0:
        raise errors.InvalidValueError(
            f'{_STAGE}: delta must be a number greater than 0, '
            f'got {delta!r}.')
    if isinstance(num_iters, bool) or not isinstance(num_iters, int):
      raise errors.InvalidValueError(
          f'{_STAGE}: num_iters must be a Python int (it fixes '
          f'the graph), got {num_iters!r}.')
    if num_iters < 1:
      raise errors.InvalidValueError(
          f'{_STAGE}: num_iters must be positive, got '
          f'{num_iters}.')
    if not isinstance(last_iter_clip, bool):
      raise errors.InvalidValueError(
          f'{_STAGE}: last_iter_clip must be a bool (it fixes '
          f'the graph), got {last_iter_clip!r}.')
    if (not _is_real(pad_extra_level_threshold) or
        not 0 <= pad_extra_level_threshold <= 1):
      raise errors.InvalidValueError(
          f'{_STAGE}: pad_extra_level_threshold must be a Python '
          'number in [0, 1] (it fixes the encoded shape), got '
          f'{pad_extra_level_threshold!r}.')
    self._eta = eta
    self._delta = delta
    self._num_iters = num_iters
    self._last_iter_clip = last_iter_clip
    self._pad_extra_level_threshold = float(pad_extra_level_threshold)
    self._seed = seeds.check_seed(_STAGE, seed)

  @property
  def name(self):
    return 'kashin_hadamard'

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
    seed = seeds.params_seed(self._seed)
    encode_params = {
        self.SEED_PARAMS_KEY: seed,
        self.ETA_PARAMS_KEY: self._eta,
        self.DELTA_PARAMS_KEY: self._delta,
    }
    return encode_params, {self.SEED_PARAMS_KEY: seed}

  def encode(self, x, encode_params):
    rows = self._as_rows(x)
    dtype = basic.wide_dtype(x.dtype)
    rows = tf.cast(rows, dtype)
    n = rows.shape[-1]
    size = _frame_size(n, self._pad_extra_level_threshold)
    signs = _frame_signs(encode_params[self.SEED_PARAMS_KEY], size, dtype)
    eta = tf.cast(encode_params[self.ETA_PARAMS_KEY], dtype)
    delta = tf.cast(encode_params[self.DELTA_PARAMS_KEY], dtype)

    norms = tf.norm(rows, axis=1, keepdims=True)
    level = norms / tf.sqrt(delta * size)
    residual = rows
    coefficients = None
    for i in range(self._num_iters):
      frame = _analyze(residual, signs)
      last = i == self._num_iters - 1
      if last and not self._last_iter_clip:
        kept = frame
      else:
        kept = tf.clip_by_value(frame, -level, level)
        level = level * eta
      coefficients = kept if coefficients is None else coefficients + kept
      if not last:
        residual = residual - _synthesize(kept, signs, n)
    return {self.ENCODED_VALUES_KEY: tf.cast(coefficients, x.dtype)}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del num_summands  # Decoding is linear: a sum decodes like one encoding.
    if shape is None:
      raise errors.InvalidValueError(f'{_STAGE}: decode needs the input shape.')
    coefficients = encoded_tensors[self.ENCODED_VALUES_KEY]
    size = coefficients.shape[-1] if coefficients.shape.rank == 2 else None
    if size is None:
      raise errors.InvalidValueError(
          f'{_STAGE}: encoded coefficients must have rank 2 and '
          f'a static last dimension, got shape '
          f'{coefficients.shape}.')
    dtype = basic.wide_dtype(coefficients.dtype)
    signs = _frame_signs(decode_params[self.SEED_PARAMS_KEY], size, dtype)
    n = shape[-1]
    rows = _synthesize(tf.cast(coefficients, dtype), signs, n)
    return tf.reshape(tf.cast(rows, coefficients.dtype), shape)

  def _as_rows(self, x):
    """`x` as a [rows, n] float tensor with static n, or a clear error."""
    if not x.dtype.is_floating:
      raise errors.InvalidTypeError(
          f'{_STAGE}: the input must be a float tensor, got '
          f'{x.dtype.name}.')
    rank = x.shape.rank
    if rank not in (1, 2):
      raise errors.InvalidValueError(
          f'{_STAGE}: the number of dimensions of the input must '
          f'be 1 or 2, got shape {x.shape}.')
    if x.shape[-1] is None:
      raise errors.InvalidValueError(
          f'{_STAGE}: the last dimension of the input must be '
          f'fully known statically, got shape {x.shape}.')
    return tf.reshape(x, [1, -1]) if rank == 1 else x
