"""TFF's older builder, `build_federated_averaging_process`, composed from
TFF 0.87's: `build_weighted_fed_avg` with the broadcast process as its
model distributor and the aggregation process's factory as its model
aggregator. It has no round of its own; the process it returns is TFF's
`LearningProcess`, with TFF's state and metrics.
"""

from canonical import errors
from canonical.core import types as ft
from canonical.learning.algorithms import averaging
from canonical.learning import model_fns
from canonical.learning import optimizers
from canonical.learning import templates
from canonical.templates import measured_process

# The older builder's state is TFF's now; the name stays for code that
# checks a state's type.
ServerState = templates.LearningAlgorithmState


def _default_server_optimizer():
  return optimizers.sgd(1.0)


def _check_process(process, expected_spec, role, builder, model_part):
  if not isinstance(process, measured_process.MeasuredProcess):
    raise errors.InvalidTypeError(
        f'build_federated_averaging_process: {role} must be a MeasuredProcess '
        f'(e.g. from {builder}), got {type(process).__name__}.')
  if not ft.same_member(process.value_spec, expected_spec):
    raise errors.FederatedError(
        f'build_federated_averaging_process: {role} {process.name!r} works on '
        f'{ft.describe(process.value_spec)}, but the model\'s {model_part} '
        f'are {ft.describe(expected_spec)}: build it from the same model_fn.')


def build_federated_averaging_process(
    model_fn, client_optimizer_fn,
    server_optimizer_fn=_default_server_optimizer, broadcast_process=None,
    aggregation_process=None, client_epochs=1):
  """Federated averaging: TFF's `build_weighted_fed_avg` over the older
  building blocks.

  Args:
    model_fn: no-argument function returning a `canonical.learning
      .FunctionalModel` (or a built `keras.Model`, wrapped with sparse
      cross-entropy on logits and accuracy); a `FunctionalModel` itself works too.
    client_optimizer_fn: no-argument function returning a pure optimizer
      (`canonical.learning.sgd(...)`); every client starts it afresh.
    server_optimizer_fn: the same, for the server (sgd(1.0): plain FedAvg;
      momentum or `adam` give FedAvgM / FedAdam).
    broadcast_process: a `MeasuredProcess` over the model weights, e.g.
      `build_encoded_broadcast_process_from_model`; default: plain broadcast.
    aggregation_process: a `MeasuredProcess` over the trainable weights from
      `canonical.aggregators` (e.g. `build_encoded_mean_process_from_model`);
      its factory is the model aggregator. Default: the weighted mean. If it
      keeps client state (error feedback), so does the returned process.
    client_epochs: passes over its data each client makes per round.

  Returns TFF's `LearningProcess`: the state a `LearningAlgorithmState`
  (`ServerState` is its old name), the metrics TFF's.
  """
  who = 'build_federated_averaging_process'
  model = model_fns.functional_model_of(model_fn, who)
  weights_spec = model.weights_spec
  model_distributor = model_aggregator = None
  if broadcast_process is not None:
    _check_process(broadcast_process, weights_spec, 'broadcast_process',
                   'build_encoded_broadcast_process_from_model', 'weights')
    if broadcast_process.has_client_state:
      raise errors.FederatedError(
          f'{who}: the broadcast process keeps client '
          'state; only the aggregation process may.')
    model_distributor = templates.from_broadcast_process(broadcast_process)
  if aggregation_process is not None:
    _check_process(aggregation_process, weights_spec.trainable,
                   'aggregation_process',
                   'build_encoded_mean_process_from_model',
                   'trainable weights')
    model_aggregator = getattr(aggregation_process, 'factory', None)
    if model_aggregator is None:
      raise errors.InvalidTypeError(
          f'{who}: aggregation_process {aggregation_process.name!r} was not '
          'made by canonical.aggregators, so it has no aggregation factory; '
          'pass a tff.aggregators factory to build_weighted_fed_avg('
          'model_aggregator=...) instead.')
  return averaging.build_weighted_fed_avg(
      model, client_optimizer_fn, server_optimizer_fn,
      model_distributor=model_distributor, model_aggregator=model_aggregator,
      client_epochs=client_epochs)
