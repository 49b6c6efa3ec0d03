"""TensorFlow Federated's `MeasuredProcess`: a process whose `next` returns
`MeasuredProcessOutput(state, result, measurements)`.

Such processes are building blocks: an outer federated computation calls
their `initialize` and `next` while it is traced, which inlines them, so a
round composed of them compiles to one canonical form. Called from Python
they run by the reference executor, as any federated computation does.
They are not `IterativeProcess`es here (in TFF they are): a form's round
returns (state, metrics), so compile the round that uses them.

`MeasuredProcess(initialize, next, value_spec, ...)`, the name's signature
before TFF's (a value spec where TFF has `next_is_multi_arg`), still makes
`measured_process.MeasuredProcess`, the building block federated averaging
takes.
"""

from typing import NamedTuple

import tensorflow as tf

from canonical.core import computations
from canonical.core import naming
from canonical.core import types as ft
from canonical import errors
from canonical.templates import iterative_process
from canonical.templates import measured_process


class MeasuredProcessOutput(NamedTuple):
  """What a measured process's `next` returns: the new `state` (only for the
  process itself), the `result` passed on to what follows, and
  `measurements` to report (not passed on)."""
  state: object
  result: object
  measurements: object


class MeasuredProcessOutputWithClientState(NamedTuple):
  """What the `next` of a process keeping state at each client returns (our
  extension of TFF's API, e.g. error feedback's residuals): TFF's three
  fields, then each client's new `client_state` (placed at CLIENTS)."""
  state: object
  result: object
  measurements: object
  client_state: object


OUTPUTS = (MeasuredProcessOutput, MeasuredProcessOutputWithClientState)


def output(state, result, measurements, client_state=None):
  """The output of a `next`, with the clients' new state when there is one."""
  if client_state is None:
    return MeasuredProcessOutput(state, result, measurements)
  return MeasuredProcessOutputWithClientState(state, result, measurements,
                                              client_state)


def client_state_of(output):
  """The clients' new state in a `next`'s output (None if it keeps none)."""
  return getattr(output, 'client_state', None)


def parameter_types(computation, where):
  """The types of `computation`'s parameters, one per Python parameter."""
  if isinstance(computation, computations.FederatedComputation):
    return tuple(computation.parameter_types)
  if isinstance(computation, computations.TFComputation):
    return tuple(computation.parameter_specs)
  raise errors.FederatedError(
      f'{where}: expected a federated_computation or a typed '
      f'tf_computation, got {naming.describe_object(computation)}.')


def result_type(computation):
  """The type of `computation`'s result: a structure of placed types (a
  federated computation may return a structure of values), or a member."""
  if isinstance(computation, computations.FederatedComputation):
    return computation.result_types
  return computation.result_spec


def is_placed_at(t, placement):
  """Whether every part of `t` (a placed type or a structure of them) is at
  `placement`; an empty structure is at no place."""
  leaves = tf.nest.flatten(t)
  return bool(leaves) and all(
      isinstance(leaf, ft.FederatedType) and leaf.placement == placement
      for leaf in leaves)


def fits(expected, actual):
  """Whether a value of type `actual` can be passed where `expected` is taken
  (TFF's assignability, up to how structures are held: a structure of
  SERVER values fits a SERVER structure)."""
  if isinstance(expected, ft.FederatedType):
    if not is_placed_at(actual, expected.placement):
      return False
    actual = tf.nest.map_structure(lambda t: t.member, actual)
    return ft.same_member(actual, expected.member)
  if tf.nest.flatten(actual) and any(
      isinstance(t, ft.FederatedType) for t in tf.nest.flatten(actual)):
    return False
  return ft.same_member(actual, expected)


def _is_spec(value):
  leaves = tf.nest.flatten(value)
  return bool(leaves) and all(isinstance(leaf, tf.TensorSpec)
                              for leaf in leaves)


def describe_type(t):
  return naming.describe(t)


def check_initialize(initialize_fn, where):
  """`initialize_fn` is a computation with no parameter."""
  if isinstance(initialize_fn, computations.PolymorphicComputation) or (
      parameter_types(initialize_fn, f'{where}: initialize_fn')):
    raise errors.FederatedError(
        f'{where}: initialize_fn must take no parameter, got '
        f'{naming.describe_object(initialize_fn)}.')


def state_type_of(initialize_fn, next_fn, next_is_multi_arg, where):
  """The state type: `next_fn`'s first (or only) parameter, which must take
  what `initialize_fn` returns."""
  params = parameter_types(next_fn, f'{where}: next_fn')
  if not params:
    raise errors.FederatedError(
        f'{where}: next_fn must take the state as its first parameter; '
        f'{naming.describe_object(next_fn)} takes none.')
  if next_is_multi_arg is False and len(params) != 1:
    raise errors.FederatedError(
        f'{where}: next_is_multi_arg=False, but next_fn takes {len(params)} '
        'parameters.')
  if next_is_multi_arg is True and len(params) < 2:
    raise errors.FederatedError(
        f'{where}: next_is_multi_arg=True, but next_fn takes only the '
        'state.')
  initial = result_type(initialize_fn)
  if not fits(params[0], initial):
    raise errors.FederatedError(
        f'{where}: initialize_fn returns {describe_type(initial)}, which '
        f'next_fn\'s first parameter (the state, {describe_type(params[0])}) '
        'does not take.')
  return params[0]


class MeasuredProcess:
  """TFF's `MeasuredProcess(initialize_fn, next_fn, next_is_multi_arg=None)`.

  `initialize_fn` takes nothing and makes the state; `next_fn` takes the
  state first and returns a `MeasuredProcessOutput` whose `state` has the
  state's type. `initialize` and `next` are those computations, as given.
  """

  def __new__(cls, initialize_fn, next_fn, next_is_multi_arg=None, *args,
              **kwargs):
    if cls is MeasuredProcess and (args or kwargs or _is_spec(
        next_is_multi_arg)):
      # This name's signature before TFF's: (initialize, next, value_spec,
      # encoders=(), client_state_initializer=None, name=...), the building
      # block federated averaging takes.
      return measured_process.MeasuredProcess(
          initialize_fn, next_fn, next_is_multi_arg, *args, **kwargs)
    return super().__new__(cls)

  def __init__(self, initialize_fn, next_fn, next_is_multi_arg=None):
    self.location = naming.user_location()
    where = f'{type(self).__name__} at {self.location}'
    if next_is_multi_arg not in (None, True, False):
      raise errors.InvalidTypeError(
          f'{where}: next_is_multi_arg must be None or a bool, got '
          f'{naming.describe_object(next_is_multi_arg)}.')
    if isinstance(initialize_fn, iterative_process.ServerInitialize):
      initialize_fn = initialize_fn.federated  # Composes as federated.
    check_initialize(initialize_fn, where)
    self._state_type = state_type_of(initialize_fn, next_fn,
                                     next_is_multi_arg, where)
    result = result_type(next_fn)
    if not isinstance(result, OUTPUTS):
      raise errors.FederatedError(
          f'{where}: next_fn must return a MeasuredProcessOutput(state, '
          f'result, measurements), it returns {describe_type(result)}.')
    if not fits(self._state_type, result.state):
      raise errors.FederatedError(
          f'{where}: next_fn returns a state of type '
          f'{describe_type(result.state)}, but the state is '
          f'{describe_type(self._state_type)}.')
    self._initialize_fn = initialize_fn
    self._next_fn = next_fn

  @property
  def initialize(self):
    """The no-argument computation making the initial state."""
    return self._initialize_fn

  @property
  def next(self):
    """The computation of one step: (state, ...) -> MeasuredProcessOutput."""
    return self._next_fn

  @property
  def state_type(self):
    return self._state_type

  def __repr__(self):
    return (f'<{type(self).__name__} '
            f'{getattr(self._next_fn, "name", "next")}>')
