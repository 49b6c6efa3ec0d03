"""The compiler: `IterativeProcess` -> `CanonicalForm`, in small passes.

trace     -> the `ir.Graph` of `next` (computations.py)
check     -> purity of every tf_computation, and the round's dependency rules
partition -> which ops run in prepare, work, the aggregations and update
emit      -> the eight pieces; each calls the user's already traced functions
"""

import dataclasses

import tensorflow as tf

from canonical.core import aggregations
from canonical.core import evaluation
from canonical import form as form_lib
from canonical.core import intrinsics
from canonical.core import ir
from canonical.templates import iterative_process as process_lib
from canonical.secagg import sums as secure_sums
from canonical.core import types as ft


def compile(process, name=None, description='', encoders=None):  # pylint: disable=redefined-builtin
  """Lowers `process` into a `CanonicalForm`; raises `ir.FederatedError` if it cannot."""
  if not isinstance(process, process_lib.IterativeProcess):
    raise ir.FederatedError('compile expects an IterativeProcess, got '
                            f'{type(process).__name__}.')
  graph = process.next.trace()
  check(process, graph)
  plan = partition(graph, process.has_client_state)
  return emit(process, plan, name=name or graph.name, description=description,
              encoders=process.encoders if encoders is None else encoders)


def _is_aggregation(op):
  return op.kind in intrinsics.AGGREGATIONS


def _is_secure(op):
  return op.kind in intrinsics.SECURE_AGGREGATIONS


def _is_broadcast(op):
  return op.kind == 'federated_broadcast'


def _is_boundary(op):
  return _is_broadcast(op) or _is_aggregation(op)


def client_results(graph, has_client_state):
  """(the new client state, the per-client outputs) of `next`'s result: each
  a structure of values, or None when `next` returns none."""
  result = graph.result
  state = result[2] if has_client_state else None
  first_output = 3 if has_client_state else 2
  outputs = result[first_output] if len(result) > first_output else None
  return state, outputs


def _result_roots(graph, has_client_state):
  """(values of server state and metrics, values computed at the clients:
  the new client state and the per-client outputs)."""
  server = tf.nest.flatten(tuple(graph.result[:2]))
  client = [v for part in client_results(graph, has_client_state)
            if part is not None for v in tf.nest.flatten(part)]
  return server, client


def _needed_ops(graph, values, stop=lambda op: False):
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


def live_ops(graph, has_client_state):
  """The ops the results depend on (dead code is dropped), in trace order."""
  server, client = _result_roots(graph, has_client_state)
  return _needed_ops(graph, server + client)


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
  check_purity(process, graph)
  check_round(graph, process.has_client_state)


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
  live = live_ops(graph, has_client_state)
  aggregation_ids = {id(op): op for op in live if _is_aggregation(op)}
  order = {id(op): i for i, op in enumerate(graph.ops)}

  def earliest_aggregation(op):
    upstream = ir.upstream_ops(op.inputs)
    found = [aggregation_ids[i] for i in upstream if i in aggregation_ids]
    return min(found, key=lambda o: order[id(o)]) if found else None

  def broadcast_between(op, source):
    upstream = ir.upstream_ops(op.inputs)
    for candidate in live:
      if (_is_broadcast(candidate) and id(candidate) in upstream and
          id(source) in ir.upstream_ops(candidate.inputs)):
        return candidate
    return None

  advice = ('since a round of the canonical form broadcasts once and then '
            'aggregates once. Move it into the next round (carry the value in '
            'the server state).')
  # Aggregations first: the message then names both ends and the broadcast.
  for op in live:
    if _is_aggregation(op):
      source = earliest_aggregation(op)
      if source is not None:
        via = broadcast_between(op, source)
        via_text = f' through {via.describe()}' if via else ''
        raise ir.FederatedError(
            f'{op.describe()} depends on {source.describe()} of the same '
            f'round{via_text}: an aggregation cannot use another '
            f'aggregation\'s result, {advice}')
  for op in live:
    if _is_broadcast(op):
      source = earliest_aggregation(op)
      if source is not None:
        raise ir.FederatedError(
            f'{op.describe()} depends on {source.describe()} of the same '
            f'round: a broadcast cannot send an aggregated value, {advice}')


# ----------------------------------------------------------------------------
# partition


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
    raise ValueError(f'{op.describe()} is not in this plan.')

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
  return (pa is not None and pb is not None and pa.kind == pb.kind == 'select'
          and pa.attrs['key'] == pb.attrs['key'] and
          _same_value(pa.inputs[0], pb.inputs[0]))


def partition(graph, has_client_state):
  """Splits the live ops of a checked graph into prepare, work and update."""
  live = live_ops(graph, has_client_state)
  broadcasts = [op for op in live if _is_broadcast(op)]
  broadcast_values = []
  for op in broadcasts:
    if not any(_same_value(op.inputs[0], v) for v in broadcast_values):
      broadcast_values.append(op.inputs[0])
  aggs = [op for op in live if _is_aggregation(op) and not _is_secure(op)]
  secure = [op for op in live if _is_secure(op)]
  server_roots, client_roots = _result_roots(graph, has_client_state)
  not_boundary = lambda ops: [op for op in ops if not _is_boundary(op)]
  prepare_ops = not_boundary(_needed_ops(graph, broadcast_values, _is_boundary))
  work_ops = not_boundary(_needed_ops(
      graph, [v for op in aggs for v in op.inputs] +
      [op.inputs[0] for op in secure] + client_roots, _is_boundary))
  parameter_ops = not_boundary(_needed_ops(
      graph, [v for op in secure for v in op.inputs[1:]], _is_boundary))
  update_ops = not_boundary(_needed_ops(graph, server_roots, _is_boundary))
  for piece, ops, placement in (('prepare', prepare_ops, ft.SERVER),
                                ('work', work_ops, ft.CLIENTS),
                                ('secure_parameters', parameter_ops,
                                 ft.SERVER),
                                ('update', update_ops, ft.SERVER)):
    for op in ops:
      if op.output.placement != placement:
        raise ir.FederatedError(
            f'{op.describe()} makes a value at {op.output.placement} but '
            f'would run in {piece}, at {placement}: a value crosses between '
            'server and clients only by federated_broadcast or an '
            'aggregation.')
  client_state, client_outputs = client_results(graph, has_client_state)
  return Plan(graph, broadcasts, broadcast_values, aggs, secure,
              parameter_ops, prepare_ops, work_ops, update_ops, client_state,
              client_outputs)


# ----------------------------------------------------------------------------
# emit


def _with_shape(value, spec, what):
  """`value` (a structure) repacked as `spec`, tensors checked to its shapes:
  statically now, and at run time where the shape is only known then."""
  leaves = []
  for v, s in zip(tf.nest.flatten(value), tf.nest.flatten(spec)):
    if isinstance(s, tf.TensorSpec):
      if not v.shape.is_compatible_with(s.shape):
        found = ft.describe(tf.TensorSpec(v.shape, v.dtype))
        raise ir.FederatedError(f'{what} has a tensor {found}, but next '
                                f'declares {ft.describe(spec)}.')
      if not v.shape.is_fully_defined():
        v = tf.ensure_shape(v, s.shape)
    leaves.append(v)
  return tf.nest.pack_sequence_as(spec, leaves)


def _made_by(values):
  ops = [v.producer for v in tf.nest.flatten(values) if v.producer is not None]
  return f' (made by {", ".join(op.describe() for op in ops)})' if ops else ''


def emit(process, plan, name, description='', encoders=None):
  """The `CanonicalForm` of a partitioned graph."""
  graph = plan.graph
  params = graph.parameters
  state_param, data_param = params[0], params[1]
  has_client_state = process.has_client_state
  # The declared parameter types of `next`: they may be more general than
  # what initialize makes (a state whose size changes between rounds).
  state_spec = state_param.member
  client_state_spec = params[2].member if has_client_state else None
  aggs = [aggregations.of(op, op.inputs[0].member) for op in plan.aggregations]

  def prepare(state):
    env = evaluation.evaluate(plan.prepare_ops, {id(state_param): state})
    return tuple(env[id(v)] for v in plan.broadcast_values)

  def work(data, broadcast):
    env = {}
    if has_client_state:
      env[id(data_param)], env[id(params[2])] = data
    else:
      env[id(data_param)] = data
    for op in plan.broadcasts:
      env[id(op.output)] = broadcast[plan.broadcast_slot(op)]
    evaluation.evaluate(plan.work_ops, env)
    update = tuple(
        agg.client_part([env[id(v)] for v in op.inputs])
        for op, agg in zip(plan.aggregations, aggs))
    if plan.secure:
      update = form_lib.ClientUpdate(
          update, tuple(env[id(op.inputs[0])] for op in plan.secure))
    client_state = None
    if has_client_state:
      client_state = _with_shape(
          tf.nest.map_structure(lambda v: env[id(v)], plan.client_state_result),
          client_state_spec,
          'The new client state' + _made_by(plan.client_state_result))
    client_outputs = None
    if plan.client_outputs_result is not None:
      client_outputs = tf.nest.map_structure(lambda v: env[id(v)],
                                             plan.client_outputs_result)
    return update, form_lib.client_result(client_state, client_outputs)

  def zero():
    return tuple(agg.zero() for agg in aggs)

  def accumulate(accumulator, update):
    return tuple(agg.accumulate(a, u)
                 for agg, a, u in zip(aggs, accumulator, update))

  def merge(a, b):
    return tuple(agg.merge(x, y) for agg, x, y in zip(aggs, a, b))

  def report(accumulator):
    return tuple(agg.report(a) for agg, a in zip(aggs, accumulator))

  def secure_parameters(state):
    env = evaluation.evaluate(plan.parameter_ops, {id(state_param): state})
    return tuple(
        aggregations.secure_parameters(op, [env[id(v)] for v in op.inputs[1:]])
        for op in plan.secure)

  def update(state, aggregate):
    env = {id(state_param): state}
    if plan.secure:
      for op, value in zip(plan.secure, aggregate.secure):
        env[id(op.output)] = value
      aggregate = aggregate.plain
    for op, value in zip(plan.aggregations, aggregate):
      env[id(op.output)] = value
    evaluation.evaluate(plan.update_ops, env)
    new_state, metrics = tf.nest.map_structure(lambda v: env[id(v)],
                                               tuple(graph.result[:2]))
    new_state = _with_shape(new_state, state_spec,
                            'The new server state' + _made_by(graph.result[0]))
    return new_state, metrics

  data_spec = data_param.member
  if has_client_state:
    data_spec = (data_spec, client_state_spec)
  prepare_piece = form_lib.Piece('prepare', prepare, (state_spec,))
  broadcast_spec = prepare_piece.output_spec
  work_piece = form_lib.Piece('work', work, (data_spec, broadcast_spec))
  update_spec = work_piece.output_spec[0]
  if plan.secure:
    update_spec = update_spec.plain
  accumulator_spec = tuple(agg.accumulator_spec for agg in aggs)
  report_piece = form_lib.Piece('report', report, (accumulator_spec,))
  aggregate_spec = report_piece.output_spec
  if plan.secure:
    aggregate_spec = form_lib.ServerAggregate(
        aggregate_spec, tuple(op.output.member for op in plan.secure))
  pieces = dict(
      initialize=form_lib.Piece('initialize', process.initialize.invoke, ()),
      prepare=prepare_piece,
      work=work_piece,
      zero=form_lib.Piece('zero', zero, ()),
      accumulate=form_lib.Piece('accumulate', accumulate,
                                (accumulator_spec, update_spec)),
      merge=form_lib.Piece('merge', merge, (accumulator_spec,
                                            accumulator_spec)),
      report=report_piece,
      update=form_lib.Piece('update', update, (state_spec, aggregate_spec)),
  )
  if plan.secure:
    pieces['secure_parameters'] = form_lib.Piece(
        'secure_parameters', secure_parameters, (state_spec,))
  if has_client_state:
    pieces['client_state_init'] = form_lib.Piece(
        'client_state_init',
        lambda: _with_shape(process.client_state_initializer.invoke(),
                            client_state_spec,
                            'client_state_initializer\'s result'), ())
  return form_lib.CanonicalForm(
      name=name, description=description, encoders=encoders,
      secure_sums=[secure_sums.SecureSum(op.kind, op.attrs.get('parameters'))
                   for op in plan.secure], **pieces)

