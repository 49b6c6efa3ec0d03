"""The compiler's emit pass: the pieces of the form, each calling the user's
already traced functions through the intrinsics' lowerings."""

import tensorflow as tf

from canonical.core import evaluation
from canonical.core.intrinsics import registry
from canonical.core import types as ft
from canonical import errors
from canonical import form as form_lib


def _with_shape(value, spec, what):
  """`value` (a structure) repacked as `spec`, tensors checked to its shapes:
  statically now, and at run time where the shape is only known then."""
  leaves = []
  for v, s in zip(tf.nest.flatten(value), tf.nest.flatten(spec)):
    if isinstance(s, tf.TensorSpec):
      if not v.shape.is_compatible_with(s.shape):
        found = ft.describe(tf.TensorSpec(v.shape, v.dtype))
        raise errors.FederatedError(
            f'{what} has a tensor {found}, but next '
            f'declares {ft.describe(spec)}.')
      if not v.shape.is_fully_defined():
        v = tf.ensure_shape(v, s.shape)
    leaves.append(v)
  return tf.nest.pack_sequence_as(spec, leaves)


def _made_by(values):
  ops = [v.producer for v in tf.nest.flatten(values) if v.producer is not None]
  return f' (made by {", ".join(op.describe() for op in ops)})' if ops else ''


def emit(process, plan, name, description='', encoders=None,
         privacy_releases=()):
  """The `CanonicalForm` of a partitioned graph."""
  graph = plan.graph
  params = graph.parameters
  state_param, data_param = params[0], params[1]
  has_client_state = process.has_client_state
  # The declared parameter types of `next`: they may be more general than
  # what initialize makes (a state whose size changes between rounds).
  state_spec = state_param.member
  client_state_spec = params[2].member if has_client_state else None
  aggs = [registry.of(op).lowering(op, op.inputs[0].member)
          for op in plan.aggregations]
  secure = [registry.of(op).lowering(op) for op in plan.secure]

  def at_one_place(op, env):
    return registry.of(op).at_one_place(op, [env[id(v)] for v in op.inputs])

  def prepare(state):
    env = evaluation.evaluate(plan.prepare_ops, {id(state_param): state})
    return tuple(env[id(v)] for v in plan.broadcast_values)

  def work(data, broadcast):
    env = {}
    if has_client_state:
      env[id(data_param)], env[id(params[2])] = data
    else:
      env[id(data_param)] = data
    for op in plan.broadcasts:  # What a client makes of its C.
      env[id(op.output)] = registry.of(op).at_one_place(
          op, [broadcast[plan.broadcast_slot(op)]])
    evaluation.evaluate(plan.work_ops, env)
    update = tuple(at_one_place(op, env) for op in plan.aggregations)
    if plan.secure:
      update = form_lib.ClientUpdate(
          update, tuple(  # Of the value only: the parameter is the server's.
              registry.of(op).at_one_place(op, [env[id(op.inputs[0])]])
              for op in plan.secure))
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
        lowering.parameters([env[id(v)] for v in op.inputs[1:]])
        for op, lowering in zip(plan.secure, secure))

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
      privacy_releases=privacy_releases, secure_sums=[lowering.entry for lowering in secure],
      parameter_labels=[p.name or '' for p in params],
      result_labels=getattr(graph.result, '_fields', ()), **pieces)
