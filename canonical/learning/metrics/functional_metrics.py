"""TFF 0.87's `create_functional_metric_fns`: Keras metrics as a
`FunctionalModel`'s pure `(initialize, update, finalize)` functions.

The state of each metric is its Keras variables' values, in their order:
`(total, count)` for a mean (accuracy, cross-entropy, squared error),
`(total,)` for a counter, so the state and its sum over clients are TFF's.
Each metric runs as a pure twin of its `update_state` and `result`:
ours for the metrics `losses` computes per example (accuracy, sparse
cross-entropy, squared error) and for the counters; any other Keras metric
runs itself, on variables made afresh in the call, which the compiler
lowers into values.
"""

import collections
import collections.abc
import functools
from typing import Callable

import keras
import tensorflow as tf

from canonical import errors
from canonical.learning import losses

_WHO = 'create_functional_metric_fns'


class _Twin:
  """A Keras metric as pure functions of its variables' values (a plain
  object, so that `tf.nest` sees it as one leaf)."""

  def __init__(self, initial: Callable, update: Callable, result: Callable,
               size: int):
    self.initial = initial  # () -> tuple of `size` tensors
    self.update = update  # (state, labels, predictions) -> state
    self.result = result  # state -> value
    self.size = size


def _mean_twin(per_example, dtype):
  """Keras's `Mean` of per-example values: `(total, count)`."""

  def initial():
    return (tf.zeros([], dtype), tf.zeros([], dtype))

  def update(state, labels, predictions):
    values = tf.cast(per_example(labels, predictions), dtype)
    return (state[0] + tf.reduce_sum(values),
            state[1] + tf.cast(tf.size(values), dtype))

  def result(state):
    return tf.math.divide_no_nan(state[0], state[1])

  return _Twin(initial, update, result, 2)


def _count_twin(count, dtype):
  """Keras's `Sum` of one count per batch: `(total,)`."""

  def initial():
    return (tf.zeros([], dtype),)

  def update(state, labels, predictions):
    del predictions
    return (state[0] + tf.cast(count(labels), dtype),)

  def result(state):
    return state[0]

  return _Twin(initial, update, result, 1)


def _examples(labels):
  return tf.shape(tf.nest.flatten(labels)[0])[0]


def _batches(labels):
  del labels
  return 1


# Keras metric classes with a pure twin, by name (tf.keras and keras alike).
_MEANS = {
    'SparseCategoricalAccuracy': lambda m: losses.METRICS[
        'sparse_categorical_accuracy'].per_example,
    'SparseCategoricalCrossentropy': lambda m: losses.from_keras_loss(
        m).per_example,
    'MeanSquaredError': lambda m: losses.from_keras_loss(m).per_example,
}
_COUNTS = {'NumExamplesCounter': _examples, 'NumBatchesCounter': _batches}


def _keras_twin(metric, make):
  """Any Keras metric, run on fresh variables: `make()` builds it afresh,
  its variables take the state, `update_state` / `result` run. Inside a
  computation those variables are call-local, so the compiler lowers them
  into values (`canonical.core.local_variables`); the state is their
  values, in the metric's order."""
  initial_values = [keras.ops.convert_to_numpy(v) for v in metric.variables]

  def fresh(state):
    fresh_metric = make()
    for variable, value in zip(fresh_metric.variables, state):
      variable.assign(value)
    return fresh_metric

  def initial():
    return tuple(tf.constant(v) for v in initial_values)

  def update(state, labels, predictions):
    updated = fresh(state)
    updated.update_state(labels, predictions)
    return tuple(tf.convert_to_tensor(v) for v in updated.variables)

  def result(state):
    return tf.convert_to_tensor(fresh(state).result())

  return _Twin(initial, update, result, len(initial_values))


def twin_of(metric, make=None):
  """The pure twin of a Keras metric object: our own for the metrics
  `losses` computes (TFF's numbers, bit for bit), otherwise the metric
  itself on fresh variables, rebuilt by `make()` (default: from its
  config)."""
  if not isinstance(metric, keras.metrics.Metric):
    raise errors.InvalidTypeError(
        f'{_WHO}: metrics_constructor must make Keras metrics '
        '(keras.metrics.Metric), got '
        f'{type(metric).__name__}: {metric!r}.')
  name = type(metric).__name__
  dtype = tf.as_dtype(metric.dtype or 'float32')
  if name in _MEANS:
    return _mean_twin(_MEANS[name](metric), dtype)
  if name in _COUNTS:
    return _count_twin(_COUNTS[name], dtype)
  if make is None:
    make = functools.partial(type(metric).from_config, metric.get_config())
  return _keras_twin(metric, make)


def _twins(metrics_constructor):
  """The structure `metrics_constructor()` makes, with each Keras metric
  replaced by its twin (each rebuilt, when needed, by its own constructor
  or by `metrics_constructor` itself)."""
  leaf_makers = None
  if isinstance(metrics_constructor, collections.OrderedDict):
    constructors = metrics_constructor
    if not all(callable(c) for c in tf.nest.flatten(constructors)):
      raise errors.InvalidTypeError(
          f'{_WHO}: an OrderedDict metrics_constructor maps names to metric '
          'constructors (e.g. tf.keras.metrics.SparseCategoricalAccuracy), '
          f'got {constructors!r}.')
    leaf_makers = tf.nest.flatten(constructors)
    metrics_constructor = functools.partial(
        tf.nest.map_structure, lambda make: make(), constructors)
  if not callable(metrics_constructor):
    raise errors.InvalidTypeError(
        f'{_WHO}: metrics_constructor must be a function making Keras '
        'metrics (a metric, or an OrderedDict or list of them) or an '
        'OrderedDict of metric constructors, got '
        f'{type(metrics_constructor).__name__}.')
  structure = metrics_constructor()
  if isinstance(structure, collections.abc.Mapping):
    bad = [key for key in structure if not isinstance(key, str)]
    if bad:
      raise errors.InvalidTypeError(
          f'{_WHO}: the metrics are keyed by name (str); keys {bad!r} are '
          'not.')
  metrics = tf.nest.flatten(structure)
  if leaf_makers is None:
    leaf_makers = [
        (lambda i=i: tf.nest.flatten(metrics_constructor())[i])
        for i in range(len(metrics))]
  return tf.nest.pack_sequence_as(structure, [
      twin_of(metric, make) for metric, make in zip(metrics, leaf_makers)])


def create_functional_metric_fns(metrics_constructor):
  """`(initialize, update, finalize)` of the Keras metrics that
  `metrics_constructor` makes: a no-argument function returning a metric,
  or an OrderedDict (or list) of them, or an OrderedDict of metric
  constructors (`OrderedDict(accuracy=tf.keras.metrics.
  SparseCategoricalAccuracy)`). `update(state, labels, batch_output)`
  reads `batch_output.predictions`; the state mirrors the metrics'
  structure, each metric's variables as a tuple."""
  twins = _twins(metrics_constructor)

  flat_twins = tf.nest.flatten(twins)
  sizes = [twin.size for twin in flat_twins]

  def per_metric(state):
    """Each metric's state (a tuple of its values), in `flat_twins` order."""
    values, states = tf.nest.flatten(state), []
    for size in sizes:
      states.append(tuple(values[:size]))
      values = values[size:]
    return states

  def initialize():
    return tf.nest.pack_sequence_as(
        twins, [twin.initial() for twin in flat_twins])

  def update(state, labels, batch_output, sample_weight=None):
    del sample_weight  # As TFF's: the metrics are unweighted.
    if not hasattr(batch_output, 'predictions'):
      raise errors.InvalidTypeError(
          f'{_WHO}: update reads batch_output.predictions; give it a '
          'tff.learning.models.BatchOutput, got '
          f'{type(batch_output).__name__}.')
    predictions = batch_output.predictions
    return tf.nest.pack_sequence_as(twins, [
        twin.update(value, labels, predictions)
        for twin, value in zip(flat_twins, per_metric(state))])

  def finalize(state):
    return tf.nest.pack_sequence_as(twins, [
        twin.result(value)
        for twin, value in zip(flat_twins, per_metric(state))])

  return initialize, update, finalize
