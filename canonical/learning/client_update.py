"""Local training on one client: the `work` of federated averaging.

A pure function of (weights, dataset): it runs in any `tf.function`, with the
dataset as an argument (its variant tensor), and traces to a graph of one
`ReduceDataset` whose body is the training step, with no variables, iterators
or stateful random ops. Clients keep no optimizer state between rounds: every
call starts the client optimizer afresh.
"""

from typing import NamedTuple

import tensorflow as tf

from canonical import errors
from canonical.learning.model import ModelWeights
from canonical.learning.model import without_empty_batches


class ClientOutput(NamedTuple):
  """What a client sends back (`weights_delta`, `num_examples`) and reports."""
  weights_delta: tuple  # trained minus initial trainable weights
  num_examples: tf.Tensor  # float32 examples in one pass: the client's weight
  metrics: dict  # float32 sums over every training batch of every epoch


def client_update(functional_model, client_optimizer, weights, dataset,
                  epochs=1, optimizer_state=None, count_batches=False,
                  proximal_strength=0.0):
  """Trains `weights` on `dataset` (batches) for `epochs` passes; a `ClientOutput`.

  `client_optimizer` is a `canonical.learning.optimizers.Optimizer` (TFF's
  `initialize` / `next`); its state is carried through the reduce.

  Metrics are summed over the training batches as they are trained on (the
  loss is the batch's loss before its step), plus 'non_finite_updates': a
  client whose update is not finite sends a zero delta with weight 0 and
  reports 1 there, so one broken client cannot poison the round's mean.
  `optimizer_state` starts the client optimizer (TFF's hyperparameters set
  in a fresh state); `count_batches` adds 'num_batches' to the sums;
  `proximal_strength` mu adds FedProx's mu * (w - w_initial) to every
  gradient (the gradient of mu/2 ||w - w_initial||^2 added to the loss).
  Only trainable weights get a delta; updated non-trainables (batch norm
  statistics, dropout seeds) stay on the client.
  """
  if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
    raise errors.InvalidValueError(
        f'epochs must be a positive Python int, got {epochs!r}.')
  weights = _as_tensors(weights)
  if optimizer_state is None:
    optimizer_state = client_optimizer.initialize(tf.nest.map_structure(
        tf.TensorSpec.from_tensor, weights.trainable))
  zero_metrics = functional_model.zero_metrics()
  if count_batches:
    zero_metrics['num_batches'] = tf.constant(0.0)
  initial_state = (weights.trainable, weights.non_trainable, optimizer_state,
                   zero_metrics)

  def train_on_batch(state, batch):
    trainable, non_trainable, optimizer_state, sums = state
    with tf.GradientTape() as tape:
      tape.watch(trainable)
      output = functional_model.loss_and_metrics(
          ModelWeights(trainable, non_trainable), batch, training=True)
    gradients = tape.gradient(
        output.loss, trainable,
        unconnected_gradients=tf.UnconnectedGradients.ZERO)
    if proximal_strength:
      gradients = tuple(
          g + proximal_strength * (w - w0)
          for g, w, w0 in zip(gradients, trainable, weights.trainable))
    optimizer_state, trainable = client_optimizer.next(
        optimizer_state, trainable, gradients)
    batch_metrics = dict(output.metrics, num_batches=tf.constant(1.0))
    sums = {name: sums[name] + batch_metrics[name] for name in sums}
    return tuple(trainable), output.non_trainable, optimizer_state, sums

  dataset = without_empty_batches(dataset)
  if epochs > 1:
    dataset = dataset.repeat(epochs)
  trained, _, _, sums = dataset.reduce(initial_state, train_on_batch)
  delta = tuple(new - old for new, old in zip(trained, weights.trainable))
  num_examples = sums['num_examples'] / float(epochs)
  return _drop_if_not_finite(ClientOutput(delta, num_examples, sums))


def client_gradient(functional_model, weights, dataset):
  """`(gradient, num_examples, metric sums)` of one client for FedSGD: the
  gradient of the mean loss over every example, at `weights`, with no step
  taken; the sums count 'num_batches' too."""
  weights = _as_tensors(weights)
  zero_gradient = tuple(tf.zeros_like(w) for w in weights.trainable)
  zero_metrics = dict(functional_model.zero_metrics(),
                      num_batches=tf.constant(0.0))

  def add_batch(state, batch):
    gradient_sum, sums = state
    with tf.GradientTape() as tape:
      tape.watch(weights.trainable)
      output = functional_model.loss_and_metrics(weights, batch,
                                                 training=True)
    gradient = tape.gradient(
        output.loss, weights.trainable,
        unconnected_gradients=tf.UnconnectedGradients.ZERO)
    size = output.metrics['num_examples']
    gradient_sum = tuple(a + g * size for a, g in zip(gradient_sum, gradient))
    batch_metrics = dict(output.metrics, num_batches=tf.constant(1.0))
    return gradient_sum, {name: sums[name] + batch_metrics[name]
                          for name in sums}

  gradient_sum, sums = without_empty_batches(dataset).reduce(
      (zero_gradient, zero_metrics), add_batch)
  num_examples = sums['num_examples']
  gradient = tuple(tf.math.divide_no_nan(g, num_examples)
                   for g in gradient_sum)
  return gradient, num_examples, sums


def _drop_if_not_finite(output):
  finite = tf.reduce_all(
      [tf.reduce_all(tf.math.is_finite(d)) for d in output.weights_delta])
  delta = tuple(tf.where(finite, d, tf.zeros_like(d))
                for d in output.weights_delta)
  num_examples = tf.where(finite, output.num_examples, 0.0)
  metrics = dict(output.metrics,
                 non_finite_updates=1.0 - tf.cast(finite, tf.float32))
  return ClientOutput(delta, num_examples, metrics)


def _as_tensors(weights):
  return ModelWeights(
      tuple(tf.convert_to_tensor(w) for w in weights.trainable),
      tuple(tf.convert_to_tensor(w) for w in weights.non_trainable))
