"""A Keras 3 model as a `FunctionalModel`: pure functions of its weights.

Canonical-form pieces are pure TensorFlow: a traced piece holds no
variables, so it serializes as a plain GraphDef. `KerasFunctionalModel`
keeps its Keras model only to call `stateless_call`, which takes the weights
as tensors and returns the updated non-trainable ones (batch statistics,
dropout seeds) instead of assigning them.

Its loss and metrics are our pure per-example functions (`losses`), kept as
sums: 'loss_sum', 'num_examples' and one per metric ('correct' for
accuracy). Its metrics as TFF reports a Keras model's are the metrics, then
'loss', 'num_examples' and 'num_batches' (`unfinalized_metrics`,
`metric_finalizers`), as `tff.learning.models.from_keras_model`'s are.
"""

import collections
import contextlib
import random

import keras
import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context as tf_context  # pylint: disable=g-direct-tensorflow-import

from canonical import errors
from canonical.learning import functional
from canonical.learning import losses as losses_lib
from canonical.learning.model_weights import ModelWeights


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
  Python's and NumPy's global generators and TensorFlow's global seed are
  restored afterwards, so callers' own randomness (a `shuffle(seed=1)` of
  their data, say) does not depend on whether a model was built.
  """
  python_state = random.getstate()
  numpy_state = np.random.get_state()
  tf_seed = tf_context.global_seed()
  keras.utils.set_random_seed(int(seed))
  try:
    yield
  finally:
    random.setstate(python_state)
    np.random.set_state(numpy_state)
    tf.random.set_seed(tf_seed)


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


def _count(value):
  """A sum of examples or batches as TFF's counters keep it: int64."""
  return [tf.cast(value, tf.int64)]


class KerasFunctionalModel(functional.FunctionalModel):
  """Pure forward pass, loss and metrics of a Keras 3 model.

  Every method is a pure function of its tensor arguments: safe to call
  inside any `tf.function`, whose graph then reads no variable of the Keras
  model. `loss` is a name in `losses.LOSSES` (sparse cross-entropy takes
  logits) or a `losses.Loss`; `metrics` names in `losses.METRICS` or
  `losses.Metric`s.
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
    # The model's weights now; inside a computation (no numpy there), when
    # first asked for.
    self._weights = (_numpy_weights(keras_model) if tf.executing_eagerly()
                     else None)
    super().__init__(
        initial_weights=((), ()),  # `initial_weights` reads the model's.
        predict_on_batch_fn=self._predict,
        loss_fn=self._mean_loss,
        metrics_fns=(self._initial_state, self._updated_state,
                     self._finalized),
        input_spec=batch_spec if batch_spec is not None else (
            self.x_spec, self.label_spec))

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
  def metrics(self):
    return self._metrics

  @property
  def metric_sum_names(self):
    """The keys of every metrics dict this model reports, in a fixed order."""
    return losses_lib.ALWAYS_SUMMED + tuple(m.sum_name for m in self._metrics)

  @property
  def weights_spec(self):
    """`ModelWeights` of `tf.TensorSpec`s, in `stateless_call`'s order."""
    return ModelWeights(
        tuple(_spec_of(v) for v in self._model.trainable_variables),
        tuple(_spec_of(v) for v in self._model.non_trainable_variables))

  @property
  def x_spec(self):
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
  def initial_weights(self):
    """The Keras model's weights when this model was made, as numpy
    `ModelWeights`: TFF's `(trainable, non_trainable)`."""
    if self._weights is None:
      self._weights = _numpy_weights(self._model)
    return self._weights

  @property
  def initial_model_weights(self):
    return tf.nest.map_structure(np.copy, self.initial_weights)

  def initial_weights_for_seed(self, seed):
    """Numpy weights of the model built afresh under
    `keras.utils.set_random_seed(seed)`: equal seeds give equal weights
    (the construction seed gives `initial_weights`)."""
    if seed is None or seed == self._seed:
      return self.initial_model_weights
    if self._model_fn is None:
      raise errors.InvalidValueError(
          'This model wraps a ready Keras model, so it can only give that '
          'model\'s weights; build it with KerasFunctionalModel.from_keras '
          'to draw initial weights for other seeds.')
    return _numpy_weights(_build(self._model_fn, seed))

  def forward(self, weights, x, training=False):
    """`(outputs, new_non_trainable)` at `weights` on a batch `x`."""
    outputs, non_trainable, _ = self._call(weights, x, training)
    return outputs, non_trainable

  def loss_and_metrics(self, weights, batch, training=True):
    """The batch's `BatchResult`; the loss is a mean, the metrics are sums.

    The loss (the one to differentiate) adds the model's regularization losses
    to the mean data loss; 'loss_sum' counts the data loss only. An empty batch
    has loss 0 rather than NaN.
    """
    x, y = functional.split_batch(batch)
    outputs, non_trainable, extra_losses = self._call(weights, x, training)
    metrics = self._batch_sums(y, outputs)
    loss = tf.math.divide_no_nan(metrics['loss_sum'], metrics['num_examples'])
    if extra_losses:
      loss += tf.add_n([tf.cast(l, tf.float32) for l in extra_losses])
    return functional.BatchResult(loss, non_trainable, metrics)

  def zero_metrics(self):
    """The metrics dict of no examples at all: the start of every sum."""
    return {name: tf.constant(0.0) for name in self.metric_sum_names}

  def mean_metrics(self, metric_sums):
    """Means from sums: 'loss' and one per metric ('correct' -> 'accuracy')."""
    num_examples = metric_sums['num_examples']
    means = {'loss': tf.math.divide_no_nan(metric_sums['loss_sum'],
                                           num_examples),
             'num_examples': num_examples}
    for metric in self._metrics:
      means[metric.name] = tf.math.divide_no_nan(
          metric_sums[metric.sum_name], num_examples)
    return means

  def unfinalized_metrics(self, sums):
    """TFF's unfinalized metrics of a Keras model: each metric's and the
    loss's `[total, count]`, then `num_examples` and `num_batches` as
    `[int64]` (the sums count batches)."""
    num_examples = sums['num_examples']
    state = collections.OrderedDict(
        (m.name, [sums[m.sum_name], num_examples]) for m in self._metrics)
    state['loss'] = [sums['loss_sum'], num_examples]
    state['num_examples'] = _count(num_examples)
    state['num_batches'] = _count(sums['num_batches'])
    return state

  def metric_finalizers(self):
    """TFF's finalizers of `unfinalized_metrics`: means divide, counts are
    read."""
    finalizers = collections.OrderedDict(
        (m.name, _mean) for m in self._metrics)
    finalizers['loss'] = _mean
    finalizers['num_examples'] = _first
    finalizers['num_batches'] = _first
    return finalizers

  # TFF's FunctionalModel members, from the same pure functions.

  def _predict(self, model_weights, x, training=True):
    trainable, non_trainable = model_weights
    outputs, _, _ = self._call(ModelWeights(trainable, non_trainable), x,
                               training)
    return outputs

  def _mean_loss(self, output, label, sample_weight=None):
    per_example = self._loss.per_example(label, output)
    if sample_weight is not None:
      per_example *= tf.reshape(tf.cast(sample_weight, tf.float32), [-1])
    return tf.math.divide_no_nan(
        tf.reduce_sum(per_example),
        tf.cast(tf.shape(per_example)[0], tf.float32))

  def _initial_state(self):
    zero = dict(self.zero_metrics(), num_batches=tf.constant(0.0))
    return self.unfinalized_metrics(zero)

  def _updated_state(self, state, labels, batch_output, sample_weight=None):
    del sample_weight  # As TFF's Keras metrics functions, unweighted.
    sums = dict(self._batch_sums(labels, batch_output.predictions),
                num_batches=tf.constant(1.0))
    return tf.nest.map_structure(tf.add, state,
                                 self.unfinalized_metrics(sums))

  def _finalized(self, state):
    return collections.OrderedDict(
        (name, finalizer(state[name]))
        for name, finalizer in self.metric_finalizers().items())

  def _batch_sums(self, labels, outputs):
    per_example = self._loss.per_example(labels, outputs)
    sums = {'loss_sum': tf.reduce_sum(per_example),
            'num_examples': tf.cast(tf.shape(per_example)[0], tf.float32)}
    for metric in self._metrics:
      sums[metric.sum_name] = tf.reduce_sum(
          metric.per_example(labels, outputs))
    return sums

  def _call(self, weights, x, training):
    trainable = tuple(tf.nest.map_structure(tf.convert_to_tensor,
                                            tuple(weights.trainable)))
    non_trainable = tuple(tf.nest.map_structure(tf.convert_to_tensor,
                                                tuple(weights.non_trainable)))
    outputs, new_non_trainable, extra_losses = self._model.stateless_call(
        trainable, non_trainable, x, training=training, return_losses=True)
    return outputs, tuple(new_non_trainable), list(extra_losses)


def _mean(values):
  return tf.math.divide_no_nan(values[0], values[1])


def _first(values):
  return values[0]
