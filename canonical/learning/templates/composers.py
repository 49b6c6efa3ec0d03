"""TFF's `compose_learning_process`: a `LearningProcess` from the four
building blocks of a learning algorithm, wired as TFF wires them.

    state.global_model_weights --> distributor --> weights@CLIENTS
    weights@CLIENTS, client_data --> client_work --> ClientResult@CLIENTS
    ClientResult --> aggregator --> update@SERVER
    global_model_weights, update --> finalizer --> new global_model_weights

The state is `LearningAlgorithmState` (the weights and each block's state);
the metrics `OrderedDict(distributor=, client_work=, aggregator=,
finalizer=)`, each block's measurements. An aggregator keeping state at each
client (error feedback; our extension) makes a process that keeps it:
`next(state, client_data, client_state)`. Every block's `next` is inlined
into the round, so the composed process compiles to one form.
"""

import collections

from canonical import errors
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import naming
from canonical.core import specs
from canonical.core import types as ft
from canonical.learning.templates import checks
from canonical.learning.templates import client_works
from canonical.learning.templates import distributors
from canonical.learning.templates import finalizers
from canonical.learning.templates import learning_process
from canonical.templates import aggregation_process
from canonical.templates import measured
from canonical.templates import measured_process

LearningAlgorithmState = learning_process.LearningAlgorithmState


def compose_learning_process(initial_model_weights_fn,
                             model_weights_distributor, client_work,
                             model_update_aggregator, model_finalizer):
  """TFF's composition: `initial_model_weights_fn` a tf_computation of no
  parameter returning the (unplaced) model weights; the others a
  `DistributionProcess`, `ClientWorkProcess`, weighted `AggregationProcess`
  and `FinalizerProcess` whose types chain. `get_hparams` / `set_hparams`
  are the client work's and the finalizer's, as
  `OrderedDict(client_work=, finalizer=)`."""
  weights_type = _check(initial_model_weights_fn, model_weights_distributor,
                        client_work, model_update_aggregator,
                        model_finalizer)
  distributor, aggregator, finalizer = (
      model_weights_distributor, model_update_aggregator, model_finalizer)
  data_type = client_work.next.parameter_types[2]

  @computations.federated_computation()
  def init_fn():
    return intrinsics.federated_zip(LearningAlgorithmState(
        intrinsics.federated_eval(initial_model_weights_fn, ft.SERVER),
        distributor.initialize(), client_work.initialize(),
        aggregator.initialize(), finalizer.initialize()))

  state_type = init_fn.type_signature.result

  def step(state, client_data, client_state=None):
    distributed = distributor.next(state.distributor,
                                   state.global_model_weights)
    worked = client_work.next(state.client_work, distributed.result,
                              client_data)
    aggregated = aggregation_process.call_next(
        aggregator, state.aggregator, worked.result.update,
        worked.result.update_weight, client_state=client_state)
    finalized = finalizer.next(state.finalizer, state.global_model_weights,
                               aggregated.result)
    new_state = intrinsics.federated_zip(LearningAlgorithmState(
        finalized.result, distributed.state, worked.state, aggregated.state,
        finalized.state))
    metrics = intrinsics.federated_zip(collections.OrderedDict(
        distributor=distributed.measurements,
        client_work=worked.measurements,
        aggregator=aggregated.measurements,
        finalizer=finalized.measurements))
    if client_state is None:
      return learning_process.LearningProcessOutput(new_state, metrics)
    return learning_process.LearningProcessOutputWithClientState(
        new_state, metrics, measured.client_state_of(aggregated))

  next_fn = aggregation_process.next_computation(
      step, [('state', state_type), ('client_data', data_type)],
      aggregator.client_state_type)

  state_member = specs.plain(state_type.member)
  get_weights, set_weights = learning_process.model_weights_computations(
      state_member, weights_type)

  def get_hparams(state):
    return collections.OrderedDict(
        client_work=client_work.get_hparams(state.client_work),
        finalizer=finalizer.get_hparams(state.finalizer))

  get_hparams_fn = specs.tf_computation(get_hparams, state_member)

  def set_hparams(state, hparams):
    return state._replace(
        client_work=client_work.set_hparams(state.client_work,
                                            hparams['client_work']),
        finalizer=finalizer.set_hparams(state.finalizer,
                                        hparams['finalizer']))

  set_hparams_fn = specs.tf_computation(
      set_hparams, state_member, specs.plain(get_hparams_fn.result_spec))
  # What the distributor and the aggregator encode, for the form's summary.
  encoders = measured_process.describe_encoders(
      'broadcast', weights_type, measured_process.encoders_of(distributor))
  encoders.update(measured_process.describe_encoders(
      'aggregation', specs.plain(aggregator.next.parameter_types[1].member),
      measured_process.encoders_of(aggregator)))
  return learning_process.LearningProcess(
      init_fn, next_fn, get_weights, set_weights,
      get_hparams_fn=get_hparams_fn, set_hparams_fn=set_hparams_fn,
      encoders=encoders,
      client_state_initializer=aggregator.client_state_initializer)


def _check(initial_model_weights_fn, distributor, client_work, aggregator,
           finalizer):
  """TFF's checks that the blocks fit together; the weights' type."""
  where = checks.located('compose_learning_process')
  if not isinstance(initial_model_weights_fn, computations.TFComputation) or (
      initial_model_weights_fn.parameter_specs):
    raise errors.InvalidTypeError(
        f'{where}: initial_model_weights_fn must be a tf_computation with no '
        'parameter returning the (unplaced) model weights, got '
        f'{naming.describe_object(initial_model_weights_fn)}.')
  for block, kind, what in (
      (distributor, distributors.DistributionProcess,
       'model_weights_distributor'),
      (client_work, client_works.ClientWorkProcess, 'client_work'),
      (aggregator, aggregation_process.AggregationProcess,
       'model_update_aggregator'),
      (finalizer, finalizers.FinalizerProcess, 'model_finalizer')):
    if not isinstance(block, kind):
      raise errors.InvalidTypeError(
          f'{where}: {what} must be a {kind.__name__}, got '
          f'{naming.describe_object(block)}.')
  if not aggregator.is_weighted:
    raise errors.InvalidTypeError(
        f'{where}: model_update_aggregator must be weighted (next takes the '
        'update and its weight); make it with a WeightedAggregationFactory, '
        'e.g. tff.aggregators.MeanFactory().create(update_type, '
        'weight_type).')
  weights = specs.plain(initial_model_weights_fn.result_spec)
  at_server = ft.server(weights)
  distributed = measured.result_type(distributor.next).result
  # A ClientResult: (update, update_weight), by position (a type's field
  # named `update` may be shadowed by a method of the type).
  worked = checks.member(measured.result_type(client_work.next).result)
  aggregated = measured.result_type(aggregator.next).result
  finalized = measured.result_type(finalizer.next).result
  for expected, actual, takes, gives in (
      (distributor.next.parameter_types[1], at_server,
       'the distributor takes', 'the initial model weights are'),
      (client_work.next.parameter_types[1], distributed,
       'the client work takes', 'the distributor gives'),
      (aggregator.next.parameter_types[1].member, worked[0],
       'the aggregator takes', 'the client work\'s update is'),
      (aggregator.next.parameter_types[2].member, worked[1],
       'the aggregator\'s weight is', 'the client work\'s update_weight is'),
      (finalizer.next.parameter_types[1], at_server,
       'the finalizer takes the weights as', 'the initial model weights are'),
      (finalizer.next.parameter_types[2], aggregated,
       'the finalizer takes the update as', 'the aggregator gives'),
      (at_server, finalized,
       'the model weights are', 'the finalizer gives')):
    if not measured.fits(expected, actual):
      raise errors.FederatedError(
          f'{where}: the blocks do not fit: {takes} '
          f'{measured.describe_type(expected)}, but {gives} '
          f'{measured.describe_type(actual)}.')
  return weights
