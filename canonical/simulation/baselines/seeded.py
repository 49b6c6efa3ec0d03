"""Initializers seeded one after another from a debug seed (TFF's
`debug_seed`: the first gets seed + 1, the next seed + 2, ...), or unseeded
when there is none; Keras 3 draws them, so the weights are not tf.keras 2's."""

import itertools

import keras


def initializers(kind, debug_seed=None):
  """A function making the next initializer of `kind` (a Keras
  initializer class)."""
  seeds = (itertools.count(debug_seed + 1) if debug_seed is not None else
           itertools.repeat(None))
  return lambda: kind(seed=next(seeds))


def glorot_uniform(debug_seed=None):
  return initializers(keras.initializers.GlorotUniform, debug_seed)
