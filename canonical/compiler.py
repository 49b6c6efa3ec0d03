"""The compiler: `IterativeProcess` -> `CanonicalForm`, in small passes.

trace   -> the `ir.Graph` of `next` (computations.py)
check   -> purity of every tf_computation, and the round's dependency rules
partition -> which ops run in prepare, work, the aggregations and update
emit    -> the eight pieces, each a Python function traced once by TF
"""

import dataclasses

import tensorflow as tf

from canonical import aggregations
from canonical import evaluation
from canonical import form as form_lib
from canonical import intrinsics
from canonical import ir
from canonical import process as process_lib
from canonical import types as ft


def compile(process, name=None, description='', encoders=None):  # pylint: disable=redefined-builtin
  """Lowers `process` into a `CanonicalForm`; raises `ir.FederatedError` if it cannot."""
  if not isinstance(process, process_lib.IterativeProcess):
    raise ir.FederatedError('compile expects an IterativeProcess, got '
                            f'{type(process).__name__}.')
  graph = process.next.trace()
  check(process, graph)
  plan = partition(graph, process.has_client_state)
  return emit(process, plan, name=name or graph.name, description=description,
              encoders=encoders)


# ----------------------------------------------------------------------------
# check


def computations_of(graph):
  """Every tf_computation the graph's ops apply, with the op using it."""
  for op in graph.ops:
    for value in op.attrs.values():
      if hasattr(value, 'check_pure'):
        yield op, value


def check(process, graph):
  """Raises `ir.FederatedError` for impure pieces and impossible rounds."""
  process.initialize.check_pure()
  if process.has_client_state:
    process.client_state_initializer.check_pure()
  for _, computation in computations_of(graph):
    computation.check_pure()
  aggregation_ops = {id(op): op for op in graph.ops
                     if op.kind in intrinsics.AGGREGATIONS}
  for op in graph.ops:
    if op.kind == 'federated_broadcast' or op.kind in intrinsics.AGGREGATIONS:
      upstream = ir.upstream_ops(op.inputs)
      earlier = [aggregation_ops[i] for i in upstream if i in aggregation_ops]
      if earlier:
        first = min(earlier, key=graph.ops.index)
        what = ('a broadcast' if op.kind == 'federated_broadcast' else
                'an aggregation')
        raise ir.FederatedError(
            f'{op.describe()} depends on {first.describe()} of the same '
            f'round: {what} cannot use an aggregated value, since a round of '
            'the canonical form broadcasts once and aggregates once. Move it '
            'into the next round (carry the value in the server state).')


# ----------------------------------------------------------------------------
# partition


@dataclasses.dataclass
class Plan:
  graph: object
  broadcasts: list      # broadcast ops, in order: C is the tuple of their inputs
  aggregations: list    # aggregation ops, in order: A, U and R are tuples
  prepare_ops: list
  work_ops: list
  update_ops: list
  client_state_result: object  # structure of Values, or None


def _needed_ops(graph, values, stop):
  """Ops (in trace order) computing `values`, not looking past `stop(op)`."""
  needed, stack = set(), list(values)
  while stack:
    op = stack.pop().producer
    if op is None or id(op) in needed:
      continue
    needed.add(id(op))
    if not stop(op):
      stack.extend(op.inputs)
  return [op for op in graph.ops if id(op) in needed]


def partition(graph, has_client_state):
  broadcasts = [op for op in graph.ops if op.kind == 'federated_broadcast']
  aggs = [op for op in graph.ops if op.kind in intrinsics.AGGREGATIONS]
  is_boundary = lambda op: op.kind == 'federated_broadcast' or (
      op.kind in intrinsics.AGGREGATIONS)
  prepare_ops = _needed_ops(graph, [v for op in broadcasts for v in op.inputs],
                            is_boundary)
  client_state = graph.result[2] if has_client_state else None
  work_roots = [v for op in aggs for v in op.inputs]
  work_roots += tf.nest.flatten(client_state) if has_client_state else []
  work_ops = [op for op in _needed_ops(graph, work_roots, is_boundary)
              if not is_boundary(op)]
  update_roots = tf.nest.flatten(graph.result[:2])
  update_ops = [op for op in _needed_ops(graph, update_roots, is_boundary)
                if op.kind not in intrinsics.AGGREGATIONS]
  for op in work_ops:
    for value in op.inputs:
      if value.placement == ft.SERVER:
        raise ir.FederatedError(f'{op.describe()} uses a server value at the '
                                'clients without federated_broadcast.')
  return Plan(graph, broadcasts, aggs, prepare_ops, work_ops, update_ops,
              client_state)


# ----------------------------------------------------------------------------
# emit


def _member_spec(value):
  return value.member


def emit(process, plan, name, description='', encoders=None):
  graph = plan.graph
  params = graph.parameters
  state_param, data_param = params[0], params[1]
  has_client_state = process.has_client_state
  state_spec = process.state_spec
  aggs = [aggregations.of(op, op.inputs[0].member) for op in plan.aggregations]

  def prepare(state):
    env = evaluation.evaluate(plan.prepare_ops, {id(state_param): state})
    return tuple(env[id(op.inputs[0])] for op in plan.broadcasts)

  def work(data, broadcast):
    env = {}
    if has_client_state:
      env[id(data_param)], env[id(params[2])] = data
    else:
      env[id(data_param)] = data
    for op, value in zip(plan.broadcasts, broadcast):
      env[id(op.output)] = value
    evaluation.evaluate(plan.work_ops, env)
    update = tuple(
        agg.client_part([env[id(v)] for v in op.inputs])
        for op, agg in zip(plan.aggregations, aggs))
    client_state = (tf.nest.map_structure(lambda v: env[id(v)],
                                          plan.client_state_result)
                    if has_client_state else ())
    return update, client_state

  def zero():
    return tuple(agg.zero() for agg in aggs)

  def accumulate(accumulator, update):
    return tuple(agg.accumulate(a, u)
                 for agg, a, u in zip(aggs, accumulator, update))

  def merge(a, b):
    return tuple(agg.merge(x, y) for agg, x, y in zip(aggs, a, b))

  def report(accumulator):
    return tuple(agg.report(a) for agg, a in zip(aggs, accumulator))

  def update(state, aggregate):
    env = {id(state_param): state}
    for op, value in zip(plan.aggregations, aggregate):
      env[id(op.output)] = value
    evaluation.evaluate(plan.update_ops, env)
    new_state, metrics = tf.nest.map_structure(lambda v: env[id(v)],
                                               tuple(graph.result[:2]))
    return tf.nest.pack_sequence_as(state_spec, tf.nest.flatten(
        new_state)), metrics

  data_spec = data_param.member
  if has_client_state:
    data_spec = (data_spec, params[2].member)
  prepare_piece = form_lib.Piece('prepare', prepare, (state_spec,))
  broadcast_spec = prepare_piece.output_spec
  work_piece = form_lib.Piece('work', work, (data_spec, broadcast_spec))
  update_spec = work_piece.output_spec[0]
  accumulator_spec = tuple(agg.accumulator_spec for agg in aggs)
  report_piece = form_lib.Piece('report', report, (accumulator_spec,))
  pieces = dict(
      initialize=form_lib.Piece('initialize', process.initialize.python_function,
                                ()),
      prepare=prepare_piece,
      work=work_piece,
      zero=form_lib.Piece('zero', zero, ()),
      accumulate=form_lib.Piece('accumulate', accumulate,
                                (accumulator_spec, update_spec)),
      merge=form_lib.Piece('merge', merge, (accumulator_spec,
                                            accumulator_spec)),
      report=report_piece,
      update=form_lib.Piece('update', update,
                            (state_spec, report_piece.output_spec)),
  )
  if has_client_state:
    pieces['client_state_init'] = form_lib.Piece(
        'client_state_init', process.client_state_initializer.python_function,
        ())
  return form_lib.CanonicalForm(name=name, description=description,
                                encoders=encoders, **pieces)
