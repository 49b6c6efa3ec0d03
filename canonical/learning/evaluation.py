"""Evaluation of weights on a dataset, as metric sums that add across clients."""

from canonical.learning.model import ModelWeights
from canonical.learning.model import without_empty_batches


def evaluate(functional_model, weights, dataset):
  """Sums of 'loss_sum', 'num_examples' and each metric (e.g. 'correct') over `dataset`.

  Runs the model in inference mode (batch norm uses its moving statistics).
  Sums, not means, so clients' results add up; `functional_model.mean_metrics`
  turns them into loss and accuracy.
  """
  weights = ModelWeights(tuple(weights.trainable), tuple(weights.non_trainable))

  def add_batch(sums, batch):
    metrics = functional_model.loss_and_metrics(
        weights, batch, training=False).metrics
    return {name: sums[name] + metrics[name] for name in sums}

  return without_empty_batches(dataset).reduce(
      functional_model.zero_metrics(), add_batch)
