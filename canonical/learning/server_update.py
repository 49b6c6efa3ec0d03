"""The server's step of federated averaging: the mean client delta as a gradient."""

import tensorflow as tf

from canonical import errors
from canonical.learning.model import ModelWeights


def server_update(server_optimizer, server_optimizer_state, weights,
                  mean_delta):
  """`(new_optimizer_state, new_weights)` after one server step.

  The negated mean delta is the "gradient" the server optimizer descends, so
  SGD with learning rate 1 lands exactly on weights + mean_delta (plain
  FedAvg) and any other optimizer (momentum, Adam) gives FedAvgM / FedAdam.
  Non-trainable weights are not averaged and pass through unchanged. The
  optimizer (TFF's `initialize` / `next`) state starts as
  `server_optimizer.initialize(specs of weights.trainable)`.
  """
  trainable = tuple(tf.convert_to_tensor(w) for w in weights.trainable)
  mean_delta = tuple(tf.convert_to_tensor(d) for d in mean_delta)
  if len(mean_delta) != len(trainable):
    raise errors.InvalidValueError(
        f'mean_delta has {len(mean_delta)} tensors but the model has '
        f'{len(trainable)} trainable weights.')
  pseudo_gradient = tuple(-d for d in mean_delta)
  new_state, new_trainable = server_optimizer.next(
      server_optimizer_state, trainable, pseudo_gradient)
  non_trainable = tuple(tf.convert_to_tensor(w) for w in weights.non_trainable)
  return new_state, ModelWeights(tuple(new_trainable), non_trainable)
