"""Keras optimizers as pure ones: TFF users pass `tf.keras.optimizers.SGD(...)`.

A Keras optimizer keeps its slots in variables, which a canonical-form piece
may not hold; but its config says everything its update does. `from_keras`
reads that config and returns the pure optimizer (`optimizers`: Keras's
numerics, its hyperparameters fixed in the graph) that updates alike, or
refuses, naming the optimizer and the setting, what has no pure counterpart
here (learning-rate schedules, weight decay, gradient clipping, EMA, AMSGrad,
gradient accumulation, other optimizer classes).
"""

from canonical import errors
from canonical.learning import optimizers

# Config entries every Keras optimizer has, and the value that means "off".
_OFF = {'weight_decay': None, 'clipnorm': None, 'global_clipnorm': None,
        'clipvalue': None, 'use_ema': False, 'loss_scale_factor': None,
        'gradient_accumulation_steps': None}
# Keras class name -> (pure builder, the config keys it takes, refused
# settings with the value that is allowed).
_TRANSLATIONS = {
    'SGD': (optimizers.sgd, ('learning_rate', 'momentum', 'nesterov'), {}),
    'Adam': (optimizers.adam, ('learning_rate', 'beta_1', 'beta_2',
                               'epsilon'), {'amsgrad': False}),
    'Adagrad': (optimizers.adagrad, ('learning_rate',
                                     'initial_accumulator_value', 'epsilon'),
                {}),
    'RMSprop': (optimizers.rmsprop, ('learning_rate', 'rho', 'momentum',
                                     'epsilon', 'centered'), {}),
}


def is_keras_optimizer(value):
  return any(cls.__module__.startswith(('keras', 'tf_keras')) and
             cls.__name__ == 'Optimizer' for cls in type(value).__mro__)


def from_keras(optimizer, who='optimizer'):
  """The pure optimizer (an `optimizers.Optimizer`) that updates as the
  Keras `optimizer` does.

  Raises ValueError naming what cannot be translated.
  """
  build, settings = translation(optimizer, who)
  return build(**settings)


def translation(optimizer, who='optimizer'):
  """`(builder, settings)`: `builder(**settings)` is `from_keras(
  optimizer)`; a caller may change a setting (the learning rate, to a
  tensor) first. Reads the optimizer's variables: call it eagerly."""
  name = type(optimizer).__name__
  if name not in _TRANSLATIONS:
    raise errors.InvalidValueError(
        f'{who}: Keras {name} has no pure counterpart here; use SGD (with '
        'momentum or nesterov), Adam, Adagrad or RMSprop, or a '
        'canonical.learning optimizer.')
  build, keys, refused = _TRANSLATIONS[name]
  config = optimizer.get_config()
  if isinstance(config.get('learning_rate'), dict):
    raise errors.InvalidValueError(
        f'{who}: Keras {name} with a learning-rate schedule '
        f'({config["learning_rate"].get("class_name", "?")}) '
        'cannot run in a pure piece; pass a constant rate.')
  for setting, allowed in dict(_OFF, **refused).items():
    if config.get(setting, allowed) != allowed:
      raise errors.InvalidValueError(
          f'{who}: Keras {name} with {setting}='
          f'{config[setting]!r} has no pure counterpart here; '
          f'leave {setting} at {allowed!r}.')
  return build, {key: config[key] for key in keys}
