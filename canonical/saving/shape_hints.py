"""The shapes a loaded piece's functions claim for their arguments
(`_output_shapes`), checked against what feeds them before they are dropped.

TensorFlow trusts such a hint when it runs the function, and a wrong one
aborts the process in a C++ check. The loader drops every hint (TensorFlow
then infers the shapes), and first refuses a file whose hint disagrees with
a shape the graph itself states for that argument's input:
- a piece input (its Placeholder's shape, which the loader checks against
  the declared input spec) passed to a call;
- a shape passed on through a function's own arguments to a call inside it;
- a dataset function's elements (the dataset ops' declared element shapes)
  and `ReduceDataset`'s state.
A hint whose input no such shape states is only dropped.
"""

import tensorflow as tf

SHAPE_HINT = '_output_shapes'
_CALLS = ('PartitionedCall', 'StatefulPartitionedCall')
# Dataset ops whose function takes the input dataset's elements (then the
# captured arguments): the attribute naming it.
_ELEMENT_FUNCTIONS = {'FilterDataset': 'predicate', 'MapDataset': 'f',
                      'ParallelMapDataset': 'f', 'ParallelMapDatasetV2': 'f',
                      'FlatMapDataset': 'f'}


class ShapeHintError(ValueError):
  """A function argument's claimed shape disagrees with its input's."""


def check(graph_def):
  """Raises `ShapeHintError` naming the function, the argument and both
  shapes for the first hint that disagrees with its input's stated shape."""
  functions = {f.signature.name: f for f in graph_def.library.function}
  checked = set()

  def visit(nodes, known):
    """`known`: tensor name -> TensorShape, for this scope's tensors."""
    producers = {node.name: node for node in nodes}
    for node in nodes:
      for callee, shapes in _calls(node, known, producers, functions):
        function = functions.get(callee)
        if function is None:
          continue  # The sealer names calls to undefined functions.
        _compare(function, shapes)
        key = (callee, tuple(str(s) for s in shapes))
        if key not in checked:
          checked.add(key)
          arguments = [a.name for a in function.signature.input_arg]
          visit(function.node_def,
                {name: shape for name, shape in zip(arguments, shapes)
                 if shape is not None})

  visit(graph_def.node, {
      node.name: _shape(node.attr['shape'].shape)
      for node in graph_def.node
      if node.op == 'Placeholder' and 'shape' in node.attr})


def _calls(node, known, producers, functions):
  """(function name, the shapes of its arguments, None where unknown) for
  each function `node` runs on inputs of stated shapes."""
  inputs = [known.get(_tensor(name)) for name in node.input
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


def _shape(proto):
  """The TensorShape of a TensorShapeProto; None for a malformed one (the
  importer names it, if the graph uses it)."""
  try:
    return tf.TensorShape(proto)
  except (TypeError, ValueError):
    return None


def _element_shapes(node):
  if node is None or 'output_shapes' not in node.attr:
    return None
  return [_shape(s) for s in node.attr['output_shapes'].list.shape]


def _compare(function, shapes):
  for index, shape in enumerate(shapes):
    if shape is None or index not in function.arg_attr or (
        SHAPE_HINT not in function.arg_attr[index].attr):
      continue
    claimed = [_shape(s) for s in
               function.arg_attr[index].attr[SHAPE_HINT].list.shape]
    if len(claimed) == 1 and claimed[0] is not None and (
        not claimed[0].is_compatible_with(shape)):
      name = function.signature.input_arg[index].name
      raise ShapeHintError(
          f'function {function.signature.name!r} claims shape '
          f'{claimed[0]} for its argument {index} ({name!r}), whose input '
          f'has shape {shape}')


def _node(tensor_name):
  return tensor_name.lstrip('^').split(':')[0]


def _tensor(tensor_name):
  """The key of a node input: 'node' for output 0 of the graph, the input
  as written in a function body ('arg', 'node:output:k')."""
  return tensor_name[:-2] if tensor_name.endswith(':0') and (
      tensor_name.count(':') == 1) else tensor_name
