"""Models as the learning builders take them.

A model is a `FunctionalModel` (`functional`): TFF's class, pure functions
of its weights, which a user builds as TFF's docs do or gets from
`functional_model_from_keras`; `KerasFunctionalModel` (`keras_functional`)
is our Keras 3 model, the one `from_keras_model` and `KerasFunctionalModel
.from_keras` give. The builders use this interface of it:

- `weights_spec`, `initial_model_weights`: `ModelWeights` of specs / numpy
  arrays; `batch_spec`: one batch's spec;
- `loss_and_metrics(weights, batch, training)`: a `BatchResult` (the loss to
  differentiate, the updated non-trainables, the batch's metrics as flat
  sums with 'loss_sum' and 'num_examples'); `zero_metrics()`: the sums of no
  batch; sums add key by key across batches and clients;
- `mean_metrics(sums)`: 'loss', 'num_examples' and each metric's value;
- `unfinalized_metrics(sums)` and `metric_finalizers()`: the sums as TFF's
  unfinalized metrics and what finalizes them, which a
  `tff.learning.metrics` aggregator takes (the sums count 'num_batches').
"""

import tensorflow as tf

from canonical.learning.functional import BatchOutput
from canonical.learning.functional import BatchResult
from canonical.learning.functional import FunctionalModel
from canonical.learning.functional import split_batch
from canonical.learning.model_weights import ModelWeights

__all__ = ['BatchOutput', 'BatchResult', 'FunctionalModel', 'ModelWeights',
           'split_batch', 'without_empty_batches']


def without_empty_batches(dataset):
  """`dataset` without its zero-size batches, so that training and
  evaluation never run on one. (A training step on one would still move
  weights under momentum; and on CPUs where oneDNN runs them, e.g. with
  AVX-512/AMX, its max-pool gradient aborts the process on a zero-size batch
  and its convolution refuses one.)"""

  def has_examples(*parts):  # tf.data passes a tuple's parts one by one.
    x, _ = split_batch(parts[0] if len(parts) == 1 else parts)
    return tf.shape(tf.nest.flatten(x)[0])[0] > 0

  return dataset.filter(has_examples)

