"""What a loaded piece's GraphDef must satisfy before TensorFlow sees it.

TensorFlow trusts a GraphDef: a call names its function by a string looked
up in every function the process registered (our own included), a function
that calls itself overflows the stack, and a constant whose tensor disagrees
with its declared type fails a C++ check that aborts the process. So a loaded
piece is sealed here first:

- its functions are renamed to names derived from the piece's content, so two
  forms (or a form and the process's own functions) never share a name, and
  two forms whose functions happen to share names both load;
- every function it calls must be defined in the piece itself;
- no function may call itself, directly or through others;
- every constant's tensor matches its declared type and shape; one stated by
  a few values repeated (a proto may state one value for any shape: a small
  file that would allocate gigabytes) expands to at most
  `MAX_EXPANDED_CONSTANT_BYTES`;
- no dataset shuffle or sample draws from OS entropy (dataset_seeds.py);
- every function builds under TensorFlow's shape functions, as the top-level
  graph does when it is imported: an op whose attributes its kernel cannot
  take (a Conv2D given three dilations) aborted the process when the
  function first ran, inside a dataset reduce (`shape_hints`);
- the shapes a function's arguments claim (`_output_shapes`, a hint
  TensorFlow trusts when it runs the function: a wrong one aborts the process
  in a C++ check) must agree with the shapes the graph states for their
  inputs (`shape_hints`), and are then dropped, so TensorFlow infers them
  from what the function is given. The hints are not part of what the piece
  computes (the fingerprint leaves them out), and a piece runs to the same
  bits without.
"""

import hashlib

import numpy as np
import tensorflow as tf

from canonical.core import dataset_seeds
from canonical import errors
from canonical.saving import shape_hints

MAX_EXPANDED_CONSTANT_BYTES = 256 << 20
_FORBIDDEN_CONSTANT_DTYPES = (tf.resource, tf.variant)
SHAPE_HINT = shape_hints.SHAPE_HINT


class GraphCheckError(errors.Error, ValueError):
  """The GraphDef is refused; the message names the node or function."""


def seal(graph_def):
  """Checks `graph_def` and renames its functions in place (see module doc);
  raises `GraphCheckError`."""
  library = graph_def.library
  names = [f.signature.name for f in library.function]
  defined = set(names)
  if len(defined) != len(names):
    twice = sorted({n for n in names if names.count(n) > 1})
    raise GraphCheckError(f'function {twice[0]!r} is defined twice')
  calls = {name: set() for name in defined}
  for where, caller, reference in _references(graph_def, defined):
    if reference.name not in defined:
      raise GraphCheckError(
          f'{where} calls function {reference.name!r}, which the piece does '
          'not define')
    if caller is not None:
      calls[caller].add(reference.name)
  for gradient in library.gradient:
    for name in (gradient.function_name, gradient.gradient_func):
      if name not in defined:
        raise GraphCheckError(f'a gradient names function {name!r}, which '
                              'the piece does not define')
  cycle = _cycle(calls)
  if cycle:
    raise GraphCheckError('function ' + repr(cycle[0]) + ' calls itself (' +
                          ' -> '.join(cycle) + ')')
  for node, where in _nodes(graph_def):
    if node.op == 'Const':
      _check_constant(node, where)
  for op, name in dataset_seeds.unseeded(graph_def):
    raise GraphCheckError(f'node {name!r} ({op}) {dataset_seeds.UNSEEDED}')
  try:
    shape_hints.check(graph_def)
  except shape_hints.ShapeHintError as e:
    raise GraphCheckError(str(e)) from None
  for function in library.function:
    for argument in function.arg_attr.values():
      argument.attr.pop(SHAPE_HINT, None)
  _rename(graph_def, defined)


def _nodes(graph_def):
  """(NodeDef, where) of the graph and of every function, with the name of
  the function holding it (None for the graph)."""
  for node in graph_def.node:
    yield node, f'node {node.name!r}'
  for function in graph_def.library.function:
    for node in function.node_def:
      yield node, (f'node {node.name!r} of function '
                   f'{function.signature.name!r}')


class _DirectCall:
  """A node whose op is a function's name: a call with no attribute."""

  def __init__(self, node):
    self._node = node

  @property
  def name(self):
    return self._node.op

  @name.setter
  def name(self, value):
    self._node.op = value


def _references(graph_def, defined):
  """(where, calling function or None, reference) for every function
  reference; a reference has a settable `name`."""
  functions = [(None, graph_def.node, None)] + [
      (f.signature.name, f.node_def, f) for f in graph_def.library.function]
  for caller, nodes, function in functions:
    prefix = '' if caller is None else f' of function {caller!r}'
    if function is not None:
      for value in function.attr.values():
        for reference in _in_attr(value):
          yield f'function {caller!r} (an attribute)', caller, reference
    for node in nodes:
      where = f'node {node.name!r}{prefix}'
      if node.op in defined:
        yield where, caller, _DirectCall(node)
      for value in node.attr.values():
        for reference in _in_attr(value):
          yield where, caller, reference


def _in_attr(value):
  """The NameAttrLists of an AttrValue, nested ones included."""
  kind = value.WhichOneof('value')
  if kind == 'func':
    name_lists = [value.func]
  elif kind == 'list':
    name_lists = list(value.list.func)
  else:
    return
  for name_list in name_lists:
    yield name_list
    for nested in name_list.attr.values():
      yield from _in_attr(nested)


def _cycle(calls):
  """A call cycle as a list of names (first repeated last), or None."""
  done, path, on_path = set(), [], set()

  def visit(name):
    path.append(name)
    on_path.add(name)
    for callee in sorted(calls[name]):
      if callee in on_path:
        return path[path.index(callee):] + [callee]
      if callee not in done:
        found = visit(callee)
        if found:
          return found
    path.pop()
    on_path.discard(name)
    done.add(name)
    return None

  for name in sorted(calls):
    if name not in done:
      found = visit(name)
      if found:
        return found
  return None


def _check_constant(node, where):
  if 'value' not in node.attr or 'dtype' not in node.attr:
    raise GraphCheckError(f'{where}: a Const without its value or dtype')
  tensor = node.attr['value'].tensor
  declared = node.attr['dtype'].type
  try:
    dtype = tf.dtypes.as_dtype(declared)
    tensor_dtype = tf.dtypes.as_dtype(tensor.dtype)
  except TypeError:
    raise GraphCheckError(f'{where}: a Const of unknown dtype '
                          f'{declared}/{tensor.dtype}') from None
  if tensor_dtype != dtype:
    raise GraphCheckError(f'{where}: a Const declared {dtype.name} holds a '
                          f'{tensor_dtype.name} tensor')
  if dtype in _FORBIDDEN_CONSTANT_DTYPES:
    raise GraphCheckError(f'{where}: a Const of dtype {dtype.name}')
  shape = tensor.tensor_shape
  sizes = [d.size for d in shape.dim]
  if shape.unknown_rank or any(size < 0 for size in sizes):
    raise GraphCheckError(f'{where}: a Const of undefined shape')
  nbytes = int(np.prod(sizes, dtype=object)) * dtype.size
  if tensor.tensor_content:
    if dtype == tf.string or len(tensor.tensor_content) != nbytes:
      raise GraphCheckError(
          f'{where}: a Const of shape {sizes} {dtype.name} holds '
          f'{len(tensor.tensor_content)} bytes of content')
    return
  if nbytes > MAX_EXPANDED_CONSTANT_BYTES:
    raise GraphCheckError(
        f'{where}: a Const of shape {sizes} {dtype.name} states '
        f'{_stated_values(tensor)} values for {nbytes >> 20} MiB (at most '
        f'{MAX_EXPANDED_CONSTANT_BYTES >> 20} MiB expand from a few values)')
  try:
    value = tf.make_ndarray(tensor)
  except Exception as e:  # pylint: disable=broad-except
    raise GraphCheckError(f'{where}: a Const whose values do not fit its '
                          f'shape {sizes} {dtype.name}: {e}') from None
  if value.shape != tuple(sizes):
    raise GraphCheckError(f'{where}: a Const whose values do not fit its '
                          f'shape {sizes} {dtype.name}')


def _stated_values(tensor):
  return sum(len(value) for field, value in tensor.ListFields()
             if field.name.endswith('_val'))


def _rename(graph_def, defined):
  """Gives each function a name unique to the piece's content."""
  tag = hashlib.sha256(graph_def.SerializeToString(
      deterministic=True)).hexdigest()[:16]
  rename_functions(graph_def, {name: f'{name}_form_{tag}' for name in defined})


def rename_functions(graph_def, new_names):
  """Renames the functions of `graph_def` and every reference to them, in
  place, by the mapping `new_names` (which covers every function)."""
  defined = set(new_names)
  for _, _, reference in list(_references(graph_def, defined)):
    reference.name = new_names[reference.name]
  for function in graph_def.library.function:
    function.signature.name = new_names[function.signature.name]
  for gradient in graph_def.library.gradient:
    gradient.function_name = new_names[gradient.function_name]
    gradient.gradient_func = new_names[gradient.gradient_func]
