"""The discrete Gaussian distribution (Canonne, Kamath and Steinke 2020,
arXiv:2004.00010), sampled by pure stateless TensorFlow ops from a seed.

A candidate is a discrete Laplace draw Y of scale sigma (the difference of
two geometric draws, by inverse CDF from uniforms); it is kept with
probability exp(-(|Y| - sigma)**2 / (2 sigma**2)), else redrawn. At an
integer scale sigma >= 1 about 70% of candidates are kept, so a few rounds
fill any shape. Like tensorflow_privacy's sampler this works in floating
point, so it is close to, not exactly, the discrete Gaussian: research
grade, not audited.
"""

import numpy as np
import tensorflow as tf

from encoders.core import seeds

_TINY = float(np.finfo(np.float64).tiny)  # Uniforms in (0, 1): log is finite.


def _uniform(shape, seed):
  """Uniform float64 in (0, 1)."""
  return tf.random.stateless_uniform(shape, seed, minval=_TINY,
                                     maxval=1.0, dtype=tf.float64,
                                     alg=seeds.ALGORITHM)


def _discrete_laplace(scale, shape, seed):
  """Draws of P(y) proportional to exp(-|y| / scale), int64."""
  def geometric(part):
    return tf.floor(-scale * tf.math.log(_uniform(shape,
                                                  seeds.fold_in(seed, part))))
  return tf.cast(geometric(0) - geometric(1), tf.int64)


def sample_discrete_gaussian(scale, shape, seed, dtype=tf.int32):
  """Draws of the discrete Gaussian of integer `scale` >= 0 (0: zeros),
  `shape` (a list or tensor), from `seed` ([2] int64): the same seed gives
  the same draws."""
  scale = tf.cast(scale, tf.int64)
  sigma = tf.cast(tf.maximum(scale, 1), tf.float64)

  def draw(attempt, found, done):
    seed_now = seeds.fold_in(seed, attempt)
    candidates = _discrete_laplace(sigma, tf.shape(found),
                                   seeds.fold_in(seed_now, 0))
    distance = tf.abs(tf.cast(candidates, tf.float64)) - sigma
    keep = _uniform(tf.shape(found), seeds.fold_in(seed_now, 1)) < tf.exp(
        -distance * distance / (2.0 * sigma * sigma))
    take = keep & tf.logical_not(done)
    return (attempt + 1, tf.where(take, candidates, found), done | keep)

  zeros = tf.zeros(shape, tf.int64)
  _, found, _ = tf.while_loop(
      lambda attempt, found, done: tf.logical_not(tf.reduce_all(done)), draw,
      (tf.constant(0, tf.int64), zeros, tf.zeros(shape, tf.bool)))
  return tf.cast(tf.where(scale > 0, found, zeros), dtype)
