"""`IterativeProcess`: initialize + next, optionally with state kept at each client."""

import dataclasses

import tensorflow as tf

from canonical.core import computations
from canonical.core import evaluation
from canonical.core.intrinsics import registry
from canonical.core import ir
from canonical.core import naming
from canonical.core import types as ft
from canonical import errors

# A tf_computation, or a federated_computation (initialize may be either).
Computation = computations.TFComputation | computations.FederatedComputation


class IterativeProcess:
  """`initialize() -> server state`; `next(state, data[, client_state])`.

  TFF's `IterativeProcess(initialize_fn, next_fn, next_is_multi_arg=None)`,
  restricted to what a canonical form runs: `next` takes the server state
  and the clients' data (and, with client state, the clients' state).

  `initialize` is a tf_computation with no argument, or (as in TFF) a
  federated_computation with no parameter returning a SERVER value; it
  becomes the form's ( -> S) piece either way (`self.initialize` is then a
  tf_computation running its server ops, typed and composed as the
  federated one, `self.initialize_graph` its trace).

  `next` returns `(server_state, metrics)`, or with client state
  `(server_state, metrics, client_state)`; then `client_state_initializer`
  (a tf_computation with no argument) makes a new client's first state.
  Either may end with one more CLIENTS value: per-client outputs (a client's
  own metrics, say), returned by the executors but never aggregated nor kept.
  As in TFF, `next` may also return only the new state: the round then has
  no metrics (the form's are empty), and `self.next` still returns only the
  state to its callers.
  `encoders` optionally describes the encoder applied to each tensor that
  travels (tensor name -> description), for the form's summary.
  """

  def __init__(
      self, initialize_fn: Computation,
      next_fn: computations.FederatedComputation,
      next_is_multi_arg: bool | None = None, *,
      client_state_initializer: computations.TFComputation | None = None,
      encoders: dict | None = None):
    location = naming.user_location()
    self.location = location
    where = f'{type(self).__name__} at {location}'
    if isinstance(next_is_multi_arg, computations.TFComputation):
      # `IterativeProcess(initialize, next, client_state_initializer)`, as
      # this project documented it before TFF's third parameter came.
      if client_state_initializer is not None:
        raise errors.FederatedError(
            f'{where}: client_state_initializer given twice (as the third '
            'argument and by name).')
      next_is_multi_arg, client_state_initializer = None, next_is_multi_arg
    check_next_is_multi_arg(next_is_multi_arg, where)
    initialize, self.initialize_graph = initialize_and_next(
        initialize_fn, next_fn, where, location)
    self.initialize = initialize
    self.client_state_initializer = client_state_initializer
    if (client_state_initializer is None and
        _returns_only_state(next_fn, initialize.result_spec)):
      next_fn = StateOnlyNext(next_fn)
    self.next = next_fn
    # Tensor -> description of its encoder, carried into the compiled form.
    self.encoders = dict(encoders or {})
    self._check_signature()

  @property
  def has_client_state(self):
    return self.client_state_initializer is not None

  @property
  def has_client_outputs(self):
    """Whether `next` returns per-client outputs after everything else."""
    return len(self.next.trace().result) > (3 if self.has_client_state else 2)

  @property
  def state_spec(self):
    return self.initialize.result_spec

  @property
  def state_type(self):
    """TFF's `state_type`: the type of `next`'s first parameter."""
    return self.next.parameter_types[0]

  def _check_signature(self):
    params = self.next.parameter_types
    expected = 3 if self.has_client_state else 2
    where = (f'IterativeProcess next {self.next.name!r} (defined at '
             f'{self.next.location})')
    if len(params) != expected:
      hint = (' (with client state: server state, client data, client state)'
              if self.has_client_state else
              ' (server state, client data); pass client_state_initializer to '
              'keep state at clients')
      raise errors.FederatedError(
          f'{where} must take {expected} parameters'
          f'{hint}, it takes {len(params)}.')
    state_type, data_type = params[0], params[1]
    if state_type.placement != ft.SERVER or not ft.same_member(
        state_type.member, self.state_spec):
      raise errors.FederatedError(
          f'{where}: its first parameter is {state_type}, but initialize '
          f'returns {ft.describe(self.state_spec)}@SERVER.')
    if data_type.placement != ft.CLIENTS:
      raise errors.FederatedError(
          f'{where}: client data must be placed at '
          f'CLIENTS, got {data_type}.')
    if self.has_client_state:
      init = self.client_state_initializer
      if not isinstance(init, computations.TFComputation) or (
          init.parameter_specs):
        raise errors.FederatedError(
            f'IterativeProcess at {self.location}: client_state_initializer '
            'must be a tf_computation with no argument, got '
            f'{naming.describe_object(init)}.')
      if params[2].placement != ft.CLIENTS or not ft.same_member(
          params[2].member, init.result_spec):
        raise errors.FederatedError(
            f'{where}: its client state parameter is {params[2]}, but '
            'client_state_initializer returns '
            f'{ft.describe(init.result_spec)}.')
    result = self.next.trace().result
    for leaf in tf.nest.flatten(result):
      if isinstance(leaf, ir.Unplaced):
        raise errors.FederatedError(
            f'{where} returns {leaf.describe_for_error()}: what a round '
            'returns must be placed.')
    if not isinstance(result, (tuple, list)) or len(result) not in (
        expected, expected + 1):
      raise errors.FederatedError(
          f'{where} must return a tuple of {expected}: (server state, metrics'
          f'{", client state" if self.has_client_state else ""}), or of '
          f'{expected + 1} ending with per-client outputs (placed at '
          'CLIENTS).')
    if len(result) == expected + 1:
      _check_client_outputs(where, result[-1])
    new_state, metrics = result[0], result[1]
    for part, what in ((new_state, 'the new server state'),
                       (metrics, 'the metrics')):
      for leaf in tf.nest.flatten(part):
        if leaf.placement != ft.SERVER:
          raise errors.FederatedError(
              f'{where} returns {leaf!r} as part of {what}, but it is placed '
              f'at CLIENTS{_producer_hint(leaf)}; client values reach the '
              'server only through an aggregation (federated_sum, '
              'federated_mean, federated_aggregate, ...).')
    state_member = tf.nest.map_structure(lambda v: v.member, new_state)
    if not ft.same_member(_flat_member(state_member), _flat_member(
        self.state_spec)):
      raise errors.FederatedError(
          f'{where} returns a new server state of type '
          f'{ft.describe(state_member)}, but the state is '
          f'{ft.describe(self.state_spec)}.')
    if self.has_client_state:
      for leaf in tf.nest.flatten(result[2]):
        if leaf.placement != ft.CLIENTS:
          raise errors.FederatedError(
              f'{where} returns {leaf!r} as client state{_producer_hint(leaf)};'
              ' it must be placed at CLIENTS (federated_broadcast a server '
              'value to keep it at the clients).')
      state_member = tf.nest.map_structure(lambda v: v.member, result[2])
      if not ft.same_member(_flat_member(state_member),
                            _flat_member(params[2].member)):
        raise errors.FederatedError(
            f'{where} returns a new client state of type '
            f'{ft.describe(state_member)}, but the client state is '
            f'{ft.describe(params[2].member)}.')


def _check_client_outputs(where, outputs):
  leaves = tf.nest.flatten(outputs)
  if not leaves:
    raise errors.FederatedError(
        f'{where} returns an empty structure as per-client outputs; return '
        'only (server state, metrics) when there are none.')
  for leaf in leaves:
    if leaf.placement != ft.CLIENTS:
      raise errors.FederatedError(
          f'{where} returns {leaf!r} as per-client outputs (its last '
          f'result){_producer_hint(leaf)}; they must be placed at CLIENTS. '
          'Server-side results belong in the metrics.')
    if ft.has_dataset(leaf.member):
      raise errors.FederatedError(
          f'{where} returns {leaf!r} as per-client outputs'
          f'{_producer_hint(leaf)}; only tensors leave a client, not '
          'datasets.')


def initialize_and_next(initialize, next, where, location):  # pylint: disable=redefined-builtin
  """`(initialize as a tf_computation, its federated trace or None)`, once
  `initialize` and `next` are checked to be what a process takes (`where`
  names the process in errors)."""
  graph = None
  if isinstance(initialize, ServerInitialize):  # Another process's.
    graph = initialize.federated.trace()
  elif isinstance(initialize, computations.FederatedComputation):
    initialize, graph = initialize_at_server(initialize, location)
  elif not isinstance(initialize, computations.TFComputation) or (
      initialize.parameter_specs):
    raise errors.FederatedError(
        f'{where}: initialize must be a tf_computation with no argument, or '
        'a federated_computation with no parameter returning a SERVER value '
        f'(the server state), got {naming.describe_object(initialize)}.')
  if not isinstance(next, computations.FederatedComputation):
    raise errors.FederatedError(
        f'{where}: next must be a federated_computation, got '
        f'{naming.describe_object(next)}.')
  return initialize, graph


def initialize_at_server(computation, location):
  """A federated `initialize` as a tf_computation running its server ops,
  and its trace (IterativeProcess and MeasuredProcess take either kind). It
  runs once, at the server, before any client exists."""
  where = (f'IterativeProcess at {location}: initialize '
           f'{computation.describe_for_error()}')
  if computation.parameter_types:
    raise errors.FederatedError(
        f'{where} must take no parameter, it takes '
        f'{len(computation.parameter_types)}.')
  graph = computation.trace()
  for leaf in tf.nest.flatten(graph.result):
    if leaf.placement != ft.SERVER:
      raise errors.FederatedError(
          f'{where} returns {leaf!r}{_producer_hint(leaf)}: the server state '
          'must be placed at SERVER (federated_value(..., SERVER) or '
          'federated_eval(..., SERVER)).')
  needed = ir.upstream_ops(graph.result_values())
  ops = [op for op in graph.ops if id(op) in needed]
  for op in ops:
    if (op.output.placement != ft.SERVER or
        registry.of(op).role is not registry.Role.LOCAL):
      raise errors.FederatedError(
          f'{where}: {op.describe()} involves the clients, but initialize '
          'runs once at the server, before any client takes part. Make the '
          'state from SERVER values only (federated_value, federated_eval, '
          'federated_apply).')

  def initialize():
    env = evaluation.evaluate(ops, {})
    return tf.nest.map_structure(lambda v: env[id(v)], graph.result)

  return ServerInitialize(initialize, computation), graph


class ServerInitialize(computations.TFComputation):
  """A federated `initialize` as the tf_computation the form runs, which
  still reads as the federated one: typed `( -> S@SERVER)`, and inlined
  when another federated computation calls it (TFF composes processes by
  calling `inner.initialize()` in the outer one's initialize)."""

  def __init__(self, fn, federated):
    super().__init__(fn, (), name=federated.name, location=federated.location)
    self.federated = federated

  def __call__(self, *args):
    if ir._TRACE.stack and tf.executing_eagerly():  # pylint: disable=protected-access
      return self.federated(*args)
    return super().__call__(*args)

  @property
  def type_signature(self):
    return self.federated.type_signature


class StateOnlyNext(computations.FederatedComputation):
  """TFF's `next` that returns only the new state: to the compiler and the
  executors a round whose metrics are empty, `(state, ())`; to its callers
  (Python, or a federated computation inlining it) what the user wrote."""

  def __init__(self, inner):
    fn = inner._fn  # pylint: disable=protected-access
    super().__init__(fn, inner.parameter_types, name=inner.name,
                     location=inner.location)
    self.inner = inner

  def trace(self):
    if self._graph is None:
      graph = self.inner.trace()
      self._graph = dataclasses.replace(graph, result=(graph.result, ()))
    return self._graph

  @property
  def result_types(self):
    return self.inner.result_types

  def __call__(self, *args):
    if ir._TRACE.stack:  # pylint: disable=protected-access
      return self.inner(*args)
    return super().__call__(*args)[0]


def check_next_is_multi_arg(next_is_multi_arg, where):
  """TFF's `next_is_multi_arg`: None or True; a `next` of the state alone
  has no client data, which no canonical form can take."""
  if next_is_multi_arg is None or next_is_multi_arg is True:
    return
  if next_is_multi_arg is False:
    raise errors.FederatedError(
        f'{where}: next_is_multi_arg=False declares a next of the state '
        'alone; a round here takes (server state, client data).')
  raise errors.InvalidTypeError(
      f'{where}: next_is_multi_arg must be None or a bool, got '
      f'{naming.describe_object(next_is_multi_arg)}.')


def _returns_only_state(next_fn, state_spec):
  """Whether `next_fn` returns the new state alone (TFF's test: its whole
  result has the state's type), rather than (state, metrics, ...)."""
  if isinstance(next_fn, StateOnlyNext):
    return False  # Already seen as such, by another process.
  result = next_fn.trace().result
  leaves = tf.nest.flatten(result)
  if not leaves or not all(isinstance(v, ir.Value) and
                           v.placement == ft.SERVER for v in leaves):
    return False
  members = tf.nest.map_structure(lambda v: v.member, result)
  return ft.same_member(members, state_spec)


def _producer_hint(value):
  if isinstance(value, ir.Unplaced):
    return f' (an unplaced value made at {value.location})'
  op = value.producer
  if op is not None:
    return f' (made by {op.describe()})'
  return f' (it is the parameter {value.name!r})' if value.name else ''


def _flat_member(member):
  return tf.nest.flatten(member)
