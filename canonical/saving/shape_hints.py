"""A loaded piece's functions built as TensorFlow will build them, and the
shapes they claim for their arguments (`_output_shapes`) checked against
what feeds them, before the claims are dropped.

TensorFlow trusts such a hint when it runs the function, and a wrong one
aborts the process in a C++ check; so does an op whose attributes its kernel
cannot take (a Conv2D given three dilations), first met when a dataset
reduce runs the function mid-round. So, with every hint set aside:
- the piece's graph is imported (TensorFlow infers each tensor's shape from
  the placeholders, which the loader checks against the declared specs);
- each function reached from it is built from the shapes at its call site:
  a call's inputs, a dataset function's elements (the dataset ops' declared
  element shapes, and `ReduceDataset`'s state); a hint incompatible with
  its argument's shape is refused, naming the function, the argument and
  both shapes;
- a function reached no such way (a loop's body) is built from its hints.
A body TensorFlow's shape functions refuse is refused with their reason.
"""

import tensorflow as tf
from tensorflow.python.framework import function_def_to_graph

SHAPE_HINT = '_output_shapes'
_CALLS = ('PartitionedCall', 'StatefulPartitionedCall')
# Dataset ops whose function takes the input dataset's elements (then the
# captured arguments): the attribute naming it.
_ELEMENT_FUNCTIONS = {'FilterDataset': 'predicate', 'MapDataset': 'f',
                      'ParallelMapDataset': 'f', 'ParallelMapDatasetV2': 'f',
                      'FlatMapDataset': 'f'}
# Builds of one function from different call-site shapes, at most.
_BUILDS_PER_FUNCTION = 4


class ShapeHintError(ValueError):
  """A function does not build, or claims a shape its input does not have."""


def check(graph_def):
  """Raises `ShapeHintError` for the first function that does not build or
  whose hint disagrees with its argument's shape (module doc)."""
  hints = {f.signature.name: {i: _hinted(a) for i, a in f.arg_attr.items()}
           for f in graph_def.library.function}
  stripped = tf.compat.v1.GraphDef()
  stripped.CopyFrom(graph_def)
  for function in stripped.library.function:
    for argument in function.arg_attr.values():
      argument.attr.pop(SHAPE_HINT, None)
  functions = {f.signature.name: f for f in stripped.library.function}
  with tf.Graph().as_default() as graph:
    _import(tf.compat.v1.GraphDef(library=stripped.library,
                                  versions=stripped.versions),
            'library', 'its function library')
    try:
      tf.graph_util.import_graph_def(
          tf.compat.v1.GraphDef(node=stripped.node,
                                versions=stripped.versions), name='piece')
    except Exception:  # pylint: disable=broad-except
      return  # The piece's own import names what is wrong.
    builder = _Builder(graph, functions, hints)
    builder.visit(stripped.node, lambda name: graph.get_tensor_by_name(
        'piece/' + (name if ':' in name else name + ':0')).shape)
    for name, function in functions.items():
      if not builder.builds[name]:  # From its hints.
        builder.build(function, [hints[name].get(i) for i in
                                 range(len(function.signature.input_arg))])


class _Builder:
  """Builds functions from their call sites' shapes, one scope at a time."""

  def __init__(self, graph, functions, hints):
    self._graph, self._functions, self._hints = graph, functions, hints
    self.builds = {name: 0 for name in functions}
    self._done = set()
    self._scopes = 0

  def visit(self, nodes, shape_of):
    """Checks and builds each function the nodes call; `shape_of(input
    name)` is the shape of a tensor of this scope."""
    producers = {node.name: node for node in nodes}
    for node in nodes:
      for callee, shapes in _calls(node, shape_of, producers,
                                   self._functions):
        if callee not in self._functions:
          continue  # The sealer names calls to undefined functions.
        function = self._functions[callee]
        _compare(function, self._hints[callee], shapes)
        key = (callee, tuple(str(s) for s in shapes))
        if key in self._done or (
            self.builds[callee] >= _BUILDS_PER_FUNCTION):
          continue
        self._done.add(key)
        self.build(function, shapes, visit_calls=True)

  def build(self, function, shapes, visit_calls=False):
    name = function.signature.name
    self.builds[name] += 1
    self._scopes += 1
    scope = f'function{self._scopes}'
    arguments = function.signature.input_arg
    shapes = (list(shapes) + [None] * len(arguments))[:len(arguments)]
    try:
      body, flat_names = function_def_to_graph.function_def_to_graph_def(
          function, input_shapes=[None if s is None else s.as_proto()
                                  for s in shapes])
    except Exception as e:  # pylint: disable=broad-except
      raise ShapeHintError(_failure(f'function {name!r}', e)) from None
    _import(body, scope, f'function {name!r}')
    if visit_calls:
      self.visit(function.node_def, lambda tensor: self._graph
                 .get_tensor_by_name(f'{scope}/{flat_names[tensor]}').shape)


def _import(graph_def, scope, what):
  try:
    tf.graph_util.import_graph_def(graph_def, name=scope)
  except Exception as e:  # pylint: disable=broad-except
    raise ShapeHintError(_failure(what, e)) from None


def _failure(what, error):
  text = str(error).strip()
  reason = text.splitlines()[0][:300] if text else ''
  return f'{what} does not build: {type(error).__name__}: {reason}'


def _calls(node, shape_of, producers, functions):
  """(function name, the shapes of its arguments, None where unknown) for
  each function `node` runs."""
  inputs = [_shape_or_none(shape_of, name) for name in node.input
            if not name.startswith('^')]
  # Attributes are read only if present: reading a missing one adds it.
  if node.op in _CALLS and 'f' in node.attr:
    yield node.attr['f'].func.name, inputs
  elif node.op in functions:  # A direct call.
    yield node.op, inputs
  elif node.op in _ELEMENT_FUNCTIONS and (
      _ELEMENT_FUNCTIONS[node.op] in node.attr and node.input):
    own = node.op == 'FilterDataset'  # Its elements are its input's.
    elements = (_element_shapes(node) if own else
                _element_shapes(producers.get(_node(node.input[0]))))
    if elements is not None:
      yield (node.attr[_ELEMENT_FUNCTIONS[node.op]].func.name,
             elements + inputs[1:])
  elif node.op == 'ReduceDataset' and 'f' in node.attr and (
      'Tstate' in node.attr and node.input):
    states = len(node.attr['Tstate'].list.type)
    elements = _element_shapes(producers.get(_node(node.input[0])))
    if elements is not None:
      yield (node.attr['f'].func.name,
             inputs[1:1 + states] + elements + inputs[1 + states:])


def _shape_or_none(shape_of, name):
  try:
    return shape_of(name)
  except (KeyError, ValueError):
    return None


def _shape(proto):
  """The TensorShape of a TensorShapeProto; None for a malformed one."""
  try:
    return tf.TensorShape(proto)
  except (TypeError, ValueError):
    return None


def _hinted(argument):
  if SHAPE_HINT not in argument.attr:
    return None
  shapes = argument.attr[SHAPE_HINT].list.shape
  return _shape(shapes[0]) if len(shapes) == 1 else None


def _element_shapes(node):
  if node is None or 'output_shapes' not in node.attr:
    return None
  return [_shape(s) for s in node.attr['output_shapes'].list.shape]


def _compare(function, hints, shapes):
  for index, shape in enumerate(shapes):
    claimed = hints.get(index)
    if shape is not None and claimed is not None and (
        not claimed.is_compatible_with(shape)):
      name = function.signature.input_arg[index].name if index < len(
          function.signature.input_arg) else '?'
      raise ShapeHintError(
          f'function {function.signature.name!r} claims shape {claimed} '
          f'for its argument {index} ({name!r}), whose input has shape '
          f'{shape}')


def _node(tensor_name):
  return tensor_name.lstrip('^').split(':')[0]
