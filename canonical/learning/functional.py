"""TFF 0.87's `tff.learning.models.FunctionalModel`: a model as pure
functions of its weights, and the interface the learning builders use,
derived from those functions.

A user builds one as TFF's docs do, from `initial_weights`, a
`predict_on_batch_fn(model_weights, x, training)`, a `loss_fn(output,
label, sample_weight)`, the metrics' `(initialize, update, finalize)`
functions and the batch's `input_spec`; `functional_model_from_keras` makes
one of a Keras model. Every builder of `tff.learning` takes it.

What the builders call (`weights_spec`, `batch_spec`, `initial_model_weights`,
`loss_and_metrics`, `zero_metrics`, `mean_metrics`, `unfinalized_metrics`,
`metric_finalizers`) is derived here from TFF's members: a batch's metrics
are the change `update_metrics_state` makes to the initial state, kept with
the examples and the loss summed, as flat sums that add across batches and
clients. Adding changes is updating in turn for every metric whose state is
a sum (Keras's metrics all are, and TFF's `sum_then_finalize` sums states
across clients, so its metrics must be). `KerasFunctionalModel` (our Keras
3 model, `keras_functional`) overrides them with its own sums.
"""

import collections
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Optional

import numpy as np
import tensorflow as tf

from canonical import errors
from canonical.learning.model_weights import ModelWeights


class BatchOutput(NamedTuple):
  """TFF's per-batch output of a model: its loss, predictions and number of
  examples (each may be None)."""
  loss: Any = None
  predictions: Any = None
  num_examples: Any = None


class BatchResult(NamedTuple):
  """What a builder takes from one batch (`loss_and_metrics`): the loss to
  differentiate, the updated non-trainable weights, and the batch's metrics
  as flat sums (always 'loss_sum' and 'num_examples')."""
  loss: tf.Tensor
  non_trainable: tuple
  metrics: dict


def split_batch(batch):
  """`(x, y)` of a batch: an `(x, y)` pair or a dict with 'x' and 'y'."""
  if isinstance(batch, Mapping) and 'x' in batch and 'y' in batch:
    return batch['x'], batch['y']
  if isinstance(batch, (tuple, list)) and len(batch) == 2:
    return batch[0], batch[1]
  raise errors.InvalidTypeError(
      'A batch must be an (x, y) pair or a dict with keys "x" and "y"; got '
      f'{tf.nest.map_structure(lambda t: getattr(t, "dtype", t), batch)!r}.')


def empty_metrics_state():
  """No metrics: the state is an empty `OrderedDict`."""
  return collections.OrderedDict()


def noop_update_metrics(state, labels, batch_output, sample_weight=None):
  del state, labels, batch_output, sample_weight
  return collections.OrderedDict()


def noop_finalize_metrics(state):
  del state
  return collections.OrderedDict()


_STATE_KEY = 'metrics_state/{:04d}'


def _plain_spec(spec):
  if isinstance(spec, tf.TensorSpec):
    return tf.TensorSpec(spec.shape, spec.dtype)
  return spec


def _check_input_spec(input_spec, who):
  if isinstance(input_spec, Mapping):
    if 'x' not in input_spec or 'y' not in input_spec:
      raise errors.InvalidValueError(
          f'{who}: a mapping input_spec must have keys "x" and "y" (the '
          f'model\'s input and the labels), got {sorted(input_spec)}.')
  elif not (isinstance(input_spec, (tuple, list)) and len(input_spec) == 2):
    raise errors.InvalidValueError(
        f'{who}: input_spec must be an (x, y) pair of tf.TensorSpec '
        'structures (the model\'s input and the labels) or a mapping with '
        f'"x" and "y", got {input_spec!r}.')


def _check_initial_weights(initial_weights, who):
  if not (isinstance(initial_weights, (tuple, list)) and
          len(initial_weights) == 2):
    raise errors.InvalidValueError(
        f'{who}: initial_weights must be a (trainable, non_trainable) pair '
        f'of sequences of arrays, got {type(initial_weights).__name__}.')

  def check(value):
    if tf.is_tensor(value) or isinstance(value, tf.Variable):
      raise errors.InvalidTypeError(
          f'{who}: initial_weights may not hold TensorFlow values (got a '
          f'{type(value).__name__}); give numpy arrays, e.g. '
          'tensor.numpy().')

  tf.nest.map_structure(check, initial_weights)


class FunctionalModel:
  """TFF's model as pure functions of its weights.

  `initial_weights` is `(trainable, non_trainable)`, sequences of arrays;
  `predict_on_batch_fn(model_weights, x, training)` returns the predictions
  (or a structure whose first leaf is them); `loss_fn(output, label,
  sample_weight)` the loss to minimize; `metrics_fns` the metrics'
  `(initialize, update, finalize)` functions
  (`tff.learning.metrics.create_functional_metric_fns`); `input_spec` the
  spec of a batch, `(x, y)` or a mapping with 'x' and 'y'.
  """

  def __init__(self, *, initial_weights, predict_on_batch_fn, loss_fn,
               metrics_fns=(empty_metrics_state, noop_update_metrics,
                            noop_finalize_metrics),
               input_spec):
    who = 'tff.learning.models.FunctionalModel'
    _check_initial_weights(initial_weights, who)
    for name, fn in (('predict_on_batch_fn', predict_on_batch_fn),
                     ('loss_fn', loss_fn)):
      if not callable(fn):
        raise errors.InvalidTypeError(
            f'{who}: {name} must be a function, got {type(fn).__name__}.')
    if not (isinstance(metrics_fns, (tuple, list)) and len(metrics_fns) == 3
            and all(callable(f) for f in metrics_fns)):
      raise errors.InvalidTypeError(
          f'{who}: metrics_fns must be three functions (initialize, update, '
          'finalize), as tff.learning.metrics.create_functional_metric_fns '
          f'returns, got {metrics_fns!r}.')
    _check_input_spec(input_spec, who)
    self._initial_weights = initial_weights
    self._predict_on_batch_fn = predict_on_batch_fn
    self._loss_fn = loss_fn
    (self._initialize_metrics_state, self._update_metrics_state,
     self._finalize_metrics) = metrics_fns
    self._input_spec = input_spec
    self._state_structure = None

  @classmethod
  def from_keras(cls, *args, **kwargs):
    """Moved: our Keras 3 model is built by `canonical.learning.
    KerasFunctionalModel.from_keras` (TFF's class does not know it)."""
    del cls, args, kwargs
    raise errors.InvalidTypeError(
        'FunctionalModel.from_keras moved: call canonical.learning.'
        'KerasFunctionalModel.from_keras with the same arguments.')

  # TFF's members.

  @property
  def initial_weights(self):
    """`(trainable, non_trainable)`: the weights training starts from."""
    return self._initial_weights

  def predict_on_batch(self, model_weights, x, training=True):
    """The model's output on a batch `x` at `model_weights`."""
    return self._predict_on_batch_fn(model_weights, x, training)

  def loss(self, output, label, sample_weight=None):
    """The loss of `output` against `label`."""
    return self._loss_fn(output, label, sample_weight)

  def initialize_metrics_state(self):
    """The metrics' state before any batch."""
    return self._initialize_metrics_state()

  def update_metrics_state(self, state, labels, batch_output,
                           sample_weight=None):
    """The metrics' state after one more batch (`batch_output` a
    `BatchOutput`)."""
    return self._update_metrics_state(state, labels, batch_output,
                                      sample_weight)

  def finalize_metrics(self, state):
    """The metrics' values from their state."""
    return self._finalize_metrics(state)

  @property
  def input_spec(self):
    """The spec of one batch."""
    return self._input_spec

  # The interface the learning builders use.

  @property
  def weights_spec(self) -> ModelWeights:
    """`ModelWeights` of `tf.TensorSpec` of the initial weights."""
    return tf.nest.map_structure(
        lambda w: tf.TensorSpec(w.shape, tf.as_dtype(w.dtype)),
        self.initial_model_weights)

  @property
  def initial_model_weights(self) -> ModelWeights:
    """The initial weights as `ModelWeights` of tuples of numpy arrays (a
    Python number takes TensorFlow's dtype: float32, int32)."""
    trainable, non_trainable = self.initial_weights
    return ModelWeights(tuple(_array(w) for w in trainable),
                        tuple(_array(w) for w in non_trainable))

  @property
  def batch_spec(self):
    """The spec of one batch; `tf.data.DatasetSpec(batch_spec)` types a
    client's dataset."""
    return tf.nest.map_structure(_plain_spec, self.input_spec)

  @property
  def metrics(self):
    """Our named per-example metrics (the Keras model's); none here: this
    model's metrics are its `metrics_fns`."""
    return ()

  def loss_and_metrics(self, weights, batch, training=True) -> BatchResult:
    """One batch's loss (TFF's `loss(predict_on_batch(...), y)`) and its
    metrics as flat sums; the non-trainable weights come back unchanged."""
    x, y = split_batch(batch)
    non_trainable = tuple(weights.non_trainable)
    output = self.predict_on_batch((tuple(weights.trainable), non_trainable),
                                   x, training)
    loss = self.loss(output=output, label=y)
    num_examples = tf.shape(tf.nest.flatten(output)[0])[0]
    initial = self.initialize_metrics_state()
    state = self.update_metrics_state(
        initial, labels=y, batch_output=BatchOutput(
            loss=loss, predictions=output, num_examples=num_examples))
    sums = {'loss_sum': tf.cast(loss, tf.float32) * tf.cast(
                num_examples, tf.float32),
            'num_examples': tf.cast(num_examples, tf.float32)}
    for i, (new, old) in enumerate(zip(tf.nest.flatten(state),
                                       tf.nest.flatten(initial))):
      sums[_STATE_KEY.format(i)] = new - tf.cast(old, new.dtype)
    return BatchResult(loss, non_trainable, sums)

  def zero_metrics(self):
    """The flat sums of no batch: the metrics' initial state, no examples."""
    sums = {'loss_sum': tf.constant(0.0), 'num_examples': tf.constant(0.0)}
    for i, value in enumerate(tf.nest.flatten(
        self.initialize_metrics_state())):
      sums[_STATE_KEY.format(i)] = tf.convert_to_tensor(value)
    return sums

  def unfinalized_metrics(self, sums):
    """The metrics' state (TFF's unfinalized metrics) in flat sums."""
    structure = self._metrics_state_structure()
    leaves = [sums[_STATE_KEY.format(i)]
              for i in range(len(tf.nest.flatten(structure)))]
    return tf.nest.pack_sequence_as(structure, leaves)

  def metric_finalizers(self):
    """What finalizes `unfinalized_metrics`: `finalize_metrics`."""
    return self.finalize_metrics

  def mean_metrics(self, sums):
    """'loss' (the mean batch loss over examples), 'num_examples' and the
    finalized metrics."""
    num_examples = sums['num_examples']
    means = {'loss': tf.math.divide_no_nan(sums['loss_sum'], num_examples),
             'num_examples': num_examples}
    finalized = self.finalize_metrics(self.unfinalized_metrics(sums))
    if isinstance(finalized, Mapping):
      means.update(finalized)
    else:  # One metric's value, or a list of them.
      means['metrics'] = finalized
    return means

  def _metrics_state_structure(self):
    if self._state_structure is None:
      traced = tf.function(self.initialize_metrics_state)
      self._state_structure = traced.get_concrete_function().structured_outputs
    return self._state_structure


def _array(value):
  if isinstance(value, np.ndarray):
    return value
  return tf.convert_to_tensor(value).numpy()
