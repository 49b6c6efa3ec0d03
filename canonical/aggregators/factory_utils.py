"""TensorFlow Federated's `as_weighted_aggregator`: an unweighted factory
where a weighted one is asked for (FedAvg, FedSGD), ignoring the weights.

So `build_fed_sgd(model_aggregator=as_weighted_aggregator(dp_factory))`
runs DP-FedSGD: every client counts the same, as the unweighted factory
means, while the learning process still hands it each client's weight.
"""

from canonical.aggregators import factory
from canonical.core import types as ft
from canonical.templates import aggregation_process


class _UnweightedAsWeighted(factory.WeightedAggregationFactory):
  """A weighted factory whose processes drop the weight and run the
  unweighted factory's process: its state, result and measurements."""

  def __init__(self, unweighted_aggregator):
    self._factory = factory.check_factory(
        unweighted_aggregator, (factory.UnweightedAggregationFactory,),
        'as_weighted_aggregator', 'unweighted_aggregator')

  def create(self, value_type, weight_type):
    where = 'as_weighted_aggregator(...).create'
    if weight_type != ():  # TFF's k-means gives no weight at all.
      weight_type = factory.value_type_of(weight_type, where, 'weight_type')
    process = self._factory.create(value_type)
    state_type, placed_value_type = process.next.parameter_types[:2]

    def step(state, value, weight, client_state=None):
      del weight  # Every client counts the same.
      return aggregation_process.call_next(process, state, value,
                                           client_state=client_state)

    next_fn = aggregation_process.next_computation(
        step, [('state', state_type), ('value', placed_value_type),
               ('weight', ft.clients(weight_type))],
        process.client_state_type)
    return aggregation_process.AggregationProcess(
        process.initialize, next_fn,
        client_state_initializer=process.client_state_initializer)


def as_weighted_aggregator(unweighted_aggregator):
  """A `WeightedAggregationFactory` doing what `unweighted_aggregator` (an
  `UnweightedAggregationFactory`) does, the weights ignored."""
  return _UnweightedAsWeighted(unweighted_aggregator)
