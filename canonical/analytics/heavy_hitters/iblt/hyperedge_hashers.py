"""Where a string goes in each repetition of an IBLT: TFF's two hash families,
from `tf.strings.to_hash_bucket_fast` (a fingerprint, the same in every
TensorFlow version) of the string salted with `"<seed + repetition>;"`.

Both give, for `n` strings, an int64 `[n, repetitions, 3]` tensor holding
`(i, r, index of string i in repetition r)`: the sparse indices the IBLT
encoder scatters into.
"""

import tensorflow as tf

from canonical import errors

# Plain TensorFlow, with no Python control flow over tensors: AutoGraph,
# converting user code that calls it, need not convert it too (seconds).
_plain = tf.autograph.experimental.do_not_convert

_SEPARATOR = ';'


def _sparse_indices(hash_indices):
  """`[n, repetitions, 3]` int64 `(i, r, hash_indices[r][i])`."""
  hashes = tf.cast(tf.stack(hash_indices, axis=1), tf.int64)
  n = tf.shape(hashes, out_type=tf.int64)[0]
  repetitions = len(hash_indices)
  rows = tf.tile(tf.range(n)[:, None], [1, repetitions])
  columns = tf.tile(tf.range(repetitions, dtype=tf.int64)[None, :], [n, 1])
  return tf.stack([rows, columns, hashes], axis=2)


def _check(table_size, repetitions, where):
  if table_size < 1:
    raise errors.InvalidValueError(
        f'{where}: table_size must be at least 1, got {table_size}.')
  if repetitions < 3:
    raise errors.InvalidValueError(
        f'{where}: repetitions must be at least 3, got {repetitions}.')


def _salts(seed, repetitions):
  return [f'{seed + r}{_SEPARATOR}' for r in range(repetitions)]


class RandomHyperEdgeHasher:
  """Each repetition's index hashed independently, uniform over the table."""

  def __init__(self, seed: int, table_size: int, repetitions: int):
    _check(table_size, repetitions, 'RandomHyperEdgeHasher')
    self._seed = seed
    self._table_size = table_size
    self._repetitions = repetitions
    self._salts = _salts(seed, repetitions)

  @_plain
  def get_hash_indices_tf(self, input_strings):
    """The `[n, repetitions, 3]` indices of the `[n]` strings."""
    return _sparse_indices([
        tf.strings.to_hash_bucket_fast(tf.strings.join([salt, input_strings]),
                                       self._table_size)
        for salt in self._salts])


class CoupledHyperEdgeHasher:
  """Indices close to one another (arXiv:2001.10500): a string's position
  over `[0.5, z + 0.5)` plus a per-repetition offset in `[-0.5, 0.5)`,
  scaled by `table_size / (z + 1)` (z = `rescale_factor`)."""

  def __init__(self, seed: int, table_size: int, repetitions: int,
               rescale_factor: float):
    where = 'CoupledHyperEdgeHasher'
    _check(table_size, repetitions, where)
    if rescale_factor <= 0 or rescale_factor > table_size - 1:
      raise errors.InvalidValueError(
          f'{where}: rescale_factor must be in (0, table_size - 1], got '
          f'{rescale_factor} with table_size {table_size}.')
    self._seed = seed
    self._table_size = table_size
    self._repetitions = repetitions
    self._rescale_factor = rescale_factor
    self._rescaled_table_size = table_size / (rescale_factor + 1.0)
    self._salts = _salts(seed, repetitions)

  @staticmethod
  def _hash_to_float(strings, low, high, precision=tf.int32.max):
    """The lower end of the bucket of `[low, high)`, cut into `precision`
    buckets, that each string hashes to (float32)."""
    bucket = tf.strings.to_hash_bucket_fast(strings, precision) % precision
    return tf.cast(bucket, tf.float32) / precision * (high - low) + low

  @_plain
  def get_hash_indices_tf(self, data_strings):
    """The `[n, repetitions, 3]` indices of the `[n]` strings."""
    positions = self._hash_to_float(data_strings, 0.5,
                                    self._rescale_factor + 0.5)
    return _sparse_indices([
        tf.floor((positions + self._hash_to_float(
            tf.strings.join([salt, data_strings]), -0.5, 0.5)) *
                 self._rescaled_table_size)
        for salt in self._salts])
