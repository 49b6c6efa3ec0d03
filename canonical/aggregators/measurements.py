"""TensorFlow Federated's `add_measurements`: a factory whose measurements
gain named values computed from the clients' values or from the result.

`client_measurement_fn(value)` (`(value, weight)` for a weighted factory)
and `server_measurement_fn(result)` are traced inside the process's `next`:
they take federated values and return a mapping of names to SERVER values
(or one SERVER value of a mapping). Their entries are added after the inner
measurements' (a name already there is replaced, as `dict.update` does);
an inner process without measurements gets the new ones alone.
"""

import collections
import inspect

from canonical.aggregators import factory
from canonical.aggregators import sum_factory
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import ir
from canonical.core import naming
from canonical.core import types as ft
from canonical import errors
from canonical.templates import aggregation_process
from canonical.templates import measured


def _arity(fn, where, what):
  if not callable(fn):
    raise errors.InvalidTypeError(
        f'{where}: {what} must be a function, got '
        f'{naming.describe_object(fn)}.')
  try:
    return len(inspect.signature(fn).parameters)
  except (TypeError, ValueError):
    return None  # No signature to check; tracing will tell.


def _check_arity(fn, count, where, what):
  arity = _arity(fn, where, what)
  if arity is not None and arity != count:
    raise errors.InvalidValueError(
        f'{where}: {what} must take {count} parameter(s) '
        f'({"value, weight" if count == 2 else "one value"}), '
        f'{naming.describe_object(fn)} takes {arity}.')


def _entries(measurements, where, what):
  """The named SERVER values of `measurements`: a mapping of values, or one
  SERVER value whose member is a mapping; `()` has none."""
  if isinstance(measurements, ir.Value):
    member = measurements.member
    if member == ():
      return collections.OrderedDict()
    if not isinstance(member, collections.abc.Mapping):
      raise errors.FederatedError(
          f'{where}: {what} must be a mapping of names to values, got '
          f'{measurements.type_signature}.')
    values = collections.OrderedDict(
        (name, measurements[name]) for name in member)
  elif isinstance(measurements, collections.abc.Mapping):
    values = collections.OrderedDict(measurements)
  else:
    raise errors.FederatedError(
        f'{where}: {what} must return a mapping of names to values placed '
        f'at SERVER, got {naming.describe_object(measurements)}.')
  for name, value in values.items():
    if not isinstance(value, ir.Value) or value.placement != ft.SERVER:
      raise errors.FederatedError(
          f'{where}: {what}\'s entry {name!r} must be a value placed at '
          f'SERVER, got {naming.describe_object(value)}.')
  return values


class _WithMeasurements:
  """What both kinds of wrapped factory add around the inner process."""

  def __init__(self, inner, client_measurement_fn, server_measurement_fn):
    self._inner = inner
    self._client_fn = client_measurement_fn
    self._server_fn = server_measurement_fn

  def _next_impl(self, process, state, value, *weight):
    where = f'add_measurements({type(self._inner).__name__})'
    output = process.next(state, value, *weight)
    entries = _entries(output.measurements, where, 'the inner measurements')
    if self._client_fn is not None:
      entries.update(_entries(self._client_fn(value, *weight), where,
                              'client_measurement_fn'))
    if self._server_fn is not None:
      entries.update(_entries(self._server_fn(output.result), where,
                              'server_measurement_fn'))
    return measured.MeasuredProcessOutput(
        output.state, output.result,
        intrinsics.federated_zip(entries) if entries else
        sum_factory.empty_at_server())


class _Unweighted(_WithMeasurements, factory.UnweightedAggregationFactory):

  def create(self, value_type):
    process = self._inner.create(value_type)
    state_type, placed_value_type = process.next.parameter_types

    @computations.federated_computation(state_type, placed_value_type)
    def next_fn(state, value):
      return self._next_impl(process, state, value)

    return aggregation_process.AggregationProcess(process.initialize,
                                                  next_fn)


class _Weighted(_WithMeasurements, factory.WeightedAggregationFactory):

  def create(self, value_type, weight_type):
    process = self._inner.create(value_type, weight_type)
    state_type, placed_value_type, placed_weight_type = (
        process.next.parameter_types)

    @computations.federated_computation(state_type, placed_value_type,
                                        placed_weight_type)
    def next_fn(state, value, weight):
      return self._next_impl(process, state, value, weight)

    return aggregation_process.AggregationProcess(process.initialize,
                                                  next_fn)


def add_measurements(inner_agg_factory, *, client_measurement_fn=None,
                     server_measurement_fn=None):
  """`inner_agg_factory` (of either kind; the result is of its kind) with
  the measurements of `client_measurement_fn` and/or
  `server_measurement_fn` added."""
  where = 'add_measurements'
  factory.check_factory(
      inner_agg_factory, (factory.UnweightedAggregationFactory,
                          factory.WeightedAggregationFactory),
      where, 'inner_agg_factory')
  if client_measurement_fn is None and server_measurement_fn is None:
    raise errors.InvalidValueError(
        f'{where}: give client_measurement_fn, server_measurement_fn or '
        'both.')
  weighted = isinstance(inner_agg_factory, factory.WeightedAggregationFactory)
  if client_measurement_fn is not None:
    _check_arity(client_measurement_fn, 2 if weighted else 1, where,
                 'client_measurement_fn')
  if server_measurement_fn is not None:
    _check_arity(server_measurement_fn, 1, where, 'server_measurement_fn')
  kind = _Weighted if weighted else _Unweighted
  return kind(inner_agg_factory, client_measurement_fn,
              server_measurement_fn)
