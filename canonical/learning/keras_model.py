"""TFF's `from_keras_model`: a built Keras model, its data's spec, a Keras
loss and Keras metrics, as the `FunctionalModel` federated averaging takes."""

import collections.abc

import tensorflow as tf

from canonical import errors
from canonical.learning import losses
from canonical.learning import keras_functional


def from_keras_model(keras_model, loss, input_spec, loss_weights=None,
                     metrics=None, metrics_aggregator=None):
  """A `FunctionalModel` of `keras_model` training on batches like
  `input_spec`: a dict with 'x' and 'y' (TFF's `OrderedDict(x=, y=)`) or an
  `(x, y)` pair of `tf.TensorSpec`s, as the clients' datasets yield them.

  `loss` is a Keras loss (SparseCategoricalCrossentropy, on logits or
  probabilities; MeanSquaredError) and `metrics` Keras metrics
  (SparseCategoricalAccuracy), translated into pure per-example functions;
  the round's metrics take their Keras names. Raises ValueError naming what
  has no pure counterpart, or an `input_spec` whose x does not fit the model.
  TFF's `loss_weights` (several losses) and `metrics_aggregator` are refused
  by name: the metrics are summed over clients.
  """
  for name, value in (('loss_weights', loss_weights),
                      ('metrics_aggregator', metrics_aggregator)):
    if value is not None:
      raise errors.InvalidValueError(
          f'from_keras_model: {name} is not supported here: one Keras loss, '
          'and metrics summed over clients.')
  if isinstance(input_spec, collections.abc.Mapping):
    if set(input_spec) != {'x', 'y'}:
      raise errors.InvalidValueError(
          f'from_keras_model: input_spec must have keys x and y, '
          f'got {sorted(input_spec)}.')
    x_spec = input_spec['x']
  elif isinstance(input_spec, (tuple, list)) and len(input_spec) == 2:
    x_spec = input_spec[0]
  else:
    raise errors.InvalidValueError(
        'from_keras_model: input_spec must be a dict with x and '
        f'y, or an (x, y) pair, got {input_spec!r}.')
  model = keras_functional.KerasFunctionalModel(
      keras_model, losses.from_keras_loss(loss),
      [losses.from_keras_metric(m) for m in metrics or ()],
      batch_spec=tf.nest.map_structure(
          lambda s: tf.TensorSpec(s.shape, s.dtype), input_spec))
  if not tf.TensorShape(x_spec.shape).is_compatible_with(
      model.x_spec.shape):
    raise errors.InvalidValueError(
        f'from_keras_model: input_spec x is {x_spec}, but the '
        f'model takes {model.x_spec}.')
  return model
