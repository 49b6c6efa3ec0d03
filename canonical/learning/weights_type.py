"""TFF 0.87's `tff.learning.models.weights_type_from_model`.

Apart from `model_weights.py`, which `functional.py` imports, so that the
weights' container does not import the models it describes.
"""

import tensorflow as tf

from canonical import errors
from canonical.learning import functional
from canonical.learning.model_weights import ModelWeights
from canonical.learning.variable_model_base import VariableModel


def weights_type_from_model(model) -> ModelWeights:
  """The type of `ModelWeights.from_model(model)`: `ModelWeights` of
  `tf.TensorSpec`s (types here are TensorFlow's specs). `model` is a
  `VariableModel`, a `FunctionalModel`, or a no-argument function making
  one."""
  if callable(model) and not isinstance(
      model, (VariableModel, functional.FunctionalModel)):
    model = model()
  if isinstance(model, functional.FunctionalModel):
    return model.weights_spec
  if not isinstance(model, VariableModel):
    raise errors.InvalidTypeError(
        'weights_type_from_model: model must be a tff.learning.models.'
        'VariableModel or FunctionalModel, or a function returning one, got '
        f'{type(model).__name__}.')
  weights = ModelWeights.from_model(model)
  return ModelWeights(
      tuple(_spec(v) for v in tf.nest.flatten(weights.trainable)),
      tuple(_spec(v) for v in tf.nest.flatten(weights.non_trainable)))


def _spec(variable):
  return tf.TensorSpec(tuple(variable.shape), tf.as_dtype(variable.dtype))
