"""Losses and metrics by name, as pure per-example functions of (labels, outputs).

Everything is per example so that a batch reports sums: sums add up across
batches, clients and aggregation tiers, while means do not.
"""

from typing import Callable, NamedTuple

import tensorflow as tf

from canonical import errors


class Loss(NamedTuple):
  """A loss on a model's raw outputs (logits for classifiers)."""
  name: str
  per_example: Callable  # (labels, outputs) -> [batch] float32
  class_labels: bool  # labels are integer class ids (one per example)


class Metric(NamedTuple):
  """A metric kept as a sum over examples; its mean is `sum / num_examples`."""
  name: str  # the mean's name, e.g. 'accuracy'
  sum_name: str  # the sum's key in a metrics dict, e.g. 'correct'
  per_example: Callable  # (labels, outputs) -> [batch] float32
  needs_class_labels: bool


def _class_ids(labels, logits):
  """Labels as int64 class ids shaped like the logits' batch dims ([B] or [B, 1] in)."""
  return tf.reshape(tf.cast(labels, tf.int64), tf.shape(logits)[:-1])


def _sparse_categorical_crossentropy(labels, logits):
  logits = tf.cast(logits, tf.float32)
  return tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=_class_ids(labels, logits), logits=logits)


# Keras clips probabilities to [eps, 1 - eps] before their log.
_KERAS_EPSILON = 1e-7


def _sparse_categorical_crossentropy_of_probabilities(labels, probabilities):
  """Keras's cross-entropy on probabilities (`from_logits=False`): clipped to
  [eps, 1 - eps], then the softmax cross-entropy of their logs, which
  renormalizes rows that do not sum to 1 (as Keras does)."""
  probabilities = tf.clip_by_value(tf.cast(probabilities, tf.float32),
                                   _KERAS_EPSILON, 1.0 - _KERAS_EPSILON)
  return _sparse_categorical_crossentropy(labels, tf.math.log(probabilities))


def _mean_squared_error(labels, outputs):
  outputs = tf.cast(outputs, tf.float32)
  labels = tf.reshape(tf.cast(labels, tf.float32), tf.shape(outputs))
  squared = tf.math.squared_difference(outputs, labels)
  return tf.reduce_mean(tf.reshape(squared, [tf.shape(outputs)[0], -1]), axis=1)


def _correct(labels, logits):
  predicted = tf.argmax(logits, axis=-1, output_type=tf.int64)
  return tf.cast(tf.equal(predicted, _class_ids(labels, logits)), tf.float32)


# Sums every batch reports, whatever the metrics.
ALWAYS_SUMMED = ('loss_sum', 'num_examples')

LOSSES = {
    'sparse_categorical_crossentropy': Loss(
        'sparse_categorical_crossentropy', _sparse_categorical_crossentropy,
        class_labels=True),
    'mean_squared_error': Loss(
        'mean_squared_error', _mean_squared_error, class_labels=False),
    'sparse_categorical_crossentropy_of_probabilities': Loss(
        'sparse_categorical_crossentropy_of_probabilities',
        _sparse_categorical_crossentropy_of_probabilities, class_labels=True),
}

METRICS = {
    'accuracy': Metric('accuracy', 'correct', _correct, needs_class_labels=True),
    # Keras's SparseCategoricalAccuracy: the same count, under Keras's name.
    'sparse_categorical_accuracy': Metric(
        'sparse_categorical_accuracy', 'correct', _correct,
        needs_class_labels=True),
}


def from_keras_loss(loss):
  """The pure loss a Keras loss object (or its name) computes per example.

  SparseCategoricalCrossentropy (logits or probabilities) and
  MeanSquaredError translate; anything else is a ValueError naming it.
  """
  if isinstance(loss, (str, Loss)):
    return get_loss(loss)
  name = type(loss).__name__
  config = loss.get_config() if hasattr(loss, 'get_config') else {}
  if name == 'SparseCategoricalCrossentropy':
    if config.get('ignore_class') is not None:
      raise errors.InvalidValueError(
          'Keras SparseCategoricalCrossentropy with ignore_class '
          'has no pure counterpart here.')
    return LOSSES['sparse_categorical_crossentropy' if config.get(
        'from_logits') else 'sparse_categorical_crossentropy_of_probabilities']
  if name == 'MeanSquaredError':
    return LOSSES['mean_squared_error']
  raise errors.InvalidValueError(
      f'Keras loss {name} has no pure counterpart here; use '
      'SparseCategoricalCrossentropy or MeanSquaredError, or a '
      f'name in {sorted(LOSSES)}.')


def from_keras_metric(metric):
  """The pure metric a Keras metric object (or its name) counts."""
  if isinstance(metric, (str, Metric)):
    return metric
  name = type(metric).__name__
  if name == 'SparseCategoricalAccuracy':
    return METRICS['sparse_categorical_accuracy']
  raise errors.InvalidValueError(
      f'Keras metric {name} has no pure counterpart here; use '
      f'SparseCategoricalAccuracy or a name in {sorted(METRICS)}.')


def get_loss(name):
  """The loss called `name` (sparse cross-entropy takes logits, not probabilities)."""
  if isinstance(name, Loss):
    return name
  if name not in LOSSES:
    raise errors.InvalidValueError(
        f'Unknown loss {name!r}; known losses: {sorted(LOSSES)}.')
  return LOSSES[name]


def get_metrics(names, loss):
  """The metrics called `names`, checked to make sense with `loss`."""
  metrics = []
  for name in names:
    metric = name if isinstance(name, Metric) else METRICS.get(name)
    if metric is None:
      raise errors.InvalidValueError(
          f'Unknown metric {name!r}; known metrics: {sorted(METRICS)}.')
    if metric.needs_class_labels and not loss.class_labels:
      raise errors.InvalidValueError(
          f'Metric {metric.name!r} needs integer class labels, but loss '
          f'{loss.name!r} does not take class labels.')
    metrics.append(metric)
  sum_names = [m.sum_name for m in metrics] + list(ALWAYS_SUMMED)
  if len(set(sum_names)) != len(sum_names):
    raise errors.InvalidValueError(f'Metric sums repeat a name: {sum_names}.')
  return tuple(metrics)
