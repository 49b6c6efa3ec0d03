"""TFF 0.87's `tff.learning.models.ModelWeights` and `weights_type_from_model`.

`ModelWeights` holds a model's trainable and non-trainable weights: tensors
in a computation, numpy arrays out of one, `tf.Variable`s or Keras variables
of a model (`from_model`), which `assign_weights_to` writes back into.
"""

from collections.abc import Mapping
from typing import Any, NamedTuple

import keras
import numpy as np
import tensorflow as tf

from canonical import errors
from canonical.learning.variable_model_base import VariableModel


def _check_model(model, who):
  if not isinstance(model, (keras.Model, VariableModel)):
    raise errors.InvalidTypeError(
        f'ModelWeights.{who}: model must be a keras.Model or a '
        'tff.learning.models.VariableModel, got '
        f'{type(model).__name__}.')


def _elements(value):
  """The values of one part of a computation's result, as a list."""
  if isinstance(value, Mapping):
    return list(value.values())
  return list(value)


class ModelWeights(NamedTuple):
  """A model's trainable and non-trainable weights (each a sequence, in the
  model's order), or values parallel to them (updates, specs).

  Tuples rather than lists inside a computation: `tf.data` packs a Python
  list into one tensor, so a list of differently shaped weights cannot be
  `Dataset.reduce` state.
  """
  trainable: Any
  non_trainable: Any

  @classmethod
  def from_model(cls, model):
    """The variables of a Keras model or a `VariableModel`."""
    _check_model(model, 'from_model')
    return cls(model.trainable_variables, model.non_trainable_variables)

  @classmethod
  def from_tff_result(cls, struct):
    """`ModelWeights` of lists from a computation's result whose parts are
    named `trainable` and `non_trainable` (a `ModelWeights`, a structure
    with those attributes, or a mapping with those keys)."""
    if isinstance(struct, Mapping):
      trainable, non_trainable = struct['trainable'], struct['non_trainable']
    elif hasattr(struct, 'trainable') and hasattr(struct, 'non_trainable'):
      trainable, non_trainable = struct.trainable, struct.non_trainable
    else:
      raise errors.InvalidTypeError(
          'ModelWeights.from_tff_result: expected a result with parts '
          f'trainable and non_trainable, got {type(struct).__name__}.')
    return cls(_elements(trainable), _elements(non_trainable))

  def assign_weights_to(self, model) -> None:
    """Writes these weights into the variables of a Keras model (in its
    `trainable_weights` / `non_trainable_weights` order) or of a
    `VariableModel`."""
    _check_model(model, 'assign_weights_to')
    if isinstance(model, keras.Model):
      pairs = (list(zip(model.trainable_weights, self.trainable)) +
               list(zip(model.non_trainable_weights, self.non_trainable)))
    else:
      pairs = (list(zip(tf.nest.flatten(model.trainable_variables),
                        tf.nest.flatten(self.trainable))) +
               list(zip(tf.nest.flatten(model.non_trainable_variables),
                        tf.nest.flatten(self.non_trainable))))
    for variable, value in pairs:
      variable.assign(value)

  def convert_variables_to_arrays(self) -> 'ModelWeights':
    """These weights with every variable or tensor read into a numpy array
    (eagerly, outside a `tf.function`)."""
    if not tf.executing_eagerly():
      raise errors.InvalidValueError(
          'ModelWeights.convert_variables_to_arrays runs eagerly only, '
          'outside a tf.function or computation.')
    return ModelWeights(
        tf.nest.map_structure(_to_array, self.trainable),
        tf.nest.map_structure(_to_array, self.non_trainable))


def _to_array(value):
  return np.array(keras.ops.convert_to_numpy(value))
