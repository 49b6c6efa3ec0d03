"""`tff.learning.templates` of TFF 0.87: the `LearningProcess` contract.

A learning process is an `IterativeProcess` (so it compiles to a form and
runs on Beam) whose `next` returns `LearningProcessOutput(state, metrics)`,
with computations to read and replace the model weights in its state.
"""

from typing import Any, NamedTuple

from canonical import errors
from canonical.core import specs
from canonical.templates import iterative_process


class LearningAlgorithmState(NamedTuple):
  """The server state of a composed learning algorithm, as TFF keeps it."""
  global_model_weights: Any
  distributor: Any
  client_work: Any
  aggregator: Any
  finalizer: Any


class LearningProcessOutput(NamedTuple):
  state: Any
  metrics: Any


class ClientResult(NamedTuple):
  """What a client's work sends for aggregation: its update and weight."""
  update: Any
  update_weight: Any


class LearningProcess(iterative_process.IterativeProcess):
  """`initialize`, `next(state, client_data) -> LearningProcessOutput`,
  `get_model_weights(state)` and `set_model_weights(state, weights)` (the
  last two tf_computations, as in TFF)."""

  def __init__(self, initialize_fn, next_fn, get_model_weights,
               set_model_weights, encoders=None):
    super().__init__(initialize_fn, next_fn, encoders=encoders)
    result = self.next.trace().result
    if not isinstance(result, LearningProcessOutput):
      raise errors.FederatedError(
          f'LearningProcess at {self.location}: next must return a '
          f'LearningProcessOutput(state, metrics), got '
          f'{type(result).__name__}.')
    self.get_model_weights = get_model_weights
    self.set_model_weights = set_model_weights


def model_weights_computations(state_spec, weights_spec):
  """TFF's `get_model_weights` and `set_model_weights` for a state whose
  `global_model_weights` are `weights_spec`."""
  get = specs.tf_computation(lambda state: state.global_model_weights,
                             state_spec)
  put = specs.tf_computation(
      lambda state, weights: state._replace(global_model_weights=weights),
      state_spec, weights_spec)
  return get, put
