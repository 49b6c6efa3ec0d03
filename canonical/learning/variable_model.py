"""TFF 0.87's `tff.learning.models.VariableModel`, and how the learning
builders run one.

A `VariableModel` keeps its weights and metrics in `tf.Variable`s: the
builders assign weights, call `forward_pass` batch after batch (which
updates the metric variables) and read `report_local_unfinalized_metrics()`.
TFF builds the model afresh (`model_fn()`) inside each computation, so those
variables are the call's own: a pure function in disguise.

`functions_of(model_fn, model)` is that pure function, in the interface the
builders use (`canonical/learning/model.py`). Each method builds a fresh
model inside a computation whose variables are lowered into values
(`call_local.PureFunction`), assigns it the weights it is given, and runs it:

- `loss_and_metrics(weights, batch)`: one `forward_pass`; the loss, the
  updated non-trainable weights, and the metrics as flat sums: the change
  the batch made to each unfinalized metric value (added batch by batch,
  that is the model's own running total, since its metrics start at zero as
  Keras's and TFF's do), with 'loss_sum' and 'num_examples' as every model
  reports them. Gradients flow through the pure function as through the
  forward pass itself.
- `unfinalized_metrics(sums)` / `metric_finalizers()`: the sums as the
  model's `report_local_unfinalized_metrics()` structure, and the model's
  own finalizers, for TFF's metrics aggregators.
"""

import collections
import contextlib

from keras.src.backend.common import global_state
import numpy as np
import tensorflow as tf

from canonical import errors
from canonical.learning import call_local
from canonical.learning import functional
from canonical.learning.variable_model_base import VariableModel
from canonical.learning.metrics import finalizing

_STATE_KEY = 'unfinalized/{:04d}'


class _Named(collections.namedtuple('_Named', 'name')):
  """A metric of a `VariableModel`, by its name."""


@contextlib.contextmanager
def _fresh_keras_names():
  """Keras 3 numbers the default names of its metrics and layers across the
  process ('auc', then 'auc_1', ...), where Keras 2 named a metric by its
  class: each `model_fn()` here counts from zero, so that every model it
  makes names its metrics alike, and as TFF 0.87 reports them."""
  key = 'object_name_uids'
  saved = global_state.get_global_attribute(key)
  global_state.set_global_attribute(key, collections.defaultdict(int))
  try:
    yield
  finally:
    global_state.set_global_attribute(key, saved)


def _numpy(value):
  return np.asarray(value.numpy() if hasattr(value, 'numpy') else value)


def _plain_spec(spec):
  if isinstance(spec, tf.TensorSpec):
    return tf.TensorSpec(spec.shape, spec.dtype)
  return spec


class _Functions(functional.FunctionalModel):
  """A `VariableModel` (as `model_fn` makes it) as the pure functions the
  builders take."""

  def __init__(self, model_fn, model):
    self._model_fn = model_fn
    self._name = type(model).__qualname__
    model = self._make()  # Named as every later one will be.
    self._unfinalized = tf.nest.map_structure(
        _numpy, model.report_local_unfinalized_metrics())
    self._finalizers = model.metric_finalizers()
    finalizing.check_finalizers(
        self._finalizers, f'{self._name}.metric_finalizers()')
    self._steps = {}
    self._predictions = {}
    super().__init__(
        initial_weights=(
            [_numpy(v) for v in model.trainable_variables],
            [_numpy(v) for v in model.non_trainable_variables]),
        predict_on_batch_fn=self._predict,
        loss_fn=self._no_loss,
        metrics_fns=(self._initial_metrics, self._no_metric_update,
                     self._finalize),
        input_spec=tf.nest.map_structure(_plain_spec, model.input_spec))

  def _make(self):
    with _fresh_keras_names():
      return self._model_fn()

  def _fresh(self, weights):
    """A new model (inside a computation), with `weights` assigned."""
    model = self._make()
    trainable, non_trainable = weights
    for part, variables, values in (
        ('trainable', model.trainable_variables, trainable),
        ('non-trainable', model.non_trainable_variables, non_trainable)):
      variables = list(variables)
      if len(variables) != len(values):
        raise errors.InvalidValueError(
            f'{self._name}: model_fn made a model of {len(variables)} '
            f'{part} variables, and one of {len(values)} before; every call '
            'must make the same model.')
      for variable, value in zip(variables, values):
        variable.assign(value)
    return model

  def _step(self, training):
    """The pure function of one batch for `training` (with the loss's
    gradients, then)."""
    if training not in self._steps:

      def step(trainable, non_trainable, batch):
        model = self._fresh((trainable, non_trainable))
        before = self._flat_unfinalized(model)
        with tf.GradientTape() as tape:
          output = model.forward_pass(batch, training=training)
        after = self._flat_unfinalized(model)
        loss = output.loss
        if loss is None and training:
          raise errors.InvalidValueError(
              f'{self._name}.forward_pass returned no loss: a builder '
              'trains on it.')
        loss = tf.constant(0.0) if loss is None else tf.convert_to_tensor(
            loss)
        num_examples = output.num_examples
        if num_examples is None:
          num_examples = tf.shape(tf.nest.flatten(output.predictions)[0])[0]
        changes = tuple(tf.convert_to_tensor(a) - tf.convert_to_tensor(b)
                        for a, b in zip(after, before))
        result = (loss, tf.cast(num_examples, tf.float32),
                  tuple(tf.convert_to_tensor(v)  # Keras 3's: no read_value().
                        for v in model.non_trainable_variables),
                  changes)
        if not training:
          return result
        gradients = tape.gradient(
            loss, list(model.trainable_variables),
            unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return result + (tuple(tf.convert_to_tensor(g) for g in gradients),)

      self._steps[training] = call_local.PureFunction(
          step, f'{self._name}.forward_pass')
    return self._steps[training]

  def _flat_unfinalized(self, model):
    """The leaves of `model`'s unfinalized metrics, checked to have the
    structure (and metric names) of the first model's."""
    unfinalized = model.report_local_unfinalized_metrics()
    try:
      tf.nest.assert_same_structure(unfinalized, self._unfinalized,
                                    check_types=False)
    except (TypeError, ValueError) as e:
      raise errors.InvalidValueError(
          f'{self._name}: model_fn made a model whose unfinalized metrics '
          'differ from those of the one it made before; every call must '
          f'make the same model ({e}).') from None
    return tf.nest.flatten(unfinalized)

  # The builders' interface.

  def loss_and_metrics(self, weights, batch, training=True):
    """One `forward_pass`; in training, the loss's gradient with respect to
    the trainable weights is the one the model's own variables give (the
    pure function computes it, as TFF's tape on the variables does)."""
    trainable = tuple(tf.convert_to_tensor(w) for w in weights.trainable)
    non_trainable = tuple(weights.non_trainable)
    # Traced now: its variables are not the custom gradient's business.
    step = self._step(training).traced(trainable, non_trainable, batch)
    if training:

      @tf.custom_gradient
      def run(*trainable):
        loss, num_examples, new_non_trainable, changes, gradients = (
            step.invoke(trainable, non_trainable, batch))

        def gradient(upstream, *unused):
          del unused  # Only the loss is differentiated.
          return [upstream * g for g in gradients]

        return (loss, num_examples) + tuple(new_non_trainable) + tuple(
            changes), gradient

      outputs = run(*trainable)
      loss, num_examples = outputs[:2]
      new_non_trainable = outputs[2:2 + len(non_trainable)]
      changes = outputs[2 + len(non_trainable):]
    else:
      loss, num_examples, new_non_trainable, changes = step.invoke(
          trainable, non_trainable, batch)
    sums = {'loss_sum': tf.cast(loss, tf.float32) * num_examples,
            'num_examples': num_examples}
    for i, change in enumerate(changes):
      sums[_STATE_KEY.format(i)] = change
    return functional.BatchResult(loss, tuple(new_non_trainable), sums)

  def zero_metrics(self):
    sums = {'loss_sum': tf.constant(0.0), 'num_examples': tf.constant(0.0)}
    for i, value in enumerate(tf.nest.flatten(self._unfinalized)):
      sums[_STATE_KEY.format(i)] = tf.constant(value)
    return sums

  def unfinalized_metrics(self, sums):
    leaves = [sums[_STATE_KEY.format(i)]
              for i in range(len(tf.nest.flatten(self._unfinalized)))]
    return tf.nest.pack_sequence_as(self._unfinalized, leaves)

  def metric_finalizers(self):
    return self._finalizers

  @property
  def metrics(self):
    """The model's named metrics (what `metric_finalizers()` finalizes,
    but the loss and the counts), for the builders that report means."""
    return tuple(_Named(name) for name in self._finalizers
                 if name not in ('loss', 'num_examples', 'num_batches'))

  def mean_metrics(self, sums):
    num_examples = sums['num_examples']
    means = collections.OrderedDict(
        loss=tf.math.divide_no_nan(sums['loss_sum'], num_examples),
        num_examples=num_examples)
    means.update(self._finalize(self.unfinalized_metrics(sums)))
    return means

  # TFF's FunctionalModel members, where a VariableModel has them.

  def _predict(self, model_weights, x, training=True):
    if training not in self._predictions:

      def predict(trainable, non_trainable, x):
        return self._fresh((trainable, non_trainable)).predict_on_batch(
            x, training=training)

      self._predictions[training] = call_local.PureFunction(
          predict, f'{self._name}.predict_on_batch')
    trainable, non_trainable = model_weights
    return self._predictions[training](tuple(trainable),
                                       tuple(non_trainable), x)

  def _no_loss(self, output, label, sample_weight=None):
    del output, label, sample_weight
    raise errors.InvalidTypeError(
        f'{self._name} is a VariableModel: its loss comes from forward_pass '
        '(loss_and_metrics), not from predictions and labels.')

  def _initial_metrics(self):
    return tf.nest.map_structure(tf.constant, self._unfinalized)

  def _no_metric_update(self, state, labels, batch_output,
                        sample_weight=None):
    del state, labels, batch_output, sample_weight
    raise errors.InvalidTypeError(
        f'{self._name} is a VariableModel: its metrics are updated by '
        'forward_pass (loss_and_metrics).')

  def _finalize(self, unfinalized):
    return finalizing.finalize(self._finalizers, unfinalized)


def functions_of(model_fn, model):
  """The builders' pure view of the `VariableModel` `model`, which
  `model_fn` made (and makes afresh inside each computation)."""
  return _Functions(model_fn, model)
