"""The Keras metrics TFF's sequence baselines report, as Keras 3 metrics:
tokens counted, and accuracy, each leaving out some tokens (padding,
out-of-vocabulary, end of sentence)."""

import keras
import tensorflow as tf


def _weights_without(y_true, sample_weight, masked_tokens, dtype):
  """Sample weights (ones if none) zeroed where `y_true` is masked."""
  if sample_weight is None:
    weights = tf.ones_like(y_true, dtype)
  else:
    weights = tf.cast(sample_weight, dtype)
  for token in masked_tokens:
    weights *= tf.cast(tf.not_equal(y_true, token), dtype)
  return weights


class NumTokensCounter(keras.metrics.Metric):
  """How many label tokens were seen, leaving out `masked_tokens`."""

  def __init__(self, masked_tokens=None, name='num_tokens', dtype='int64'):
    super().__init__(name=name, dtype=dtype)
    self._masked_tokens = list(masked_tokens or [])
    self._count = self.add_variable(shape=(), initializer='zeros',
                                    dtype=dtype, name='sum')

  def update_state(self, y_true, y_pred, sample_weight=None):
    del y_pred  # Only the labels count.
    weights = _weights_without(y_true, sample_weight, self._masked_tokens,
                               self.dtype)
    self._count.assign_add(tf.reduce_sum(tf.reshape(weights, [-1])))

  def result(self):
    return tf.identity(self._count)

  def get_config(self):
    return {**super().get_config(),
            'masked_tokens': tuple(self._masked_tokens)}


class MaskedCategoricalAccuracy(keras.metrics.SparseCategoricalAccuracy):
  """Sparse categorical accuracy over sequences, leaving out
  `masked_tokens` of the labels."""

  def __init__(self, masked_tokens=None, name='accuracy', dtype=None):
    super().__init__(name=name, dtype=dtype)
    self._masked_tokens = list(masked_tokens or [])

  def update_state(self, y_true, y_pred, sample_weight=None):
    weights = _weights_without(y_true, sample_weight, self._masked_tokens,
                               self.dtype)
    num_classes = tf.shape(y_pred)[-1]
    super().update_state(tf.reshape(y_true, [-1]),
                         tf.reshape(y_pred, [-1, num_classes]),
                         tf.reshape(weights, [-1]))

  def get_config(self):
    return {**super().get_config(),
            'masked_tokens': tuple(self._masked_tokens)}
