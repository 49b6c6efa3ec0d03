"""A histogram as a complete tree of sums (TFF's hierarchical histogram):
the leaves, padded with zeros to `arity**(layers - 1)`, then each parent
the sum of its `arity` children, up to the root. Held flat, root first,
layer by layer, with the row splits that cut it into layers (TFF's ragged
tensor, as `{'flat_values', 'nested_row_splits'}`)."""

import math

import numpy as np
import tensorflow as tf


def num_layers(num_leaves: int, arity: int) -> int:
  """Layers of the tree over `num_leaves` leaves (tensorflow_privacy's)."""
  return math.ceil(math.log(num_leaves, arity)) + 1


def num_nodes(num_leaves: int, arity: int) -> int:
  return (arity**num_layers(num_leaves, arity) - 1) // (arity - 1)


def row_splits(num_leaves: int, arity: int) -> np.ndarray:
  """Where each layer of the flat tree starts (and where the last ends)."""
  return np.array([0] + [(arity**(layer + 1) - 1) // (arity - 1)
                         for layer in range(num_layers(num_leaves, arity))],
                  np.int64)


def flat_tree(leaves, arity: int):
  """The flat tree over the rank-1 `leaves` (static size)."""
  size = leaves.shape[0]
  width = arity**(num_layers(size, arity) - 1)
  layer = tf.pad(leaves, [[0, width - size]])
  layers = [layer]
  while width > 1:
    width //= arity
    layer = tf.reduce_sum(tf.reshape(layer, [width, arity]), axis=1)
    layers.insert(0, layer)
  return tf.concat(layers, axis=0)


def as_ragged_struct(flat_values, num_leaves: int, arity: int):
  """TFF's form of the tree (a ragged tensor's parts):
  `{'flat_values', 'nested_row_splits': (splits,)}`."""
  return {'flat_values': flat_values,
          'nested_row_splits': (tf.constant(row_splits(num_leaves, arity)),)}
