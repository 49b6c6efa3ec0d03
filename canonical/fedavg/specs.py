"""Small helpers on spec structures and on what users pass as model and optimizers."""

import keras
import tensorflow as tf

from canonical import computations
from canonical.learning import keras_optimizers
from canonical.learning import model as model_lib
from canonical.learning import optimizers


def plain(spec_structure):
  """The structure with every TensorSpec stripped of its name."""
  return tf.nest.map_structure(
      lambda s: tf.TensorSpec(s.shape, s.dtype)
      if isinstance(s, tf.TensorSpec) else s, spec_structure)


def check_value_spec(value_spec, who):
  for leaf in tf.nest.flatten(value_spec):
    if not isinstance(leaf, tf.TensorSpec) or not leaf.shape.is_fully_defined():
      raise TypeError(f'{who}: values must be a structure of fully defined '
                      f'tf.TensorSpecs, found {leaf!r}.')
  return plain(value_spec)


def functional_model_of(model_fn, who):
  """The `FunctionalModel` that `model_fn` names.

  `model_fn` is a no-argument function returning a `FunctionalModel` (TFF's
  pattern), or returning a built `keras.Model` (wrapped with the default
  sparse cross-entropy loss on logits and accuracy), or a `FunctionalModel`
  itself (which saves building the Keras model once per builder).
  """
  if isinstance(model_fn, model_lib.FunctionalModel):
    return model_fn
  if not callable(model_fn):
    raise TypeError(f'{who}: model_fn must be a no-argument function returning '
                    f'a canonical.learning.FunctionalModel, got {model_fn!r}.')
  model = model_fn()
  if isinstance(model, model_lib.FunctionalModel):
    return model
  if isinstance(model, keras.Model):
    return model_lib.FunctionalModel(model)
  raise TypeError(
      f'{who}: model_fn returned {type(model).__name__}; it must return a '
      'canonical.learning.FunctionalModel (e.g. FunctionalModel.from_keras('
      'builder)) or a built keras.Model.')


def optimizer_of(optimizer_fn, who):
  """The pure `Optimizer` that `optimizer_fn()` returns (or `optimizer_fn`
  itself); a Keras optimizer is translated from its config
  (`keras_optimizers.from_keras`)."""
  optimizer = optimizer_fn
  if not isinstance(optimizer, optimizers.Optimizer) and callable(optimizer):
    optimizer = optimizer()
  if keras_optimizers.is_keras_optimizer(optimizer):
    return keras_optimizers.from_keras(optimizer, who)
  if not isinstance(optimizer, optimizers.Optimizer):
    raise TypeError(
        f'{who} must return a pure optimizer such as '
        'canonical.learning.sgd(0.1), or a Keras SGD, Adam, Adagrad or '
        f'RMSprop, got {type(optimizer).__name__}.')
  return optimizer


def tf_computation(fn, *parameter_specs):
  """`canonical.tf_computation` of `fn`, without AutoGraph.

  Everything federated averaging runs (the learning blocks, the encoders) is
  plain TensorFlow with no Python control flow over tensors, so there is
  nothing for AutoGraph to rewrite; letting it try re-parses the whole
  encoder library on every trace (seconds for the tutorial's CNN).
  """
  return computations.tf_computation(
      tf.autograph.experimental.do_not_convert(fn), *parameter_specs)
