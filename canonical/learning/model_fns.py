"""What users pass as a model and as optimizers, made into ours."""

import keras

from canonical import errors
from canonical.learning import keras_functional
from canonical.learning import keras_optimizers
from canonical.learning import model as model_lib
from canonical.learning import models
from canonical.learning import optimizers
from canonical.learning import variable_model


def functional_model_of(model_fn, who):
  """The `FunctionalModel` that `model_fn` names.

  `model_fn` is a no-argument function returning a `FunctionalModel` (TFF's
  pattern) or a `VariableModel` (run as pure functions of its weights,
  `variable_model.functions_of`), or returning a built `keras.Model`
  (wrapped with the default sparse cross-entropy loss on logits and
  accuracy), or a `FunctionalModel` itself (which saves building the Keras
  model once per builder).
  """
  if isinstance(model_fn, model_lib.FunctionalModel):
    return model_fn
  if not callable(model_fn):
    raise errors.InvalidTypeError(
        f'{who}: model_fn must be a no-argument function returning '
        f'a canonical.learning.FunctionalModel, got {model_fn!r}.')
  model = model_fn()
  if isinstance(model, model_lib.FunctionalModel):
    return model
  pure = getattr(model, 'functional_model', None)  # model_from_functional's
  if isinstance(model, models.VariableModel) and isinstance(
      pure, model_lib.FunctionalModel):
    return pure
  if isinstance(model, models.VariableModel):
    # Made afresh inside each computation, its variables lowered into values.
    return variable_model.functions_of(model_fn, model)
  if isinstance(model, keras.Model):
    return keras_functional.KerasFunctionalModel(model)
  raise errors.InvalidTypeError(
      f'{who}: model_fn returned {type(model).__name__}; it must return a '
      'canonical.learning.FunctionalModel (e.g. '
      'KerasFunctionalModel.from_keras(builder)) or a built keras.Model.')


def optimizer_of(optimizer_fn, who):
  """The pure optimizer that `optimizer_fn` names.

  As TFF 0.87 takes them: a `canonical.learning.optimizers.Optimizer`
  itself (`tff.learning.optimizers.build_sgdm(0.02)`), or a no-argument
  function returning one or returning a Keras optimizer, which is translated
  from its config (`keras_optimizers.from_keras`); a Keras optimizer itself
  is translated too.
  """
  optimizer = optimizer_fn
  if (not isinstance(optimizer, optimizers.Optimizer) and
      not keras_optimizers.is_keras_optimizer(optimizer) and
      callable(optimizer)):
    optimizer = optimizer()
  if keras_optimizers.is_keras_optimizer(optimizer):
    return keras_optimizers.from_keras(optimizer, who)
  if not isinstance(optimizer, optimizers.Optimizer):
    raise errors.InvalidTypeError(
        f'{who} must be a pure optimizer such as '
        'tff.learning.optimizers.build_sgdm(learning_rate=0.1), or a '
        'function returning one or a Keras SGD, Adam, Adagrad or RMSprop, '
        f'got {type(optimizer).__name__}.')
  return optimizer


def client_epochs_of(client_epochs, who):
  """`client_epochs`, checked: the passes each client makes over its data."""
  if isinstance(client_epochs, bool) or not isinstance(
      client_epochs, int) or client_epochs < 1:
    raise errors.InvalidValueError(
        f'{who}: client_epochs must be a positive int, got '
        f'{client_epochs!r}.')
  return client_epochs
