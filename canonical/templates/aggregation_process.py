"""TensorFlow Federated's `AggregationProcess`: a measured process moving
values from the clients to the server.

`next(state@SERVER, value@CLIENTS[, weight@CLIENTS])` returns
`MeasuredProcessOutput(state@SERVER, result@SERVER, measurements@SERVER)`.
An aggregation factory's `create` returns one; an outer process (a learning
algorithm's round, or an outer factory) calls its `initialize` and `next`
while it is traced, which inlines them.
"""

import tensorflow as tf

from canonical.core import computations
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

  def __init__(self, initialize_fn, next_fn):
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
    output = measured.result_type(next_fn)
    for field in ('result', 'measurements'):
      part = getattr(output, field)
      if not measured.is_placed_at(part, ft.SERVER):
        raise errors.FederatedError(
            f'{where}: the {field} of next_fn\'s MeasuredProcessOutput must '
            f'be placed at SERVER (federated_value((), SERVER) for none), '
            f'it is {measured.describe_type(part)}.')

  @property
  def is_weighted(self):
    """Whether `next` takes a weight after the value."""
    return len(self.next.parameter_types) == 3

  @property
  def value_type(self):
    """The unplaced type of the values aggregated."""
    return self.next.parameter_types[1].member

  @property
  def result_type(self):
    """The unplaced type of the aggregate."""
    result = measured.result_type(self.next).result
    return tf.nest.map_structure(lambda t: t.member, result)
