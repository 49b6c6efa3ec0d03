"""TensorFlow Federated's `chain_measured_processes` and
`concatenate_measured_processes`: measured processes composed into one.

Both take an `OrderedDict` of name -> `MeasuredProcess` (each with its
state at SERVER) and make a `MeasuredProcess` whose state and measurements
are `OrderedDict`s of the parts' by name, at SERVER:

| composition | next(state, x)                            | result          |
| chain       | each part's `next` on the previous part's | the last part's |
|             | result (the first on x)                   |                 |
| concatenate | part `name` on `x[name]`                  | OrderedDict of  |
|             |                                           | the parts'      |

A concatenation's `next` takes its values as one value of an `OrderedDict`
(TFF's takes a structure of values): all the parts' values must be at one
placement. Called while tracing, it also takes TFF's form, an `OrderedDict`
of values, and zips it; from Python, a CLIENTS argument in TFF's form (one
list of client values per name) is regrouped client by client.
"""

import collections

import tensorflow as tf

from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import ir
from canonical.core import naming
from canonical.core import types as ft
from canonical import errors
from canonical.templates import measured


def _check_processes(measured_processes, where):
  if not isinstance(measured_processes, collections.abc.Mapping) or (
      not measured_processes):
    raise errors.InvalidTypeError(
        f'{where}: measured_processes must be a non-empty OrderedDict of '
        f'name -> MeasuredProcess, got '
        f'{naming.describe_object(measured_processes)}.')
  processes = collections.OrderedDict(measured_processes)
  for name, process in processes.items():
    if not isinstance(process, measured.MeasuredProcess):
      raise errors.InvalidTypeError(
          f'{where}: {name!r} must be a MeasuredProcess, got '
          f'{naming.describe_object(process)}.')
    state_type = process.state_type
    if not (isinstance(state_type, ft.FederatedType) and
            state_type.placement == ft.SERVER):
      raise errors.FederatedError(
          f'{where}: the states are zipped at SERVER, but the state of '
          f'{name!r} is {state_type}.')
    if len(process.next.parameter_types) != 2:
      raise errors.FederatedError(
          f'{where}: the next of {name!r} must take (state, value), it takes '
          f'{", ".join(str(t) for t in process.next.parameter_types)}.')
  return processes


def _initialize(processes):

  @computations.federated_computation()
  def initialize():
    return intrinsics.federated_zip(collections.OrderedDict(
        (name, process.initialize()) for name, process in processes.items()))

  return initialize


def _state_type(processes):
  return ft.server(collections.OrderedDict(
      (name, process.state_type.member)
      for name, process in processes.items()))


def chain_measured_processes(measured_processes):
  """One `MeasuredProcess` running the parts in order, each on the previous
  part's result; its result is the last part's."""
  where = f'chain_measured_processes at {naming.user_location()}'
  processes = _check_processes(measured_processes, where)
  first = next(iter(processes.values()))
  value_type = first.next.parameter_types[1]

  @computations.federated_computation(_state_type(processes), value_type)
  def next_fn(state, values):
    new_states = collections.OrderedDict()
    measurements = collections.OrderedDict()
    for name, process in processes.items():
      expected = process.next.parameter_types[1]
      actual = tf.nest.map_structure(lambda v: v.type_signature, values)
      if not measured.fits(expected, actual):
        raise errors.FederatedError(
            f'{where}: the next of {name!r} takes {expected}, but the value '
            f'before it is {measured.describe_type(actual)}.')
      if not isinstance(values, ir.Value):  # A concatenation's results.
        values = intrinsics.federated_zip(values)
      output = process.next(state[name], values)
      new_states[name] = output.state
      measurements[name] = output.measurements
      values = output.result
    return measured.MeasuredProcessOutput(
        intrinsics.federated_zip(new_states), values,
        intrinsics.federated_zip(measurements))

  return measured.MeasuredProcess(_initialize(processes), next_fn)


class _TakesStructuredValues(computations.FederatedComputation):
  """A concatenation's `next`: its values also as TFF gives them, a
  structure of values (zipped here) or, from Python at CLIENTS, one list
  of client values per name (regrouped per client)."""

  def __call__(self, *args):
    if len(args) == 2:
      state, values = args
      leaves = tf.nest.flatten(values)
      if not isinstance(values, ir.Value) and leaves and all(
          isinstance(v, ir.Value) for v in leaves):
        values = intrinsics.federated_zip(values)
      elif (self.parameter_types[1].placement == ft.CLIENTS and
            isinstance(values, collections.abc.Mapping)):
        values = _per_client(values, self.describe_for_error())
      args = (state, values)
    return super().__call__(*args)


def _per_client(values, where):
  """`{name: [client values]}` as `[{name: client value}]`."""
  counts = {len(v) for v in values.values() if isinstance(v, (list, tuple))}
  if len(counts) != 1 or not all(isinstance(v, (list, tuple))
                                 for v in values.values()):
    raise errors.FederatedError(
        f'{where}: the CLIENTS values must be one list per name, of one '
        f'length (one entry per client), got '
        f'{naming.describe_object(values)}.')
  return [collections.OrderedDict((name, clients[i])
                                  for name, clients in values.items())
          for i in range(counts.pop())]


def concatenate_measured_processes(measured_processes):
  """One `MeasuredProcess` running the parts side by side, part `name` on
  the value's `name` entry; its result is the `OrderedDict` of theirs."""
  where = f'concatenate_measured_processes at {naming.user_location()}'
  processes = _check_processes(measured_processes, where)
  value_types = collections.OrderedDict(
      (name, process.next.parameter_types[1])
      for name, process in processes.items())
  placements = {t.placement for t in value_types.values()}
  if len(placements) != 1:
    raise errors.FederatedError(
        f'{where}: the parts take values at different placements ('
        + ', '.join(f'{name}: {t}' for name, t in value_types.items())
        + '); here a concatenation takes them as one value, zipped at one '
        'placement.')
  values_type = ft.FederatedType(
      collections.OrderedDict((name, t.member)
                              for name, t in value_types.items()),
      placements.pop())

  def concatenation_next(state, values):
    new_states = collections.OrderedDict()
    results = collections.OrderedDict()
    measurements = collections.OrderedDict()
    for name, process in processes.items():
      output = process.next(state[name], values[name])
      new_states[name] = output.state
      results[name] = output.result
      measurements[name] = output.measurements
    return measured.MeasuredProcessOutput(
        intrinsics.federated_zip(new_states), results,
        intrinsics.federated_zip(measurements))

  next_fn = _TakesStructuredValues(
      concatenation_next, (_state_type(processes), values_type),
      location=naming.user_location())
  return measured.MeasuredProcess(_initialize(processes), next_fn)
