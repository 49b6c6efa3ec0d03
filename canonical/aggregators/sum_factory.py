"""TensorFlow Federated's `SumFactory`: `federated_sum`, with no state and no
measurements; the inner factory every other one defaults to."""

from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import types as ft
from canonical.aggregators import factory
from canonical.templates import aggregation_process
from canonical.templates import measured


def empty_at_server():
  """`<>@SERVER`: the state or measurements of a process that has none."""
  return intrinsics.federated_value((), ft.SERVER)


class SumFactory(factory.UnweightedAggregationFactory):
  """Sums the clients' values at the server."""

  def create(self, value_type):
    value_type = factory.value_type_of(value_type, 'SumFactory.create')

    @computations.federated_computation()
    def init_fn():
      return empty_at_server()

    @computations.federated_computation(init_fn.type_signature.result,
                                        ft.clients(value_type))
    def next_fn(state, value):
      return measured.MeasuredProcessOutput(
          state, intrinsics.federated_sum(value), empty_at_server())

    return aggregation_process.AggregationProcess(init_fn, next_fn)
