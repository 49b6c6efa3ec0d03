"""The type checks the learning templates share: where each part of a
building block's `initialize` and `next` must be placed, and its optional
hyperparameter computations. Each names the user's line that made the
block (not a line of these modules)."""

import collections
import os
import sys
from typing import NamedTuple

import tensorflow as tf

from canonical import errors
from canonical.core import computations
from canonical.core import naming
from canonical.core import specs
from canonical.core import types as ft
from canonical.templates import iterative_process
from canonical.templates import measured

_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def located(what):
  """`what` and the user's line that asked for it: the innermost frame
  outside the language and outside these templates."""
  frame = sys._getframe(1)  # pylint: disable=protected-access
  while frame is not None:
    filename = frame.f_code.co_filename
    if not naming.is_library_file(filename) and not os.path.abspath(
        filename).startswith(_HERE):
      return f'{what} at {naming.Location(filename, frame.f_lineno)}'
    frame = frame.f_back
  return what


class Block(NamedTuple):
  """A building block's computations and types, once checked."""
  initialize: computations.FederatedComputation
  next: computations.FederatedComputation
  state: object  # the state's member type
  parameters: tuple  # next's parameter types
  output: measured.MeasuredProcessOutput  # next's result types


def block(initialize_fn, next_fn, parameter_names, where):
  """What every learning block is: federated `initialize_fn` returning the
  state at SERVER, and `next_fn` taking the state then one parameter per
  name in `parameter_names`, returning a `MeasuredProcessOutput` whose new
  state has the state's type and whose measurements are at SERVER."""
  initialize_fn = federated(initialize_fn, where, 'initialize_fn')
  next_fn = federated(next_fn, where, 'next_fn')
  if initialize_fn.parameter_types:
    raise errors.FederatedError(
        f'{where}: initialize_fn must take no parameter, it takes '
        f'{len(initialize_fn.parameter_types)}.')
  state = state_at_server(initialize_fn, where)
  params = parameters(next_fn, 1 + len(parameter_names), where,
                      ', '.join(('the state',) + tuple(parameter_names)))
  if not measured.fits(params[0], ft.server(state)):
    raise errors.FederatedError(
        f'{where}: initialize_fn returns {ft.server(state)}, but next_fn '
        f'takes the state as {params[0]}.')
  output = measured.result_type(next_fn)
  if not isinstance(output, measured.MeasuredProcessOutput):
    raise errors.FederatedError(
        f'{where}: next_fn must return a tff.templates.MeasuredProcessOutput'
        f'(state, result, measurements), it returns '
        f'{measured.describe_type(output)}.')
  if not measured.fits(params[0], output.state):
    raise errors.FederatedError(
        f'{where}: next_fn returns a new state of type '
        f'{measured.describe_type(output.state)}, but the state is '
        f'{params[0]}.')
  placed(output.measurements, ft.SERVER, where,
         'the measurements of next_fn\'s MeasuredProcessOutput')
  return Block(initialize_fn, next_fn, state, params, output)


def federated(computation, where, what):
  """`computation` as the federated computation it must be (a process's
  federated initialize, which our processes hold as a tf_computation, is
  taken back as the federated one)."""
  if isinstance(computation, iterative_process.ServerInitialize):
    computation = computation.federated
  if not isinstance(computation, computations.FederatedComputation):
    raise errors.FederatedError(
        f'{where}: {what} must be a federated_computation, got '
        f'{naming.describe_object(computation)}.')
  return computation


def state_at_server(initialize_fn, where):
  """`initialize_fn` returns its state placed at SERVER."""
  initial = measured.result_type(initialize_fn)
  if not isinstance(initial, ft.FederatedType) or (
      initial.placement != ft.SERVER):
    raise errors.FederatedError(
        f'{where}: initialize_fn must return the state placed at SERVER '
        '(one value: federated_zip a structure, federated_value((), SERVER) '
        f'for none), it returns {measured.describe_type(initial)}.')
  return initial.member


def parameters(next_fn, count, where, what):
  """`next_fn`'s parameter types; there must be `count` of them (`what`
  names them)."""
  params = next_fn.parameter_types
  if len(params) != count:
    raise errors.FederatedError(
        f'{where}: next_fn must take {count} parameters ({what}), it takes '
        f'{len(params)}.')
  return params


def placed(t, placement, where, what):
  """The parameter or result type `t` is placed at `placement`."""
  if not measured.is_placed_at(t, placement):
    hint = (' (federated_value((), SERVER) for none)'
            if placement == ft.SERVER else '')
    raise errors.FederatedError(
        f'{where}: {what} must be placed at {placement}{hint}, it is '
        f'{measured.describe_type(t)}.')


def member(t):
  """The unplaced type of a placed type or of a structure of them."""
  return tf.nest.map_structure(lambda leaf: leaf.member, t)


class WithHparams:
  """A block's `get_hparams` / `set_hparams` computations, as TFF's client
  work and finalizer processes have them (set by `hparams_functions`)."""

  _get_hparams = None
  _set_hparams = None

  @property
  def get_hparams(self):
    return self._get_hparams

  @property
  def set_hparams(self):
    return self._set_hparams


def hparams_functions(get_hparams_fn, set_hparams_fn, state_member, where):
  """`(get_hparams, set_hparams)`: the given tf_computations, checked
  against the state, or TFF's defaults (no hyperparameters)."""
  if get_hparams_fn is None:
    get_hparams_fn = basic_hparams_getter(state_member)
  state_function(get_hparams_fn, state_member, where, 'get_hparams_fn', 1)
  if set_hparams_fn is None:
    set_hparams_fn = basic_hparams_setter(state_member,
                                          get_hparams_fn.result_spec)
  state_function(set_hparams_fn, state_member, where, 'set_hparams_fn', 2,
                 returns_state=True)
  return get_hparams_fn, set_hparams_fn


def state_function(computation, state_spec, where, what, arity,
                   returns_state=False):
  """`computation` is a typed tf_computation of `arity` parameters whose
  first is the state (and, if `returns_state`, returning the state)."""
  parameters = getattr(computation, 'parameter_specs', ())
  if not isinstance(computation, computations.TFComputation) or len(
      parameters) != arity:
    raise errors.FederatedError(
        f'{where}: {what} must be a tf_computation of {arity} typed '
        f'parameter{"s" if arity > 1 else ""}, the first the state '
        f'({measured.describe_type(state_spec)}); got '
        f'{naming.describe_object(computation)}.')
  if not measured.fits(parameters[0], state_spec):
    raise errors.FederatedError(
        f'{where}: {what} takes {measured.describe_type(parameters[0])} '
        f'first, but the state is {measured.describe_type(state_spec)}.')
  if returns_state and not measured.fits(state_spec,
                                         computation.result_spec):
    raise errors.FederatedError(
        f'{where}: {what} returns '
        f'{measured.describe_type(computation.result_spec)}, but the state '
        f'is {measured.describe_type(state_spec)}.')


def basic_hparams_getter(state_spec):
  """TFF's default `get_hparams`: no hyperparameters, whatever the state."""
  return specs.tf_computation(lambda state: collections.OrderedDict(),
                              state_spec)


def basic_hparams_setter(state_spec, hparams_spec):
  """TFF's default `set_hparams`: the state as it was."""
  return specs.tf_computation(lambda state, hparams: state, state_spec,
                              hparams_spec)
