"""TFF 0.87's `tff.learning.models.ReconstructionModel`: a model whose
weights split into global ones (trained by every client, aggregated at the
server) and local ones (reconstructed on each client, never sent).

TFF's class is abstract over `tf.Variable`s; its Keras implementation
(`from_keras_model_and_layers` / `from_keras_model_and_variables`) is here
too, and it also computes as pure functions of its weights (`global_weights`
/ `local_weights` in, predictions out, through Keras's `stateless_call`),
which is what a canonical-form piece runs: `build_fed_recon` and
`build_fed_recon_eval` train and evaluate through `functional_forward`.
"""

import abc
import collections
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple, Optional

import keras
import numpy as np
import tensorflow as tf

from canonical import errors
from canonical.learning.model_weights import ModelWeights

ReconstructionDatasetSplitFn = Callable[
    [tf.data.Dataset], tuple[tf.data.Dataset, tf.data.Dataset]]


class ReconstructionBatchOutput(NamedTuple):
  """What a reconstruction model's forward pass gives for one batch."""
  predictions: Any
  labels: Any
  num_examples: Any


class ReconstructionModel(metaclass=abc.ABCMeta):
  """TFF's reconstruction model: its variables in four disjoint groups
  (global / local, trainable / non-trainable) and a forward pass.

  Subclass it with your own variables as in TFF, or build one from a Keras
  model with `from_keras_model_and_layers`. The learning builders run a
  model as pure functions of its weights (`functional_forward`), which the
  Keras implementation gives; a subclass of your own names itself in the
  error until its variables can be lowered.
  """

  @property
  @abc.abstractmethod
  def global_trainable_variables(self):
    """The trainable variables the server aggregates."""

  @property
  @abc.abstractmethod
  def global_non_trainable_variables(self):
    """The non-trainable variables sent with the global ones."""

  @property
  @abc.abstractmethod
  def local_trainable_variables(self):
    """The trainable variables each client reconstructs and keeps."""

  @property
  @abc.abstractmethod
  def local_non_trainable_variables(self):
    """The non-trainable variables each client keeps."""

  @property
  @abc.abstractmethod
  def input_spec(self):
    """The spec of one batch: `(x, y)` or a mapping with 'x' and 'y'."""

  @abc.abstractmethod
  def forward_pass(self, batch_input, training=True):
    """A `ReconstructionBatchOutput` for one batch, reading the variables."""

  # The pure interface the learning builders use.

  def functional_forward(self, global_weights, local_weights, batch_input,
                         training=True):
    """`(ReconstructionBatchOutput, new global non-trainables, new local
    non-trainables)` of the model at the given weights (`ModelWeights` of
    tensors), reading and writing no variable."""
    del global_weights, local_weights, batch_input, training
    raise errors.InvalidTypeError(
        f'{type(self).__qualname__} is a ReconstructionModel written over '
        'tf.Variables; the learning builders here run a model as pure '
        'functions of its weights. Build it with tff.learning.models.'
        'ReconstructionModel.from_keras_model_and_layers(...), which does.')

  @property
  def global_weights_spec(self) -> ModelWeights:
    """`ModelWeights` of `tf.TensorSpec`s of the global variables."""
    return _specs(ReconstructionModel.get_global_variables(self))

  @property
  def local_weights_spec(self) -> ModelWeights:
    """`ModelWeights` of `tf.TensorSpec`s of the local variables."""
    return _specs(ReconstructionModel.get_local_variables(self))

  @property
  def initial_global_weights(self) -> ModelWeights:
    """The global variables' values now, as numpy arrays."""
    return _values(ReconstructionModel.get_global_variables(self))

  @property
  def initial_local_weights(self) -> ModelWeights:
    """The local variables' values now, as numpy arrays."""
    return _values(ReconstructionModel.get_local_variables(self))

  # TFF's class methods.

  @classmethod
  def get_global_variables(cls, model) -> ModelWeights:
    """The model's global variables as `ModelWeights`."""
    del cls
    return ModelWeights(trainable=model.global_trainable_variables,
                        non_trainable=model.global_non_trainable_variables)

  @classmethod
  def get_local_variables(cls, model) -> ModelWeights:
    """The model's local variables as `ModelWeights`."""
    del cls
    return ModelWeights(trainable=model.local_trainable_variables,
                        non_trainable=model.local_non_trainable_variables)

  @classmethod
  def has_only_global_variables(cls, model) -> bool:
    """Whether the model has no local variables."""
    del cls
    return not (list(model.local_trainable_variables) or
                list(model.local_non_trainable_variables))

  @classmethod
  def simple_dataset_split_fn(cls, client_dataset):
    """The split that uses the whole client dataset for both stages."""
    del cls
    return client_dataset, client_dataset

  @classmethod
  def build_dataset_split_fn(cls, recon_epochs=1, recon_steps_max=None,
                             post_recon_epochs=1, post_recon_steps_max=None,
                             split_dataset=False
                             ) -> ReconstructionDatasetSplitFn:
    """A `ReconstructionDatasetSplitFn`: each stage's data repeated for its
    epochs, then cut to its maximum number of batches if given; with
    `split_dataset`, even-numbered batches reconstruct and odd-numbered ones
    come after."""
    del cls
    for name, value in (('recon_epochs', recon_epochs),
                        ('post_recon_epochs', post_recon_epochs)):
      if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise errors.InvalidValueError(
            f'build_dataset_split_fn: {name} must be a positive int, got '
            f'{value!r}.')
    for name, value in (('recon_steps_max', recon_steps_max),
                        ('post_recon_steps_max', post_recon_steps_max)):
      if value is not None and (isinstance(value, bool) or
                                not isinstance(value, int) or value < 1):
        raise errors.InvalidValueError(
            f'build_dataset_split_fn: {name} must be None or a positive int, '
            f'got {value!r}.')

    def stage(dataset, parity, epochs, steps_max):
      if split_dataset:
        dataset = dataset.enumerate().filter(
            lambda i, _: tf.equal(tf.math.floormod(i, 2), parity)).map(
                lambda _, batch: batch)
      dataset = dataset.repeat(epochs)
      return dataset if steps_max is None else dataset.take(steps_max)

    def dataset_split_fn(client_dataset):
      return (stage(client_dataset, 0, recon_epochs, recon_steps_max),
              stage(client_dataset, 1, post_recon_epochs,
                    post_recon_steps_max))

    return dataset_split_fn

  @classmethod
  def read_metric_variables(cls, metrics):
    """`OrderedDict` of each Keras metric's name to its variables' values."""
    del cls
    values = collections.OrderedDict()
    for metric in metrics:
      if metric.name in values:
        raise errors.InvalidValueError(
            f'read_metric_variables: metric name {metric.name!r} appears '
            f'twice (already read: {list(values)}).')
      values[metric.name] = [tf.convert_to_tensor(v) for v in metric.variables]
    return values

  @classmethod
  def from_keras_model_and_layers(cls, keras_model, *, global_layers,
                                  local_layers, input_spec):
    """A reconstruction model of `keras_model` whose global weights are
    those of `global_layers` and local weights those of `local_layers`."""
    _check_input_spec(input_spec)
    if not keras_model.built:
      x_spec = (input_spec['x'] if isinstance(input_spec, Mapping)
                else input_spec[0])
      keras_model.build(x_spec.shape)
    parts = {'global_trainable_variables': [],
             'global_non_trainable_variables': [],
             'local_trainable_variables': [],
             'local_non_trainable_variables': []}
    for where, layers in (('global', global_layers), ('local', local_layers)):
      for layer in layers:
        parts[f'{where}_trainable_variables'].extend(
            layer.trainable_variables)
        parts[f'{where}_non_trainable_variables'].extend(
            layer.non_trainable_variables)
    return cls.from_keras_model_and_variables(keras_model,
                                              input_spec=input_spec, **parts)

  @classmethod
  def from_keras_model_and_variables(cls, keras_model, *,
                                     global_trainable_variables,
                                     global_non_trainable_variables,
                                     local_trainable_variables,
                                     local_non_trainable_variables,
                                     input_spec):
    """A reconstruction model of `keras_model` with its variables split
    into the four groups given (together exactly the model's, disjoint)."""
    del cls
    return _KerasReconstructionModel(
        keras_model, global_trainable_variables,
        global_non_trainable_variables, local_trainable_variables,
        local_non_trainable_variables, input_spec)


def _check_input_spec(input_spec):
  if isinstance(input_spec, Mapping):
    if set(input_spec) != {'x', 'y'}:
      raise errors.InvalidValueError(
          'ReconstructionModel: a mapping input_spec must have exactly keys '
          f"'x' and 'y', got {sorted(input_spec)}.")
  elif not (isinstance(input_spec, (tuple, list)) and len(input_spec) == 2):
    raise errors.InvalidValueError(
        'ReconstructionModel: input_spec must be an (x, y) pair or a mapping '
        f"with 'x' and 'y', got {input_spec!r}.")


def _split(batch):
  if hasattr(batch, '_asdict'):
    batch = batch._asdict()
  if isinstance(batch, Mapping):
    return batch['x'], batch['y']
  return batch[0], batch[1]


def _specs(weights):
  return tf.nest.map_structure(
      lambda v: tf.TensorSpec(tuple(v.shape), tf.as_dtype(v.dtype)),
      ModelWeights(tuple(weights.trainable), tuple(weights.non_trainable)))


def _values(weights):
  return tf.nest.map_structure(
      lambda v: np.array(keras.ops.convert_to_numpy(v)),
      ModelWeights(tuple(weights.trainable), tuple(weights.non_trainable)))


class _KerasReconstructionModel(ReconstructionModel):
  """A Keras model split into global and local weights; its forward pass is
  also a pure function of them (`functional_forward`)."""

  def __init__(self, keras_model, global_trainable_variables,
               global_non_trainable_variables, local_trainable_variables,
               local_non_trainable_variables, input_spec):
    if not isinstance(keras_model, keras.Model):
      raise errors.InvalidTypeError(
          'ReconstructionModel: keras_model must be a keras.Model, got '
          f'{type(keras_model).__name__}.')
    if getattr(keras_model, 'compiled', False):
      raise errors.InvalidValueError(
          'ReconstructionModel: keras_model must not be compiled (its loss '
          'and metrics are given to the learning algorithm).')
    if not keras_model.built:
      raise errors.InvalidValueError(
          'ReconstructionModel: keras_model must be built; call its build() '
          'first.')
    _check_input_spec(input_spec)
    self._keras_model = keras_model
    self._groups = collections.OrderedDict(
        global_trainable_variables=list(global_trainable_variables),
        global_non_trainable_variables=list(global_non_trainable_variables),
        local_trainable_variables=list(local_trainable_variables),
        local_non_trainable_variables=list(local_non_trainable_variables))
    self._input_spec = input_spec
    seen = {}
    for group, variables in self._groups.items():
      for v in variables:
        if id(v) in seen:
          raise errors.InvalidValueError(
              f'ReconstructionModel: variable {v.path!r} is in both '
              f'{seen[id(v)]} and {group}; the groups must be disjoint.')
        seen[id(v)] = group
    model_variables = (list(keras_model.trainable_variables) +
                       list(keras_model.non_trainable_variables))
    missing = [v.path for v in model_variables if id(v) not in seen]
    extra = [v.path for vs in self._groups.values() for v in vs
             if id(v) not in {id(m) for m in model_variables}]
    if missing or extra:
      raise errors.InvalidValueError(
          'ReconstructionModel: the global and local variables must be '
          'exactly the Keras model\'s; '
          + (f'not in any group: {missing}' if missing else '')
          + ('; ' if missing and extra else '')
          + (f'not the model\'s: {extra}' if extra else '') + '.')
    # Where each of the model's variables sits in the four groups.
    position = {}
    for group, variables in self._groups.items():
      for index, v in enumerate(variables):
        position[id(v)] = (group, index)
    self._trainable_positions = [
        position[id(v)] for v in keras_model.trainable_variables]
    self._non_trainable_positions = [
        position[id(v)] for v in keras_model.non_trainable_variables]

  @property
  def global_trainable_variables(self):
    return self._groups['global_trainable_variables']

  @property
  def global_non_trainable_variables(self):
    return self._groups['global_non_trainable_variables']

  @property
  def local_trainable_variables(self):
    return self._groups['local_trainable_variables']

  @property
  def local_non_trainable_variables(self):
    return self._groups['local_non_trainable_variables']

  @property
  def input_spec(self):
    return self._input_spec

  @property
  def keras_model(self):
    return self._keras_model

  def forward_pass(self, batch_input, training=True):
    x, y = _split(batch_input)
    predictions = self._keras_model(x, training=training)
    return ReconstructionBatchOutput(
        predictions=predictions, labels=y,
        num_examples=tf.shape(tf.nest.flatten(x)[0])[0])

  def functional_forward(self, global_weights, local_weights, batch_input,
                         training=True):
    x, y = _split(batch_input)
    groups = {
        'global_trainable_variables': tuple(global_weights.trainable),
        'global_non_trainable_variables': tuple(global_weights.non_trainable),
        'local_trainable_variables': tuple(local_weights.trainable),
        'local_non_trainable_variables': tuple(local_weights.non_trainable)}
    trainable = [groups[g][i] for g, i in self._trainable_positions]
    non_trainable = [groups[g][i] for g, i in self._non_trainable_positions]
    predictions, new_non_trainable = self._keras_model.stateless_call(
        trainable, non_trainable, x, training=training)
    updated = {'global_non_trainable_variables':
                   list(groups['global_non_trainable_variables']),
               'local_non_trainable_variables':
                   list(groups['local_non_trainable_variables'])}
    for (group, index), value in zip(self._non_trainable_positions,
                                     new_non_trainable):
      updated[group][index] = value
    output = ReconstructionBatchOutput(
        predictions=predictions, labels=y,
        num_examples=tf.shape(tf.nest.flatten(x)[0])[0])
    return (output, tuple(updated['global_non_trainable_variables']),
            tuple(updated['local_non_trainable_variables']))
