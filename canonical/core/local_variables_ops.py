"""The lowering of each op that reads or writes one variable, as a table
the rewrite looks ops up in; calls, loops, branches and datasets are the
rewrite's own."""

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2
from tensorflow.core.framework import types_pb2

from canonical.core.local_variables_graph import _become
from canonical.core.local_variables_graph import _data_inputs
from canonical.core.local_variables_graph import _int_attr
from canonical.core.local_variables_graph import _type_attr

# Ops on one variable (its handle is input 0): each turns `node` into pure
# ops of the variable's current value, and returns the new value's ref when
# it writes.


def _read(lowering, scope, node, var, current):
  _become(node, 'Identity', [lowering.value(node, var, current)],
          {'T': _type_attr(var.dtype)})
  scope.rename_output(node.name, 'value', 'output')


def _assign(lowering, scope, node, var, current):
  del lowering, current
  _become(node, 'Identity', [_data_inputs(node)[1]],
          {'T': _type_attr(var.dtype)})
  return scope.ref(node.name, 'output', 0)


def _binary(op):
  def lower(lowering, scope, node, var, current):
    value = lowering.value(node, var, current)
    _become(node, op, [value, _data_inputs(node)[1]],
            {'T': _type_attr(var.dtype)})
    return scope.ref(node.name, 'z', 0)
  return lower


def _is_initialized(lowering, scope, node, var, current):
  del lowering
  value = tf.make_tensor_proto(current.get(var) is not None)
  _become(node, 'Const', [], {'dtype': _type_attr(types_pb2.DT_BOOL),
                              'value': attr_value_pb2.AttrValue(
                                  tensor=value)})
  scope.rename_output(node.name, 'is_initialized', 'output')


def _shape(lowering, scope, node, var, current):
  del scope
  value = lowering.value(node, var, current)
  _become(node, 'Shape', [value], {'T': _type_attr(var.dtype),
                                   'out_type': node.attr['out_type']})


def _constant(scope, stem, value):
  proto = tf.make_tensor_proto(value)
  node = scope.add(stem, 'Const', [], {
      'dtype': _type_attr(proto.dtype),
      'value': attr_value_pb2.AttrValue(tensor=proto)})
  return scope.ref(node.name, 'output', 0)


def _gather(lowering, scope, node, var, current):
  value = lowering.value(node, var, current)
  batch_dims = node.attr['batch_dims'].i
  indices_type = node.attr['Tindices']
  axis = _constant(scope, f'{node.name}/axis', tf.constant(batch_dims,
                                                           tf.int32))
  _become(node, 'GatherV2', [value, _data_inputs(node)[1], axis], {
      'Tparams': _type_attr(var.dtype), 'Tindices': indices_type,
      'Taxis': _type_attr(types_pb2.DT_INT32),
      'batch_dims': _int_attr(batch_dims)})


def _gather_nd(lowering, scope, node, var, current):
  value = lowering.value(node, var, current)
  indices_type = node.attr['Tindices']
  _become(node, 'GatherNd', [value, _data_inputs(node)[1]], {
      'Tparams': _type_attr(var.dtype), 'Tindices': indices_type})
  del scope


def _scatter(op, nd):
  """`ResourceScatter*` (indices into the first axis) or
  `ResourceScatterNd*` (index tuples) as `TensorScatter*`."""

  def lower(lowering, scope, node, var, current):
    value = lowering.value(node, var, current)
    _, indices, updates = _data_inputs(node)[:3]
    indices_type = node.attr['Tindices']
    if not nd:  # One index per row: an index tuple of length 1.
      axis = _constant(scope, f'{node.name}/axis', tf.constant(-1, tf.int32))
      expand = scope.add(f'{node.name}/indices', 'ExpandDims',
                         [indices, axis], {'T': indices_type,
                                           'Tdim': _type_attr(
                                               types_pb2.DT_INT32)})
      indices = scope.ref(expand.name, 'output', 0)
    _become(node, op, [value, indices, updates], {
        'T': _type_attr(var.dtype), 'Tindices': indices_type})
    return scope.ref(node.name, 'output', 0)

  return lower


def _strided_slice_assign(lowering, scope, node, var, current):
  value = lowering.value(node, var, current)
  _, begin, end, strides, update = _data_inputs(node)[:5]
  attrs = {key: node.attr[key] for key in (
      'Index', 'begin_mask', 'end_mask', 'ellipsis_mask', 'new_axis_mask',
      'shrink_axis_mask')}
  attrs['T'] = _type_attr(var.dtype)
  _become(node, 'TensorStridedSliceUpdate',
          [value, begin, end, strides, update], attrs)
  return scope.ref(node.name, 'output', 0)


def _apply_gradient_descent(lowering, scope, node, var, current):
  """`var -= delta * alpha`, as the kernel computes it."""
  value = lowering.value(node, var, current)
  _, alpha, delta = _data_inputs(node)[:3]
  step = scope.add(f'{node.name}/step', 'Mul', [delta, alpha],
                   {'T': _type_attr(var.dtype)})
  _become(node, 'Sub', [value, scope.ref(step.name, 'z', 0)],
          {'T': _type_attr(var.dtype)})
  return scope.ref(node.name, 'z', 0)


# `tf.random.Generator`'s algorithms (`RngAlg`): Philox, and the automatic
# choice, which is Philox on CPU. ThreeFry has another state layout.
_PHILOX = (1, 3)


def _rng_read_and_skip(lowering, scope, node, var, current):
  """A `tf.random.Generator` draw: the read gives the Philox state
  `[counter low, counter high, key]` (int64), and the 128-bit counter moves
  on by 256 x delta, carried as the kernel carries it."""
  value = lowering.value(node, var, current)
  _, alg, delta = _data_inputs(node)[:3]
  algorithm = _constant_value(scope, alg)
  if algorithm is None or int(algorithm) not in _PHILOX or [
      d.size for d in var.shape.dim] != [3]:
    lowering.refuse(node, f'draws from generator {var.name!r} with an '
                    'algorithm other than Philox, tf.random.Generator\'s '
                    'default on CPU')
  i64 = _type_attr(types_pb2.DT_INT64)

  def add(stem, op, inputs, attrs, out='z', index=0):
    made = scope.add(f'{node.name}/{stem}', op, inputs, attrs)
    return scope.ref(made.name, out, index)

  count = add('count', 'Cast', [delta], {
      'SrcT': _type_attr(types_pb2.DT_UINT64), 'DstT': i64,
      'Truncate': attr_value_pb2.AttrValue(b=False)}, out='y')
  per_draw = _constant(scope, f'{node.name}/per_draw',
                       tf.constant(256, tf.int64))
  step = add('step', 'Mul', [count, per_draw], {'T': i64})
  unpacked = scope.add(f'{node.name}/parts', 'Unpack', [value], {
      'T': i64, 'num': _int_attr(3), 'axis': _int_attr(0)})
  low, high, key = (scope.ref(unpacked.name, 'output', i) for i in range(3))
  new_low = add('low', 'AddV2', [low, step], {'T': i64})
  # Carried when the low word wrapped: new_low < step as unsigned words,
  # which is a signed comparison with the sign bits flipped.
  sign = _constant(scope, f'{node.name}/sign',
                   tf.constant(-2**63, tf.int64))
  flipped = [add(f'flip_{n}', 'BitwiseXor', [word, sign], {'T': i64})
             for n, word in (('low', new_low), ('step', step))]
  wrapped = add('wrapped', 'Less', flipped, {'T': i64})
  carry = add('carry', 'Cast', [wrapped], {
      'SrcT': _type_attr(types_pb2.DT_BOOL), 'DstT': i64,
      'Truncate': attr_value_pb2.AttrValue(b=False)}, out='y')
  new_high = add('high', 'AddV2', [high, carry], {'T': i64})
  new_value = add('state', 'Pack', [new_low, new_high, key], {
      'T': i64, 'N': _int_attr(3), 'axis': _int_attr(0)}, out='output')
  _become(node, 'Identity', [value], {'T': i64})
  scope.rename_output(node.name, 'value', 'output')
  return new_value


def _constant_value(scope, ref):
  """The value of `ref` if a `Const` node gives it, else None."""
  producer = scope.producer(ref)
  for candidate in scope.nodes:
    if candidate.name == producer and candidate.op == 'Const':
      return tf.make_ndarray(candidate.attr['value'].tensor)
  return None


def _destroy(lowering, scope, node, var, current):
  del lowering, scope, var, current
  _become(node, 'NoOp', [], {})


_SIMPLE = {
    'ReadVariableOp': _read,
    'AssignVariableOp': _assign,
    'AssignAddVariableOp': _binary('AddV2'),
    'AssignSubVariableOp': _binary('Sub'),
    'VarIsInitializedOp': _is_initialized,
    'VariableShape': _shape,
    'ResourceGather': _gather,
    'ResourceGatherNd': _gather_nd,
    'ResourceScatterAdd': _scatter('TensorScatterAdd', nd=False),
    'ResourceScatterSub': _scatter('TensorScatterSub', nd=False),
    'ResourceScatterUpdate': _scatter('TensorScatterUpdate', nd=False),
    'ResourceScatterMin': _scatter('TensorScatterMin', nd=False),
    'ResourceScatterMax': _scatter('TensorScatterMax', nd=False),
    'ResourceScatterNdAdd': _scatter('TensorScatterAdd', nd=True),
    'ResourceScatterNdSub': _scatter('TensorScatterSub', nd=True),
    'ResourceScatterNdUpdate': _scatter('TensorScatterUpdate', nd=True),
    'ResourceScatterNdMin': _scatter('TensorScatterMin', nd=True),
    'ResourceScatterNdMax': _scatter('TensorScatterMax', nd=True),
    'ResourceStridedSliceAssign': _strided_slice_assign,
    'ResourceApplyGradientDescent': _apply_gradient_descent,
    'DestroyResourceOp': _destroy,
    'RngReadAndSkip': _rng_read_and_skip,
}
