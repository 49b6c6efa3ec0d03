"""TensorFlow Federated's `AggregationProcess`: a measured process moving
values from the clients to the server.

`next(state@SERVER, value@CLIENTS[, weight@CLIENTS])` returns
`MeasuredProcessOutput(state@SERVER, result@SERVER, measurements@SERVER)`.
An aggregation factory's `create` returns one; an outer process (a learning
algorithm's round, or an outer factory) calls its `initialize` and `next`
while it is traced, which inlines them.

Our extension of TFF's API: a process may keep state at each client (error
feedback's residuals). It has a `client_state_initializer` (a tf_computation
of no parameter making a new client's state); its `next` takes the client
state last and returns `MeasuredProcessOutputWithClientState`, the clients'
new state in its fourth field. An outer factory passes an inner process's
client state through (`call_next`, `next_computation`), so a learning
algorithm over it keeps the state of each client between rounds.
"""

import inspect

import tensorflow as tf

from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import naming
from canonical.core import types as ft
from canonical import errors
from canonical.templates import iterative_process
from canonical.templates import measured


class AggregationProcess(measured.MeasuredProcess):
  """TFF's `AggregationProcess(initialize_fn, next_fn)`.

  Both are federated computations: `initialize_fn` returns the state at
  SERVER; `next_fn` takes the state, the value at CLIENTS and optionally
  more CLIENTS arguments (the weight), and returns its result and
  measurements at SERVER.
  """

  def __init__(self, initialize_fn, next_fn, *,
               client_state_initializer=None):
    where = f'AggregationProcess at {naming.user_location()}'
    if isinstance(initialize_fn, iterative_process.ServerInitialize):
      initialize_fn = initialize_fn.federated
    for what, computation in (('initialize_fn', initialize_fn),
                              ('next_fn', next_fn)):
      if not isinstance(computation, computations.FederatedComputation):
        raise errors.FederatedError(
            f'{where}: {what} must be a federated_computation (the state '
            f'placed at SERVER), got {naming.describe_object(computation)}.')
    super().__init__(initialize_fn, next_fn, next_is_multi_arg=True)
    initial = measured.result_type(self.initialize)
    if not measured.is_placed_at(initial, ft.SERVER):
      raise errors.FederatedError(
          f'{where}: initialize_fn must return the state placed at SERVER '
          f'(federated_value((), SERVER) for none), it returns '
          f'{measured.describe_type(initial)}.')
    params = next_fn.parameter_types
    if params[1].placement != ft.CLIENTS:
      raise errors.FederatedError(
          f'{where}: next_fn\'s second parameter (the value) must be placed '
          f'at CLIENTS, it is {params[1]}.')
    for param in params[2:]:
      if param.placement != ft.CLIENTS:
        raise errors.FederatedError(
            f'{where}: next_fn\'s parameters after the value (the weight) '
            f'must be placed at CLIENTS, got {param}.')
    self.client_state_initializer = client_state_initializer
    output = measured.result_type(next_fn)
    _check_client_state(client_state_initializer, params, output, where)
    for field in ('result', 'measurements'):
      part = getattr(output, field)
      if not measured.is_placed_at(part, ft.SERVER):
        raise errors.FederatedError(
            f'{where}: the {field} of next_fn\'s MeasuredProcessOutput must '
            f'be placed at SERVER (federated_value((), SERVER) for none), '
            f'it is {measured.describe_type(part)}.')

  @property
  def has_client_state(self):
    return self.client_state_initializer is not None

  @property
  def client_state_type(self):
    """The unplaced type of a client's state (None without)."""
    if not self.has_client_state:
      return None
    return self.client_state_initializer.result_spec

  @property
  def is_weighted(self):
    """Whether `next` takes a weight after the value."""
    return len(self.next.parameter_types) - self.has_client_state == 3

  @property
  def value_type(self):
    """The unplaced type of the values aggregated."""
    return self.next.parameter_types[1].member

  @property
  def result_type(self):
    """The unplaced type of the aggregate."""
    result = measured.result_type(self.next).result
    return tf.nest.map_structure(lambda t: t.member, result)


def _check_client_state(initializer, params, output, where):
  """With a client state initializer, `next` takes that state last and
  returns the clients' new state; without, neither."""
  with_state = isinstance(output, measured.MeasuredProcessOutputWithClientState)
  if initializer is None:
    if with_state:
      raise errors.FederatedError(
          f'{where}: next_fn returns a client state, but no '
          'client_state_initializer was given to make a new client\'s.')
    return
  if not isinstance(initializer, computations.TFComputation) or (
      initializer.parameter_specs):
    raise errors.FederatedError(
        f'{where}: client_state_initializer must be a tf_computation with no '
        f'parameter, got {naming.describe_object(initializer)}.')
  client_state = ft.clients(initializer.result_spec)
  if len(params) < 3 or not measured.fits(params[-1], client_state):
    raise errors.FederatedError(
        f'{where}: with a client_state_initializer, next_fn\'s last '
        f'parameter is the client state, {measured.describe_type(client_state)}'
        f'; it takes {measured.describe_type(params[-1])}.')
  if not with_state or not measured.fits(client_state, output.client_state):
    raise errors.FederatedError(
        f'{where}: with a client_state_initializer, next_fn must return a '
        'MeasuredProcessOutputWithClientState whose client_state is '
        f'{measured.describe_type(client_state)}, it returns '
        f'{measured.describe_type(output)}.')


def initialize_at_server(initialize):
  """The federated `initialize_fn` of a process whose state `initialize` (a
  tf_computation of no parameter) makes at the server."""

  @computations.federated_computation()
  def init_fn():
    return intrinsics.federated_eval(initialize, ft.SERVER)

  return init_fn


def call_next(process, state, *values, client_state=None):
  """`process.next(state, *values)`, given the clients' state last when the
  process keeps one; while tracing an outer computation."""
  if process.has_client_state != (client_state is not None):
    raise errors.FederatedError(
        f'{process!r}: the client state is passed to a process exactly when '
        f'it keeps one (it {"does" if process.has_client_state else "does not"}'
        ').')
  extra = (client_state,) if process.has_client_state else ()
  return process.next(state, *values, *extra)


def next_computation(step, parameters, client_state_type=None,
                     name='next_fn'):
  """An outer process's `next_fn`: a federated computation of `parameters`
  ((name, type) pairs: the state, then CLIENTS values), taking a
  `client_state` last when `client_state_type` (an inner process's, or None)
  is given; `step(*values, client_state=...)` builds its output (with
  `measured.output`). The names show in its type signature, as TFF's do."""
  parameters = list(parameters)
  if client_state_type is not None:
    parameters.append(('client_state', ft.clients(client_state_type)))

  def next_fn(*args):
    if client_state_type is None:
      return step(*args)
    return step(*args[:-1], client_state=args[-1])

  next_fn.__name__ = name
  next_fn.__signature__ = inspect.Signature([
      inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD)
      for n, _ in parameters])
  return computations.federated_computation(*(t for _, t in parameters))(
      next_fn)
