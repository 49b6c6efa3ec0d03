"""Seeds for stateless random ops, so every encoding is a pure function.

Randomness shared by all clients (a rotation's signs) comes from a seed in the
params alone. Randomness that must differ between clients (stochastic rounding,
which coordinates to keep) also folds in a fingerprint of the input itself, so
two clients with different data draw independent noise from the same params.
"""

import tensorflow as tf

# Enough sampled elements to tell clients' updates apart, few enough to cost nothing.
_FINGERPRINT_SAMPLES = 4096

_INT_OF_WIDTH = {1: tf.uint8, 2: tf.int16, 4: tf.int32, 8: tf.int64}


def initial_seed(seed):
  """The `[2]` int64 seed tensor for a Python integer."""
  return tf.constant([0, int(seed)], dtype=tf.int64)


def fingerprint(x):
  """An int64 scalar that depends on the bits of (a sample of) `x`."""
  flat = tf.reshape(x, [-1])
  size = tf.size(flat, out_type=tf.int64)
  stride = tf.maximum(size // _FINGERPRINT_SAMPLES, 1)
  sample = tf.strided_slice(flat, [0], [size], [stride])
  if sample.dtype.is_floating or sample.dtype.is_complex:
    sample = tf.bitcast(sample, _INT_OF_WIDTH[sample.dtype.size])
  sample = tf.cast(sample, tf.int64)
  weights = tf.range(1, tf.size(sample, out_type=tf.int64) + 1) * 2654435761
  return tf.reduce_sum(sample * weights) + size


def client_seed(seed, x):
  """Folds a fingerprint of `x` into `seed`: independent noise per input."""
  return _fold_in(seed, fingerprint(x))


def next_seed(seed):
  """The seed of the next round, for stages that keep their seed as state."""
  return _fold_in(seed, tf.constant(1, tf.int64))


def _fold_in(seed, data):
  folded = tf.random.experimental.stateless_fold_in(tf.cast(seed, tf.int64), data)
  return tf.cast(folded, tf.int64)
