"""TFF's `LearningProcess`: an `IterativeProcess` (so it compiles to a form
and runs on Beam) whose `next` returns `LearningProcessOutput(state,
metrics)`, with tf_computations that read and replace the model weights and
the hyperparameters kept in its state."""

from typing import Any, NamedTuple

from canonical import errors
from canonical.core import specs
from canonical.learning.templates import checks
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


class LearningProcessOutputWithClientState(NamedTuple):
  """What `next` returns when the process keeps state at each client (an
  aggregator's, as error feedback's residuals; our extension of TFF's API):
  TFF's two fields, then the clients' new `client_state`."""
  state: Any
  metrics: Any
  client_state: Any


class LearningProcess(iterative_process.IterativeProcess):
  """TFF's `LearningProcess(initialize_fn, next_fn, get_model_weights,
  set_model_weights, *, get_hparams_fn=None, set_hparams_fn=None)`:
  `next(state, client_data) -> LearningProcessOutput`; the other four are
  tf_computations on the (unplaced) state. Without hparams functions the
  process has none: `get_hparams` gives an empty OrderedDict and
  `set_hparams` the state as it was.

  With `client_state_initializer` (our extension), `next(state, client_data,
  client_state)` returns `LearningProcessOutputWithClientState`."""

  def __init__(self, initialize_fn, next_fn, get_model_weights,
               set_model_weights, *, get_hparams_fn=None, set_hparams_fn=None,
               encoders=None, client_state_initializer=None):
    super().__init__(initialize_fn, next_fn, encoders=encoders,
                     client_state_initializer=client_state_initializer)
    where = checks.located('LearningProcess')
    result = self.next.trace().result
    output = (LearningProcessOutputWithClientState if self.has_client_state
              else LearningProcessOutput)
    if not isinstance(result, output):
      raise errors.FederatedError(
          f'{where}: next must return a {output.__name__}('
          f'{", ".join(output._fields)}), got {type(result).__name__}.')
    state_spec = specs.plain(self.state_spec)
    checks.state_function(get_model_weights, state_spec, where,
                          'get_model_weights', 1)
    checks.state_function(set_model_weights, state_spec, where,
                          'set_model_weights', 2, returns_state=True)
    get_hparams_fn, set_hparams_fn = checks.hparams_functions(
        get_hparams_fn, set_hparams_fn, state_spec, where)
    self.get_model_weights = get_model_weights
    self.set_model_weights = set_model_weights
    self.get_hparams = get_hparams_fn
    self.set_hparams = set_hparams_fn


def model_weights_computations(state_spec, weights_spec):
  """TFF's `get_model_weights` and `set_model_weights` for a state whose
  `global_model_weights` are `weights_spec`."""
  get = specs.tf_computation(lambda state: state.global_model_weights,
                             state_spec)
  put = specs.tf_computation(
      lambda state, weights: state._replace(global_model_weights=weights),
      state_spec, weights_spec)
  return get, put
