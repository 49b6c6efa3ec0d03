"""TFF's `from_keras_model`: a Keras model, its loss(es), its data's spec and
Keras metrics, as the `VariableModel` TFF 0.87 returns.

Its forward pass is the Keras model's call; its loss the Keras loss (or the
weighted sum of one loss per output) plus the model's regularization
losses; its metrics the Keras metrics given, then 'loss' (the mean of the
batch losses over examples), 'num_examples' and 'num_batches', each
reported as its variables' values and finalized by its own `result()`
(`create_keras_metric_finalizer`): any Keras metric works. The learning
builders run it as every `VariableModel` (`variable_model.py`): made afresh
inside each computation, its variables lowered into values.
"""

import collections
import collections.abc
import re

import keras
from keras.src.utils import naming
import tensorflow as tf

from canonical import errors
from canonical.learning import variable_model
from canonical.learning.functional import BatchOutput
from canonical.learning.metrics import counters
from canonical.learning.metrics import keras_finalizer

_WHO = 'from_keras_model'


def _loss_of(loss_fns, loss_weights):
  """The 'loss' metric: the batch's loss (the weighted sum of one loss per
  output), weighted by its number of examples."""

  class LossMetric(keras.metrics.Mean):

    def __init__(self, name='loss', dtype='float32'):
      super().__init__(name=name, dtype=dtype)

    def update_state(self, y_true, y_pred, sample_weight=None):
      del sample_weight  # Weighted by the batch's size, as TFF's.
      batch_size = tf.shape(tf.nest.flatten(y_pred)[0])[0]
      return super().update_state(
          _batch_loss(loss_fns, loss_weights, y_true, y_pred), batch_size)

  return LossMetric


def _batch_loss(loss_fns, loss_weights, y_true, y_pred):
  if len(loss_fns) == 1:
    return loss_fns[0](y_true, y_pred)
  total = tf.zeros(())
  for loss_fn, weight, y, prediction in zip(loss_fns, loss_weights, y_true,
                                            y_pred):
    total += weight * loss_fn(y, prediction)
  return total


def _split(batch_input, who):
  if isinstance(batch_input, collections.abc.Mapping):
    if 'x' not in batch_input:
      raise errors.InvalidValueError(
          f'{who}: the batch has no key "x" (its keys: '
          f'{sorted(batch_input)}).')
    return batch_input['x'], batch_input.get('y')
  return batch_input[0], batch_input[1]


def _rows(tensor):
  if isinstance(tensor, tf.RaggedTensor):
    return tensor.nrows()
  return tf.shape(tensor)[0]


def _keras_2_names(metrics):
  """Metrics Keras 3 named by default get Keras 2's (TFF 0.87's) name, their
  class's: Keras 3 numbers them across the process ('auc_2' for the third
  AUC made), Keras 2 did not. A name given, or one two metrics would share,
  stays."""
  bases = {}
  for metric in metrics:
    base = naming.to_snake_case(type(metric).__name__)
    if re.fullmatch(re.escape(base) + r'_[0-9]+', metric.name):
      bases.setdefault(base, []).append(metric)
  taken = {m.name for m in metrics}
  for base, named in bases.items():
    if len(named) == 1 and base not in taken:
      named[0].name = base


class KerasModel(variable_model.VariableModel):
  """A Keras model with its loss(es) and metrics, as TFF's `VariableModel`
  (what `from_keras_model` returns)."""

  def __init__(self, keras_model, input_spec, loss_fns, loss_weights,
               metrics):
    self._keras_model = keras_model
    self._input_spec = input_spec
    self._loss_fns = loss_fns
    self._loss_weights = loss_weights
    self._metrics = []
    self._constructors = collections.OrderedDict()
    instances = [m for m in metrics if isinstance(m, keras.metrics.Metric)]
    if instances and len(instances) != len(metrics):
      raise errors.InvalidTypeError(
          f'{_WHO}: metrics must be all Keras metrics or all no-argument '
          'functions making them, not both.')
    for metric in metrics:
      made = keras_finalizer.create_keras_metric(metric) if not isinstance(
          metric, keras.metrics.Metric) else metric
      if not instances:
        self._constructors[made.name] = metric
      self._metrics.append(made)
    _keras_2_names(self._metrics)
    names = {m.name for m in self._metrics}
    extra = [_loss_of(loss_fns, loss_weights)]
    if 'num_examples' not in names:
      extra.append(counters.NumExamplesCounter)
    if 'num_batches' not in names:
      extra.append(counters.NumBatchesCounter)
    for make in extra:
      metric = make()
      self._metrics.append(metric)
      if not instances:
        self._constructors[metric.name] = make

  @property
  def keras_model(self):
    return self._keras_model

  @property
  def trainable_variables(self):
    return self._keras_model.trainable_variables

  @property
  def non_trainable_variables(self):
    # Keras 3 counts a seed generator's state (dropout, a GRU's) among its
    # variables but not its weights; TFF 0.87's Keras 2 models had none, so
    # a model's weights here are what tutorials read as `non_trainable_weights`,
    # and the seed state is a call-local variable like a metric's.
    return self._keras_model.non_trainable_weights

  @property
  def local_variables(self):
    return [v for metric in self._metrics for v in metric.variables]

  def get_metrics(self):
    return list(self._metrics)

  def reset_metrics(self):
    for metric in self._metrics:
      metric.reset_state()

  @property
  def input_spec(self):
    return self._input_spec

  def predict_on_batch(self, x, training=True):
    return self._keras_model(x, training=training)

  def forward_pass(self, batch_input, training=True):
    x, y = _split(batch_input, f'{_WHO} forward_pass')
    predictions = self.predict_on_batch(x, training)
    loss = None
    if y is not None:
      loss = tf.add_n(
          [_batch_loss(self._loss_fns, self._loss_weights, y, predictions)] +
          [tf.cast(l, tf.float32) for l in self._keras_model.losses])
    for metric in self._metrics:
      metric.update_state(y_true=y, y_pred=predictions)
    return BatchOutput(loss=loss, predictions=predictions,
                       num_examples=_rows(tf.nest.flatten(x)[0]))

  def report_local_unfinalized_metrics(self):
    return collections.OrderedDict(
        (metric.name, [tf.convert_to_tensor(v) for v in metric.variables])
        for metric in self._metrics)

  def metric_finalizers(self):
    if self._constructors:
      return collections.OrderedDict(
          (name, keras_finalizer.create_keras_metric_finalizer(make))
          for name, make in self._constructors.items())
    return collections.OrderedDict(
        (metric.name, keras_finalizer.create_keras_metric_finalizer(metric))
        for metric in self._metrics)


def _losses(loss, loss_weights, keras_model):
  if not isinstance(loss, list):
    if not isinstance(loss, keras.losses.Loss):
      raise errors.InvalidTypeError(
          f'{_WHO}: loss must be a Keras loss (keras.losses.Loss) or a list '
          f'of one per output, got {type(loss).__name__}.')
    if loss_weights is not None:
      raise errors.InvalidValueError(
          f'{_WHO}: loss_weights weighs a list of losses; loss is one.')
    return [loss], [1.0]
  if len(loss) != len(keras_model.outputs):
    raise errors.InvalidValueError(
        f'{_WHO}: {len(loss)} losses for a model of '
        f'{len(keras_model.outputs)} outputs; give one loss per output.')
  for loss_fn in loss:
    if not isinstance(loss_fn, keras.losses.Loss):
      raise errors.InvalidTypeError(
          f'{_WHO}: every loss must be a Keras loss, got '
          f'{type(loss_fn).__name__}.')
  if loss_weights is None:
    return loss, [1.0] * len(loss)
  if len(loss_weights) != len(loss) or not all(
      isinstance(w, float) for w in loss_weights):
    raise errors.InvalidValueError(
        f'{_WHO}: loss_weights must be {len(loss)} Python floats, one per '
        f'loss, got {loss_weights!r}.')
  return loss, list(loss_weights)


def _input_spec(input_spec):
  """`input_spec` checked: a structure of specs (TFF's struct types are
  such structures too)."""
  if not isinstance(input_spec, (tuple, list, collections.abc.Mapping)) or (
      len(input_spec) != 2):
    raise errors.InvalidValueError(
        f'{_WHO}: input_spec must have two parts, the model\'s input x and '
        f'the labels y (an (x, y) pair, or a mapping with keys x and y), '
        f'got {input_spec!r}.')
  if isinstance(input_spec, collections.abc.Mapping) and (
      'x' not in input_spec or 'y' not in input_spec):
    raise errors.InvalidValueError(
        f'{_WHO}: a mapping input_spec must have keys x and y, got '
        f'{sorted(input_spec)}.')
  for spec in tf.nest.flatten(input_spec):
    if not isinstance(spec, (tf.TensorSpec, tf.RaggedTensorSpec)):
      raise errors.InvalidTypeError(
          f'{_WHO}: input_spec must be made of tf.TensorSpec, got '
          f'{type(spec).__name__}.')
  return input_spec


def from_keras_model(keras_model, loss, input_spec, loss_weights=None,
                     metrics=None):
  """TFF's `VariableModel` of `keras_model` (not compiled), trained on
  batches like `input_spec` (`(x, y)` or a mapping with 'x' and 'y'), with
  `loss` (a Keras loss, or one per output weighted by `loss_weights`) and
  `metrics` (Keras metrics, or no-argument functions making them)."""
  if not isinstance(keras_model, keras.Model):
    raise errors.InvalidTypeError(
        f'{_WHO}: keras_model must be a keras.Model, got '
        f'{type(keras_model).__name__}.')
  if getattr(keras_model, 'compiled', False):
    raise errors.InvalidValueError(
        f'{_WHO}: keras_model must not be compiled (its loss and metrics are '
        'given here).')
  loss_fns, loss_weights = _losses(loss, loss_weights, keras_model)
  if metrics is not None and not isinstance(metrics, list):
    raise errors.InvalidTypeError(
        f'{_WHO}: metrics must be a list of Keras metrics or of no-argument '
        f'functions making them, got {type(metrics).__name__}.')
  return KerasModel(keras_model, _input_spec(input_spec), loss_fns,
                    loss_weights, list(metrics or []))
