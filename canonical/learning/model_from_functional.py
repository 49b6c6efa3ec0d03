"""TFF 0.87's `model_from_functional`: a `FunctionalModel` as a
`VariableModel` (its weights in `tf.Variable`s, its loss and the given Keras
metrics as TFF's unfinalized metrics).

The learning builders run such a model as the pure `FunctionalModel` it
wraps, with the same metrics (`functional_model`): its loss as
`[loss_sum, num_examples]` and each Keras metric's variables, summed over
clients and finalized as TFF's model does.
"""

import collections

import tensorflow as tf

from canonical import errors
from canonical.learning import functional
from canonical.learning.metrics import functional_metrics
from canonical.learning.variable_model import VariableModel


def _split(batch_input):
  if isinstance(batch_input, collections.abc.Mapping):
    return batch_input['x'], batch_input['y']
  return batch_input


class ModelFromFunctional(VariableModel):
  """A `FunctionalModel`'s weights in variables, and metrics (its loss's
  mean, then `metric_constructors`' Keras metrics) kept in variables."""

  def __init__(self, functional_model, metric_constructors=()):
    who = 'model_from_functional'
    if not isinstance(functional_model, functional.FunctionalModel):
      raise errors.InvalidTypeError(
          f'{who}: functional_model must be a tff.learning.models.'
          f'FunctionalModel, got {type(functional_model).__name__}.')
    self._functional_model = functional_model
    trainable, non_trainable = functional_model.initial_weights
    self._trainable = tuple(tf.Variable(w) for w in trainable)
    self._non_trainable = tuple(tf.Variable(w, trainable=False)
                                for w in non_trainable)
    self._num_examples = tf.Variable(0, trainable=False)
    self._loss_sum = tf.Variable(0.0, trainable=False)
    self._metric_constructors = tuple(metric_constructors)
    self._metrics = [make() for make in self._metric_constructors]
    names = [m.name for m in self._metrics]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
      raise errors.InvalidValueError(
          f'{who}: metric names {repeated} appear more than once; each '
          'metric needs its own name.')
    self._twins = [functional_metrics.twin_of(m) for m in self._metrics]
    self._pure = None

  @property
  def trainable_variables(self):
    return self._trainable

  @property
  def non_trainable_variables(self):
    return self._non_trainable

  @property
  def local_variables(self):
    variables = [self._loss_sum, self._num_examples]
    for metric in self._metrics:
      variables.extend(metric.variables)
    return tuple(variables)

  @property
  def input_spec(self):
    return self._functional_model.input_spec

  def _weights(self):
    return (tuple(tf.convert_to_tensor(v) for v in self._trainable),
            tuple(tf.convert_to_tensor(v) for v in self._non_trainable))

  def forward_pass(self, batch_input, training=True):
    x, y = _split(batch_input)
    output = self._functional_model.predict_on_batch(self._weights(), x,
                                                     training)
    loss = self._functional_model.loss(output=output, label=y)
    num_examples = tf.shape(tf.nest.flatten(output)[0])[0]
    self._num_examples.assign_add(num_examples)
    self._loss_sum.assign_add(loss * tf.cast(num_examples, tf.float32))
    for metric in self._metrics:
      metric.update_state(y_true=y, y_pred=output)
    return functional.BatchOutput(loss=loss, predictions=output,
                                  num_examples=num_examples)

  def predict_on_batch(self, x, training=True):
    return self._functional_model.predict_on_batch(self._weights(), x,
                                                   training)

  def report_local_unfinalized_metrics(self):
    unfinalized = collections.OrderedDict(
        loss=[tf.convert_to_tensor(self._loss_sum),
              tf.cast(self._num_examples, tf.float32)])
    for metric in self._metrics:
      unfinalized[metric.name] = [tf.convert_to_tensor(v)
                                  for v in metric.variables]
    return unfinalized

  def metric_finalizers(self):
    finalizers = collections.OrderedDict(loss=_mean)
    for metric, twin in zip(self._metrics, self._twins):
      finalizers[metric.name] = (
          lambda values, twin=twin: twin.result(tuple(values)))
    return finalizers

  def reset_metrics(self):
    for metric in self._metrics:
      metric.reset_state()
    self._loss_sum.assign(0.0)
    self._num_examples.assign(0)

  @property
  def functional_model(self):
    """The pure model the builders run: the wrapped one, with this model's
    metrics as its metrics functions."""
    if self._pure is None:
      self._pure = functional.FunctionalModel(
          initial_weights=self._functional_model.initial_weights,
          predict_on_batch_fn=self._functional_model.predict_on_batch,
          loss_fn=self._functional_model.loss,
          metrics_fns=(self._initial_state, self._updated_state,
                       self._finalized),
          input_spec=self._functional_model.input_spec)
    return self._pure

  def _initial_state(self):
    state = collections.OrderedDict(loss=[tf.constant(0.0),
                                          tf.constant(0.0)])
    for metric, twin in zip(self._metrics, self._twins):
      state[metric.name] = list(twin.initial())
    return state

  def _updated_state(self, state, labels, batch_output, sample_weight=None):
    del sample_weight
    num_examples = tf.cast(batch_output.num_examples, tf.float32)
    new = collections.OrderedDict(loss=[
        state['loss'][0] + batch_output.loss * num_examples,
        state['loss'][1] + num_examples])
    for metric, twin in zip(self._metrics, self._twins):
      new[metric.name] = list(twin.update(
          tuple(state[metric.name]), labels, batch_output.predictions))
    return new

  def _finalized(self, state):
    return collections.OrderedDict(
        (name, finalizer(state[name]))
        for name, finalizer in self.metric_finalizers().items())


def _mean(values):
  return tf.math.divide_no_nan(values[0], values[1])


def model_from_functional(functional_model, metric_constructors=()):
  """`functional_model` as a `VariableModel`, with `metric_constructors`'
  Keras metrics (which replace any the functional model has)."""
  return ModelFromFunctional(functional_model, metric_constructors)
