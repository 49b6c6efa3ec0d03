"""The compiler's partition pass: which ops run in prepare, work, the
aggregations and update."""

import dataclasses

from canonical.compiler import graph_walk
from canonical.core import ir
from canonical.core import types as ft
from canonical import errors


@dataclasses.dataclass
class Plan:
  """Which ops run where. C, U, A and R are tuples with one entry per slot."""
  graph: object
  broadcasts: list      # live broadcast ops, in trace order
  broadcast_values: list  # distinct SERVER values broadcast: C's entries
  aggregations: list    # live plain aggregation ops: A's, U's and R's entries
  secure: list          # live secure sums: the secure part of U and R
  parameter_ops: list   # server ops computing secure sums' parameters
  prepare_ops: list     # server ops before the broadcast
  work_ops: list        # client ops
  update_ops: list      # server ops after the aggregation (may redo prepare's)
  client_state_result: object  # structure of Values, or None
  client_outputs_result: object = None  # structure of Values, or None

  def broadcast_slot(self, op):
    """The index in C of what broadcast `op` sends."""
    for slot, value in enumerate(self.broadcast_values):
      if _same_value(op.inputs[0], value):
        return slot
    raise errors.InvalidValueError(f'{op.describe()} is not in this plan.')

  @property
  def recomputed_ops(self):
    """Server ops both prepare and update run (update recomputes them)."""
    prepare = {id(op) for op in self.prepare_ops}
    return [op for op in self.update_ops if id(op) in prepare]


def _same_value(a, b):
  """Whether two values are surely equal: the same, or the same part of one."""
  if a is b:
    return True
  pa, pb = a.producer, b.producer
  return (pa is not None and pb is not None and pa.kind == pb.kind == ir.SELECT
          and pa.attrs['key'] == pb.attrs['key'] and
          _same_value(pa.inputs[0], pb.inputs[0]))


def partition(graph, has_client_state):
  """Splits the live ops of a checked graph into prepare, work and update."""
  live = graph_walk.live_ops(graph, has_client_state)
  broadcasts = [op for op in live if graph_walk.is_broadcast(op)]
  broadcast_values = []
  for op in broadcasts:
    if not any(_same_value(op.inputs[0], v) for v in broadcast_values):
      broadcast_values.append(op.inputs[0])
  secure = [op for op in live if graph_walk.is_secure(op)]
  aggs = [op for op in live
          if graph_walk.is_aggregation(op) and not graph_walk.is_secure(op)]
  server_roots, client_roots = graph_walk.result_roots(graph, has_client_state)

  def ops_computing(values):
    """The ops between the boundaries that compute `values`."""
    return [op for op in graph_walk.needed_ops(graph, values,
                                               graph_walk.is_boundary)
            if not graph_walk.is_boundary(op)]

  prepare_ops = ops_computing(broadcast_values)
  work_ops = ops_computing([v for op in aggs for v in op.inputs] +
                           [op.inputs[0] for op in secure] + client_roots)
  parameter_ops = ops_computing([v for op in secure for v in op.inputs[1:]])
  update_ops = ops_computing(server_roots)
  for piece, ops, placement in (('prepare', prepare_ops, ft.SERVER),
                                ('work', work_ops, ft.CLIENTS),
                                ('secure_parameters', parameter_ops,
                                 ft.SERVER),
                                ('update', update_ops, ft.SERVER)):
    for op in ops:
      if op.output.placement != placement:
        raise errors.FederatedError(
            f'{op.describe()} makes a value at {op.output.placement} but '
            f'would run in {piece}, at {placement}: a value crosses between '
            'server and clients only by federated_broadcast or an '
            'aggregation.')
  client_state, client_outputs = graph_walk.client_results(graph,
                                                           has_client_state)
  return Plan(graph, broadcasts, broadcast_values, aggs, secure,
              parameter_ops, prepare_ops, work_ops, update_ops, client_state,
              client_outputs)
