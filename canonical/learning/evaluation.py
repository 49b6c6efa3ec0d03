"""Evaluation of weights on a dataset, as metric sums that add across clients."""

import tensorflow as tf

from canonical.learning.metrics import finalizing
from canonical.learning.model import ModelWeights
from canonical.learning.model import without_empty_batches


def evaluate(functional_model, weights, dataset, count_batches=False):
  """Sums of 'loss_sum', 'num_examples' and each metric (e.g. 'correct') over `dataset`.

  Runs the model in inference mode (batch norm uses its moving statistics).
  Sums, not means, so clients' results add up; `functional_model.mean_metrics`
  turns them into loss and accuracy. `count_batches` adds 'num_batches'.
  """
  weights = ModelWeights(tuple(weights.trainable), tuple(weights.non_trainable))
  zero = functional_model.zero_metrics()
  if count_batches:
    zero['num_batches'] = tf.constant(0.0)

  def add_batch(sums, batch):
    metrics = dict(functional_model.loss_and_metrics(
        weights, batch, training=False).metrics, num_batches=1.0)
    return {name: sums[name] + metrics[name] for name in sums}

  return without_empty_batches(dataset).reduce(zero, add_batch)


def reported_metrics(functional_model, sums):
  """TFF's metrics of a round from summed ones (with 'num_batches'): the
  model's unfinalized metrics, finalized (a Keras model's: its metrics and
  loss as means over examples, then the counts)."""
  return finalizing.finalize(functional_model.metric_finalizers(),
                             functional_model.unfinalized_metrics(sums))
