"""A Keras 3 model as pure functions of its weights.

Canonical-form pieces are pure TensorFlow: a traced piece holds no variables,
so it serializes as a plain GraphDef. `FunctionalModel` keeps its Keras model
only to call `stateless_call`, which takes the weights as tensors and returns
the updated non-trainable ones (batch statistics, dropout seeds) instead of
assigning them.
"""

import contextlib
import random
from collections.abc import Mapping
from typing import NamedTuple

import keras
import numpy as np
import tensorflow as tf

from canonical import errors
from canonical.learning import losses as losses_lib


class ModelWeights(NamedTuple):
  """Trainable and non-trainable weights, each a tuple in the Keras model's order.

  Tuples rather than lists: tf.data packs a Python list into a single tensor,
  so a list of differently shaped weights cannot be `Dataset.reduce` state.
  """
  trainable: tuple
  non_trainable: tuple


class BatchOutput(NamedTuple):
  """One batch's training objective, updated non-trainables and metric sums."""
  loss: tf.Tensor  # mean loss plus regularization: what gradients are taken of
  non_trainable: tuple
  metrics: dict  # sums: 'loss_sum', 'num_examples' and one per metric


def split_batch(batch):
  """`(x, y)` from a batch given as an `(x, y)` pair or a dict with 'x' and 'y'."""
  if isinstance(batch, Mapping) and 'x' in batch and 'y' in batch:
    return batch['x'], batch['y']
  if isinstance(batch, (tuple, list)) and len(batch) == 2:
    return batch[0], batch[1]
  raise errors.InvalidTypeError(
      'A batch must be an (x, y) pair or a dict with keys "x" and "y"; got '
      f'{tf.nest.map_structure(lambda t: getattr(t, "dtype", t), batch)!r}.')


def without_empty_batches(dataset):
  """`dataset` without its zero-size batches, so that training and
  evaluation never run on one. (A training step on one would still move
  weights under momentum; and on CPUs where oneDNN runs them, e.g. with
  AVX-512/AMX, its max-pool gradient aborts the process on a zero-size batch
  and its convolution refuses one.)"""

  def has_examples(*parts):  # tf.data passes a tuple's parts one by one.
    x, _ = split_batch(parts[0] if len(parts) == 1 else parts)
    return tf.shape(x)[0] > 0

  return dataset.filter(has_examples)


def _spec_of(variable):
  return tf.TensorSpec(tuple(variable.shape), tf.as_dtype(variable.dtype))


def _numpy_weights(model):
  return ModelWeights(
      tuple(np.array(v.numpy()) for v in model.trainable_variables),
      tuple(np.array(v.numpy()) for v in model.non_trainable_variables))


@contextlib.contextmanager
def _keras_seed(seed):
  """Seeds Keras (`keras.utils.set_random_seed`) for building one model.

  Keras 3 draws each initializer's seed from Python's `random` when the layer
  is made, so this makes a model's initial weights a function of `seed`.
  Python's and NumPy's global generators are restored afterwards so callers'
  own randomness (shuffling data, say) does not change; TensorFlow's global
  seed stays at `seed` (our pieces only use stateless random ops).
  """
  python_state = random.getstate()
  numpy_state = np.random.get_state()
  keras.utils.set_random_seed(int(seed))
  try:
    yield
  finally:
    random.setstate(python_state)
    np.random.set_state(numpy_state)


def _build(model_fn, seed):
  with _keras_seed(seed):
    model = model_fn()
  if not isinstance(model, keras.Model):
    raise errors.InvalidTypeError(
        f'model_fn must return a keras.Model, got {type(model)}.')
  if not model.built or not model.weights:
    raise errors.InvalidValueError(
        'model_fn must return a built model with weights: give it an explicit '
        'input shape (keras.Input(shape=...)) so its weights exist before any '
        'data is seen.')
  return model


class FunctionalModel:
  """Pure forward pass, loss and metrics of a Keras 3 model.

  Every method is a pure function of its tensor arguments: safe to call inside
  any `tf.function`, whose graph then reads no variable of the Keras model.
  """

  def __init__(self, keras_model, loss='sparse_categorical_crossentropy',
               metrics=('accuracy',), model_fn=None, seed=None,
               batch_spec=None):
    if not getattr(keras_model, 'inputs', None):
      raise errors.InvalidValueError(
          'The Keras model has no symbolic inputs: build it as a Sequential '
          'or functional model that starts with keras.Input(shape=...).')
    self._model = keras_model
    self._loss = losses_lib.get_loss(loss)
    self._metrics = losses_lib.get_metrics(metrics, self._loss)
    self._model_fn = model_fn
    self._seed = seed
    self._initial_weights = _numpy_weights(keras_model)
    self._batch_spec = batch_spec

  @classmethod
  def from_keras(cls, model_fn, loss='sparse_categorical_crossentropy',
                 metrics=('accuracy',), seed=0):
    """Builds `model_fn()` once, seeded, and wraps it.

    `model_fn` makes a fresh Keras model with an explicit input shape. `loss`
    is a name in `losses.LOSSES` (sparse cross-entropy takes logits) and
    `metrics` names in `losses.METRICS`.
    """
    return cls(_build(model_fn, seed), loss, metrics, model_fn=model_fn,
               seed=seed)

  @property
  def keras_model(self):
    return self._model

  @property
  def loss(self):
    return self._loss

  @property
  def metrics(self):
    return self._metrics

  @property
  def metric_sum_names(self):
    """The keys of every metrics dict this model reports, in a fixed order."""
    return losses_lib.ALWAYS_SUMMED + tuple(m.sum_name for m in self._metrics)

  @property
  def weights_spec(self):
    """`ModelWeights` of `tf.TensorSpec`, in the order `stateless_call` takes."""
    return ModelWeights(
        tuple(_spec_of(v) for v in self._model.trainable_variables),
        tuple(_spec_of(v) for v in self._model.non_trainable_variables))

  @property
  def input_spec(self):
    """Spec of one batch of `x` (batch dimension None)."""
    specs = [tf.TensorSpec(tuple(t.shape), tf.as_dtype(t.dtype))
             for t in self._model.inputs]
    return specs[0] if len(specs) == 1 else tuple(specs)

  @property
  def label_spec(self):
    """Spec of one batch of `y`: int32 class ids, or outputs-shaped floats."""
    if self._loss.class_labels:
      return tf.TensorSpec([None], tf.int32)
    return tf.TensorSpec(tuple(self._model.outputs[0].shape), tf.float32)

  @property
  def batch_spec(self):
    """Spec of one `(x, y)` batch (or the `{'x', 'y'}` one given);
    `tf.data.DatasetSpec(batch_spec)` types a dataset."""
    if self._batch_spec is not None:
      return self._batch_spec
    return (self.input_spec, self.label_spec)

  def initial_weights(self, seed=None):
    """Numpy weights of a freshly built model.

    With `seed` None (or the construction seed) these are the weights of the
    model built at construction; another seed rebuilds the model under
    `keras.utils.set_random_seed(seed)`, so equal seeds give equal weights.
    """
    if seed is None or seed == self._seed:
      return tf.nest.map_structure(np.copy, self._initial_weights)
    if self._model_fn is None:
      raise errors.InvalidValueError(
          'This FunctionalModel wraps a ready Keras model, so it can only give '
          'that model\'s weights; build it with FunctionalModel.from_keras to '
          'draw initial weights for other seeds.')
    return _numpy_weights(_build(self._model_fn, seed))

  def forward(self, weights, x, training=False):
    """`(outputs, new_non_trainable)` of the model at `weights` on a batch `x`."""
    outputs, non_trainable, _ = self._call(weights, x, training)
    return outputs, non_trainable

  def loss_and_metrics(self, weights, batch, training=True):
    """The batch's `BatchOutput`; the loss is a mean, the metrics are sums.

    The loss (the one to differentiate) adds the model's regularization losses
    to the mean data loss; 'loss_sum' counts the data loss only. An empty batch
    has loss 0 rather than NaN.
    """
    x, y = split_batch(batch)
    outputs, non_trainable, extra_losses = self._call(weights, x, training)
    per_example = self._loss.per_example(y, outputs)
    num_examples = tf.cast(tf.shape(per_example)[0], tf.float32)
    loss_sum = tf.reduce_sum(per_example)
    loss = tf.math.divide_no_nan(loss_sum, num_examples)
    if extra_losses:
      loss += tf.add_n([tf.cast(l, tf.float32) for l in extra_losses])
    metrics = {'loss_sum': loss_sum, 'num_examples': num_examples}
    for metric in self._metrics:
      metrics[metric.sum_name] = tf.reduce_sum(metric.per_example(y, outputs))
    return BatchOutput(loss, non_trainable, metrics)

  def zero_metrics(self):
    """The metrics dict of no examples at all: the start of every sum."""
    return {name: tf.constant(0.0) for name in self.metric_sum_names}

  def mean_metrics(self, metric_sums):
    """Means from sums: 'loss' and one per metric ('correct' -> 'accuracy')."""
    num_examples = metric_sums['num_examples']
    means = {'loss': tf.math.divide_no_nan(metric_sums['loss_sum'], num_examples),
             'num_examples': num_examples}
    for metric in self._metrics:
      means[metric.name] = tf.math.divide_no_nan(
          metric_sums[metric.sum_name], num_examples)
    return means

  def _call(self, weights, x, training):
    trainable = tuple(tf.nest.map_structure(tf.convert_to_tensor,
                                            tuple(weights.trainable)))
    non_trainable = tuple(tf.nest.map_structure(tf.convert_to_tensor,
                                                tuple(weights.non_trainable)))
    outputs, new_non_trainable, extra_losses = self._model.stateless_call(
        trainable, non_trainable, x, training=training, return_losses=True)
    return outputs, tuple(new_non_trainable), list(extra_losses)

