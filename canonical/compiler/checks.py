"""The compiler's check pass: every piece pure, and a round that broadcasts
once and then aggregates once."""

from canonical.compiler import graph_walk
from canonical.core import ir
from canonical import errors


def check(process, graph):
  """Raises `errors.FederatedError` for impure pieces and impossible rounds."""
  check_purity(process, graph)
  check_round(graph, process.has_client_state)


def computations_of(graph):
  """Every tf_computation the graph's ops apply, with the op using it."""
  for op in graph.ops:
    for value in op.attrs.values():
      if hasattr(value, 'check_pure'):
        yield op, value


def check_purity(process, graph):
  """Every tf_computation a piece runs must be pure; names the op and lines."""
  if process.initialize_graph is not None:
    for op, computation in computations_of(process.initialize_graph):
      computation.check_pure(used_by=f'{op.describe()} in initialize')
  process.initialize.check_pure(used_by='IterativeProcess initialize')
  if process.has_client_state:
    process.client_state_initializer.check_pure(
        used_by='IterativeProcess client_state_initializer')
  for op, computation in computations_of(graph):
    computation.check_pure(used_by=op.describe())


def check_round(graph, has_client_state):
  """A round broadcasts once, then aggregates once: no aggregated value may
  reach a broadcast or another aggregation of the same round."""
  live = graph_walk.live_ops(graph, has_client_state)
  aggregation_ids = {id(op): op for op in live if graph_walk.is_aggregation(op)}
  order = {id(op): i for i, op in enumerate(graph.ops)}

  def earliest_aggregation(op):
    upstream = ir.upstream_ops(op.inputs)
    found = [aggregation_ids[i] for i in upstream if i in aggregation_ids]
    return min(found, key=lambda o: order[id(o)]) if found else None

  def broadcast_between(op, source):
    upstream = ir.upstream_ops(op.inputs)
    for candidate in live:
      if (graph_walk.is_broadcast(candidate) and id(candidate) in upstream and
          id(source) in ir.upstream_ops(candidate.inputs)):
        return candidate
    return None

  advice = ('since a round of the canonical form broadcasts once and then '
            'aggregates once. Move it into the next round (carry the value in '
            'the server state).')
  # Aggregations first: the message then names both ends and the broadcast.
  for op in live:
    if graph_walk.is_aggregation(op):
      source = earliest_aggregation(op)
      if source is not None:
        via = broadcast_between(op, source)
        via_text = f' through {via.describe()}' if via else ''
        raise errors.FederatedError(
            f'{op.describe()} depends on {source.describe()} of the same '
            f'round{via_text}: an aggregation cannot use another '
            f'aggregation\'s result, {advice}')
  for op in live:
    if graph_walk.is_broadcast(op):
      source = earliest_aggregation(op)
      if source is not None:
        raise errors.FederatedError(
            f'{op.describe()} depends on {source.describe()} of the same '
            f'round: a broadcast cannot send an aggregated value, {advice}')
