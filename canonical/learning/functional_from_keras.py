"""TFF 0.87's `functional_model_from_keras`: a Keras model, a Keras loss and
Keras metrics as a `FunctionalModel` of pure functions.

The model runs through Keras 3's `stateless_call` on the weights it is
given; the loss is our pure twin of the Keras loss (`losses`), or the Keras
loss object itself (Keras 3 losses are pure functions); the metrics are
`create_functional_metric_fns(metrics_constructor)`. As in TFF, the
model's metrics are only those (no loss or example count is added), and a
model that updates weights while it trains (batch normalization) is
refused: a `FunctionalModel` keeps its non-trainable weights fixed.
"""

import inspect

import keras
import numpy as np
import tensorflow as tf

from canonical import errors
from canonical.learning import functional
from canonical.learning import losses
from canonical.learning.metrics import functional_metrics

_WHO = 'functional_model_from_keras'


class KerasFunctionalModelError(errors.InvalidValueError):
  """A Keras model that cannot be a `FunctionalModel`."""


def _keras_model_of(keras_model):
  if isinstance(keras_model, keras.Model):
    return keras_model
  if not callable(keras_model):
    raise errors.InvalidTypeError(
        f'{_WHO}: keras_model must be a keras.Model or a no-argument function '
        f'returning one, got {type(keras_model).__name__}.')
  model = keras_model()
  if not isinstance(model, keras.Model):
    raise errors.InvalidTypeError(
        f'{_WHO}: keras_model() returned {type(model).__name__}, not a '
        'keras.Model.')
  return model


def _layers(model):
  """Every layer of `model`, nested ones included."""
  for layer in model.layers:
    yield layer
    if isinstance(layer, keras.Model):
      yield from _layers(layer)


def _check_model(model):
  for layer in _layers(model):
    if isinstance(layer, keras.layers.BatchNormalization):
      raise KerasFunctionalModelError(
          f'{_WHO}: the Keras model has a BatchNormalization layer '
          f'({layer.name!r}), which updates its statistics while it trains; '
          'a FunctionalModel keeps its non-trainable weights fixed. Use '
          'GroupNormalization, or tff.learning.models.from_keras_model.')
  if not model.built or not model.weights:
    raise errors.InvalidValueError(
        f'{_WHO}: the Keras model must be built, with weights: give it an '
        'input shape (keras.Input(shape=...)).')


def _loss_fn_of(loss):
  """`loss(output, label, sample_weight)`: our pure twin of a Keras loss
  when there is one (a mean over the batch, weighted as Keras weighs), the
  Keras loss itself otherwise."""
  if not callable(loss):
    raise errors.InvalidTypeError(
        f'{_WHO}: loss_fn must be a Keras loss (e.g. tf.keras.losses.'
        f'SparseCategoricalCrossentropy()), got {type(loss).__name__}.')
  try:
    parameter = inspect.signature(loss).parameters.get('sample_weight')
  except (TypeError, ValueError):
    parameter = None
  if parameter is not None and parameter.default not in (
      None, inspect.Parameter.empty):
    raise KerasFunctionalModelError(
        f'{_WHO}: loss_fn defaults sample_weight to {parameter.default!r}; '
        'as in TFF, only a loss whose sample_weight defaults to None is '
        'taken.')
  try:
    twin = losses.from_keras_loss(loss)
  except errors.InvalidValueError:
    twin = None
  if twin is None:
    def keras_loss(output, label, sample_weight=None):
      return loss(label, output, sample_weight=sample_weight)

    return keras_loss

  def pure_loss(output, label, sample_weight=None):
    per_example = twin.per_example(label, output)
    if sample_weight is not None:
      per_example *= tf.reshape(tf.cast(sample_weight, per_example.dtype),
                                tf.shape(per_example))
    return tf.math.divide_no_nan(
        tf.reduce_sum(per_example),
        tf.cast(tf.size(per_example), per_example.dtype))

  return pure_loss


def functional_model_from_keras(keras_model, loss_fn, input_spec,
                                metrics_constructor=None):
  """A `FunctionalModel` of `keras_model` (a Keras model or a no-argument
  function making one; its current weights are the initial ones), training
  on `loss_fn` (a Keras loss), on batches like `input_spec` (`(x, y)` or a
  mapping with 'x' and 'y'), with the Keras metrics `metrics_constructor`
  makes (see `tff.learning.metrics.create_functional_metric_fns`)."""
  model = _keras_model_of(keras_model)
  _check_model(model)
  loss = _loss_fn_of(loss_fn)
  if metrics_constructor is None:
    metrics_fns = (functional.empty_metrics_state,
                   functional.noop_update_metrics,
                   functional.noop_finalize_metrics)
  else:
    metrics_fns = functional_metrics.create_functional_metric_fns(
        metrics_constructor)

  def predict_on_batch(model_weights, x, training=True):
    trainable, non_trainable = model_weights
    outputs, _ = model.stateless_call(
        [tf.convert_to_tensor(w) for w in trainable],
        [tf.convert_to_tensor(w) for w in non_trainable], x,
        training=training)
    return outputs

  initial_weights = (
      tuple(np.array(keras.ops.convert_to_numpy(v))
            for v in model.trainable_variables),
      tuple(np.array(keras.ops.convert_to_numpy(v))
            for v in model.non_trainable_variables))
  return functional.FunctionalModel(
      initial_weights=initial_weights, predict_on_batch_fn=predict_on_batch,
      loss_fn=loss, metrics_fns=metrics_fns, input_spec=input_spec)
