"""TFF 0.87's counters: Keras metrics of the examples and batches seen
(`int64` sums, unweighted), as `from_keras_model`'s models report them."""

import numpy as np
import keras
import tensorflow as tf

from canonical import errors


class NumExamplesCounter(keras.metrics.Sum):
  """Counts examples: the first dimension of the (first) labels."""

  def __init__(self, name='num_examples', dtype=tf.int64):
    super().__init__(name, dtype)

  def update_state(self, y_true, y_pred=None, sample_weight=None):
    del y_pred, sample_weight  # Every example counts once.
    labels = tf.nest.flatten(y_true)
    if not all(tf.is_tensor(l) or isinstance(l, np.ndarray) for l in labels):
      raise errors.InvalidTypeError(
          'NumExamplesCounter counts tensors or numpy arrays of labels; '
          f'convert the labels first (np.asarray), got {labels!r}.')
    return super().update_state(tf.shape(labels[0])[0])


class NumBatchesCounter(keras.metrics.Sum):
  """Counts batches: one per update."""

  def __init__(self, name='num_batches', dtype=tf.int64):
    super().__init__(name, dtype)

  def update_state(self, y_true, y_pred=None, sample_weight=None):
    del y_true, y_pred, sample_weight  # Every batch counts once.
    return super().update_state(1)
