"""A saved piece whose datasets are fed as tensors: `unroll`.

A piece that takes a `tf.data.Dataset` costs 4-20 ms a call in TensorFlow's
dataset runtime (each `ReduceDataset` run instantiates its functions and an
iterator), where a small client's training step costs under 1 ms. Most
pieces use a dataset argument in one way only: a chain of `filter` and `map`
ending in `reduce` (what `dataset.reduce` and autograph's `for batch in
dataset` give). `unroll` rewrites such a GraphDef so each dataset argument
arrives as tensors (its elements, see `encode`) and each chain runs as a
`tf.while_loop` over them that calls the chain's own functions, element after
element, as the dataset would: the same ops on the same values in the same
order, so the same results bit for bit. A piece that uses a dataset in any
other way is left alone (`Unsupported`): it keeps its dataset path.

The elements of a dataset of E components travel as E tensors per
component of rank 0 (stacked: [n]) and two per component of rank >= 1 (the
elements concatenated along their first axis, and int64 row splits [n + 1]),
which fits batches of any sizes, the last short batch included.
"""

import copy
import uuid

import numpy as np
import tensorflow as tf
from tensorflow.python.util import nest  # pylint: disable=g-direct-tensorflow-import
from tensorflow.core.framework import node_def_pb2
from tensorflow.core.framework import op_def_pb2

from canonical import errors

_CALLS = ('PartitionedCall', 'StatefulPartitionedCall')
_PASS_THROUGH = ('Identity',)
# Dataset ops a chain may hold before its reduce, and their function attr.
_CHAIN_OPS = {'FilterDataset': 'predicate', 'MapDataset': 'f',
              'ScanDataset': 'f', 'RepeatDataset': None}
_SUFFIX = '_unrolled'
# Stand-ins are stateless; the functions they stand for may not be.
_STATEFUL = {'PartitionedCall': 'StatefulPartitionedCall',
             'StatelessWhile': 'While', 'StatelessIf': 'If',
             'StatelessCase': 'Case'}


class Unsupported(errors.Error):
  """The piece uses a dataset in a way `unroll` does not rewrite."""


def encoding_specs(element_spec):
  """The TensorSpecs a dataset of `element_spec` is fed as."""
  specs = []
  for spec in tf.nest.flatten(element_spec):
    if not isinstance(spec, tf.TensorSpec) or spec.shape.rank is None:
      raise Unsupported(f'element component {spec} is not a tensor of known '
                        'rank')
    if spec.shape.rank == 0:
      specs.append(tf.TensorSpec([None], spec.dtype))
    else:
      specs.append(tf.TensorSpec([None] + spec.shape[1:].as_list(),
                                 spec.dtype))
      specs.append(tf.TensorSpec([None], tf.int64))
  return specs


def encode(element_spec, elements):
  """The tensors (numpy arrays) that feed `elements`, a sequence of
  structures of `element_spec`; ValueError naming the first misfit."""
  flat_specs = tf.nest.flatten(element_spec)
  columns = [[] for _ in flat_specs]
  for index, element in enumerate(elements):
    try:
      leaves = nest.flatten_up_to(element_spec, element, check_types=False)
    except (TypeError, ValueError) as e:
      raise ValueError(f'element {index} does not have the structure '
                       f'{element_spec}: {e}') from None
    for column, spec, leaf in zip(columns, flat_specs, leaves):
      try:
        column.append(element_array(spec, leaf))
      except ValueError as e:
        raise ValueError(f'element {index}: {e}') from None
  tensors = []
  for spec, column in zip(flat_specs, columns):
    dtype = _numpy_dtype(spec)
    if spec.shape.rank == 0:
      tensors.append(np.array(column, dtype=dtype).reshape([len(column)]))
      continue
    empty = [0] + [d or 0 for d in spec.shape[1:].as_list()]
    tensors.append(np.concatenate(column, axis=0) if column else
                   np.zeros(empty, dtype))
    splits = np.zeros(len(column) + 1, np.int64)
    np.cumsum([len(v) for v in column], out=splits[1:])
    tensors.append(splits)
  return tensors


# A Python value converts to a dtype of its kind or a wider one, as
# tf.convert_to_tensor converts it: bool < integer (signed or not) < float.
_NUMBER_KINDS = {'b': 0, 'i': 1, 'u': 1, 'f': 2}


def element_array(spec, leaf, cast_numpy=False):
  """`leaf` as a numpy array of `spec`. A Python value converts only where
  it keeps its kind or widens it (2 or True for float32, not 1.5 for
  int32), as TensorFlow converts one. A numpy value (or tensor) of another
  dtype is refused, or with `cast_numpy` cast (float64 2.7 -> int32 2), as
  TFF 0.87 takes elements in a call from Python. ValueError otherwise, or
  for another shape."""
  value = np.asarray(leaf)
  dtype = _numpy_dtype(spec)
  typed = isinstance(leaf, (np.ndarray, np.generic)) or tf.is_tensor(leaf)
  if spec.dtype == tf.string:
    if value.dtype.kind not in 'SUO':
      raise ValueError(f'expected string, got {value.dtype}')
  elif value.dtype != dtype:
    if value.dtype.kind not in _NUMBER_KINDS or not (
        (cast_numpy if typed else _NUMBER_KINDS[value.dtype.kind] <=
         _NUMBER_KINDS.get(np.dtype(dtype).kind, -1))):
      raise ValueError(f'expected {spec.dtype.name}, got {value.dtype}')
    value = value.astype(dtype)
  if not spec.shape.is_compatible_with(value.shape):
    raise ValueError(f'expected shape {spec.shape}, got {value.shape}')
  return value


class Encoded:
  """A dataset's elements already encoded (`encode`'s tensors, numpy), as
  a reader that never had them one by one gives them: a piece or batched
  work takes it where it takes a list of elements."""

  def __init__(self, element_spec, count, tensors):
    self.element_spec = element_spec
    self.count = count  # The number of elements.
    self.tensors = tensors

  def __len__(self):
    return self.count

  def elements(self):
    """The elements, as numpy structures (views of the tensors)."""
    columns, position = [], 0
    for spec in tf.nest.flatten(self.element_spec):
      if not spec.shape.rank:
        columns.append(list(self.tensors[position]))
        position += 1
        continue
      values, splits = self.tensors[position], self.tensors[position + 1]
      position += 2
      columns.append([values[a:b] for a, b in zip(splits[:-1], splits[1:])])
    return [tf.nest.pack_sequence_as(self.element_spec,
                                     [np.asarray(c[i]) for c in columns])
            for i in range(self.count)]


def concatenate(element_spec, clients):
  """One encoding of several clients' elements, in order; each client a
  list of elements or an `Encoded`. A ValueError names the first client
  (by position) and element that do not fit."""
  if not any(isinstance(c, Encoded) for c in clients):
    try:
      return encode(element_spec, [e for elements in clients
                                   for e in elements])
    except ValueError:
      for k, elements in enumerate(clients):  # Which client: only on error.
        try:
          encode(element_spec, elements)
        except ValueError as e:
          raise ValueError(f'client {k}: {e}') from None
      raise
  encodings = []
  for k, c in enumerate(clients):
    try:
      encodings.append(c.tensors if isinstance(c, Encoded) else
                       encode(element_spec, c))
    except ValueError as e:
      raise ValueError(f'client {k}: {e}') from None
  joined, position = [], 0
  for spec in tf.nest.flatten(element_spec):
    parts = [e[position] for e in encodings]
    if not spec.shape.rank:
      joined.append(np.concatenate(parts) if parts else
                    np.zeros([0], _numpy_dtype(spec)))
      position += 1
      continue
    splits = [e[position + 1] for e in encodings]
    position += 2
    offsets = np.cumsum([0] + [s[-1] for s in splits[:-1]])
    joined.append(np.concatenate(parts, axis=0))
    joined.append(np.concatenate(
        [[0]] + [s[1:] + o for s, o in zip(splits, offsets)]).astype(
            np.int64))
  return joined


def _numpy_dtype(spec):
  return object if spec.dtype == tf.string else spec.dtype.as_numpy_dtype


def tensor_fed(graph_def, input_tensors, flat_input_specs, output_tensors):
  """The function of `graph_def` (bound by tensor names) with its datasets
  fed as their elements' `encode`d tensors; Unsupported as `unroll`."""
  graph_def, input_tensors = unroll(graph_def, input_tensors,
                                    flat_input_specs)

  def import_graph():
    tf.compat.v1.import_graph_def(graph_def, name='')

  wrapped = tf.compat.v1.wrap_function(import_graph, [])
  feeds = [wrapped.graph.get_tensor_by_name(n) for n in input_tensors]
  fetches = [wrapped.graph.get_tensor_by_name(n) for n in output_tensors]
  signature = tuple(tf.TensorSpec(t.shape, t.dtype) for t in feeds)
  return wrapped.prune(feeds, fetches, input_signature=(signature, {}))


def frozen_graph(concrete):
  """`(graph_def, input tensor names, output tensor names)` of a concrete
  function, its captured values frozen into constants: what `unroll`
  rewrites. Unsupported if it captures a resource."""
  graph = concrete.graph
  graph_def = graph.as_graph_def()
  captures = list(graph.captures)
  freeze_captures(graph_def, captures)
  inputs = concrete.inputs[:len(concrete.inputs) - len(captures)]
  outputs = tf.nest.flatten(concrete.structured_outputs)
  if not all(tf.is_tensor(o) for o in outputs):
    raise Unsupported('it returns a value that is not a tensor')
  return graph_def, [t.name for t in inputs], [t.name for t in outputs]


def freeze_captures(graph_def, captures):
  """Turns each captured value's placeholder in `graph_def` into a Const;
  Unsupported for a captured resource (a variable, a table)."""
  nodes = {node.name: node for node in graph_def.node}
  for external, internal in captures:
    if internal.dtype in (tf.resource, tf.variant) or not hasattr(
        external, 'numpy'):
      raise Unsupported(f'it captures {external!r} (a variable, table or '
                        'other resource)')
    node = nodes[internal.op.name]
    node.op = 'Const'
    del node.input[:]
    node.attr.clear()
    node.attr['dtype'].type = internal.dtype.as_datatype_enum
    node.attr['value'].tensor.CopyFrom(tf.make_tensor_proto(external.numpy()))


def unroll(graph_def, input_tensors, flat_input_specs):
  """`(graph_def', input_tensors')`: `graph_def` with every dataset input
  fed as its `encoding_specs` tensors, bound in `input_tensors'` in place of
  the dataset's one. Raises Unsupported when a dataset is used otherwise."""
  rewriter = _Rewriter(graph_def)
  new_inputs = []
  for name, spec in zip(input_tensors, flat_input_specs):
    if not isinstance(spec, tf.data.DatasetSpec):
      new_inputs.append(name)
      continue
    node_name, _ = _split_tensor_name(name)
    fed = rewriter.replace_placeholder(node_name, spec.element_spec)
    new_inputs.extend(f'{n}:0' for n in fed)
  return rewriter.result(), new_inputs


def _split_tensor_name(name):
  node, _, index = name.partition(':')
  return node, int(index or 0)


class _Scope:
  """A graph's or a function's nodes, and how their inputs name tensors."""

  def __init__(self, nodes, function=None):
    self.nodes = nodes  # A repeated NodeDef field, edited in place.
    self.function = function  # A FunctionDef, or None for the graph.

  def consumers(self, ref):
    """(node, input position) pairs reading the tensor `ref` (control
    dependencies on it only order its making, and go with it: `remove`)."""
    found = []
    for node in self.nodes:
      for position, name in enumerate(node.input):
        if name == ref or (self.function is None and ref.endswith(':0') and
                           name == ref[:-2]):
          found.append((node, position))
    if self.function is not None:
      for key, value in self.function.ret.items():
        if value == ref:
          raise Unsupported(f'the function returns a dataset ({key})')
    return found

  def output_ref(self, node, arg_name, index):
    if self.function is None:
      return node.name if index == 0 else f'{node.name}:{index}'
    return f'{node.name}:{arg_name}:{index}'

  def remove(self, node):
    name = node.name
    for i, candidate in enumerate(self.nodes):
      if candidate is node:
        del self.nodes[i]
        break
    for other in self.nodes:  # Waits for its making go with it.
      if '^' + name in other.input:
        kept = [i for i in other.input if i != '^' + name]
        del other.input[:]
        other.input.extend(kept)
    if self.function is not None and name in self.function.control_ret:
      del self.function.control_ret[name]
      outputs = [o for o in self.function.signature.control_output
                 if o != name]
      del self.function.signature.control_output[:]
      self.function.signature.control_output.extend(outputs)


class _Rewriter:

  def __init__(self, graph_def):
    self._graph = copy.deepcopy(graph_def)
    self._functions = {f.signature.name: f
                       for f in self._graph.library.function}
    self._top = _Scope(self._graph.node)
    self._count = 0
    self._tag = uuid.uuid4().hex[:12]

  def result(self):
    return self._graph

  def _fresh(self, stem):
    """A name no other function of this process has (a copy differs from
    its original, and TensorFlow refuses two functions of one name)."""
    self._count += 1
    return f'{stem}{_SUFFIX}_{self._tag}_{self._count}'

  def replace_placeholder(self, node_name, element_spec):
    specs = encoding_specs(element_spec)
    nodes = {n.name: n for n in self._graph.node}
    placeholder = nodes.get(node_name)
    if placeholder is None or placeholder.op != 'Placeholder':
      raise Unsupported(f'dataset input {node_name!r} is not a placeholder')
    names = []
    for spec in specs:
      node = self._graph.node.add(name=self._fresh(node_name),
                                  op='Placeholder')
      node.attr['dtype'].type = spec.dtype.as_datatype_enum
      node.attr['shape'].shape.CopyFrom(spec.shape.as_proto())
      names.append(node.name)
    refs = [f'{n}:0' for n in names]
    self._rewrite_uses(self._top, f'{node_name}:0', refs, element_spec,
                       specs)
    self._top.remove(placeholder)
    return names

  def _rewrite_uses(self, scope, ref, refs, element_spec, specs):
    """Every use of the dataset tensor `ref` in `scope`, fed `refs`."""
    uses = scope.consumers(ref)
    if not uses:
      return
    for node, position in uses:
      if node.op in _PASS_THROUGH:
        self._rewrite_uses(scope, scope.output_ref(node, 'output', 0), refs,
                           element_spec, specs)
        scope.remove(node)
      elif node.op in _CALLS:
        self._rewrite_call(scope, node, position, refs, element_spec, specs)
      elif node.op in _CHAIN_OPS or node.op == 'ReduceDataset':
        self._rewrite_chain(scope, node, refs, element_spec, specs)
      else:
        raise Unsupported(f'{node.name} ({node.op}) reads a dataset')

  def _rewrite_call(self, scope, node, position, refs, element_spec, specs):
    """A call passing the dataset: it calls a copy of its function that
    takes the tensors instead."""
    original = self._functions.get(node.attr['f'].func.name)
    if original is None:
      raise Unsupported(f'{node.name} calls a function not in the library')
    function = self._graph.library.function.add()
    function.CopyFrom(original)
    function.signature.name = self._fresh(original.signature.name)
    self._functions[function.signature.name] = function
    arg = function.signature.input_arg[position]
    if arg.type != tf.variant.as_datatype_enum:
      raise Unsupported(f'{node.name}: argument {position} is not a dataset')
    arg_names = [f'{arg.name}{_SUFFIX}_{i}' for i in range(len(specs))]
    new_args = [op_def_pb2.OpDef.ArgDef(name=name,
                                        type=spec.dtype.as_datatype_enum)
                for name, spec in zip(arg_names, specs)]
    args = list(function.signature.input_arg)
    del function.signature.input_arg[:]
    function.signature.input_arg.extend(
        args[:position] + new_args + args[position + 1:])
    _shift_indexed(function.arg_attr, position, len(specs), True)
    _shift_indexed(function.resource_arg_unique_id, position, len(specs),
                   False)
    for key in ('_input_shapes',):
      if key in function.attr:
        del function.attr[key]
    inputs = list(node.input)
    del node.input[:]
    node.input.extend(inputs[:position] + refs + inputs[position + 1:])
    types = list(node.attr['Tin'].list.type)
    node.attr['Tin'].list.type[:] = (
        types[:position] + [s.dtype.as_datatype_enum for s in specs] +
        types[position + 1:])
    node.attr['f'].func.name = function.signature.name
    self._rewrite_uses(_Scope(function.node_def, function), arg.name,
                       arg_names, element_spec, specs)

  def _rewrite_chain(self, scope, first, refs, element_spec, specs):
    """filter/map ... -> reduce, from `first`, replaced by one call of a
    function that loops over the elements."""
    chain, node = [], first
    while node.op in _CHAIN_OPS:
      chain.append(node)
      uses = scope.consumers(scope.output_ref(node, 'handle', 0))
      if len(uses) != 1 or uses[0][1] != 0:
        raise Unsupported(f'{node.name} ({node.op}) is used '
                          f'{len(uses)} times')
      node = uses[0][0]
    if node.op != 'ReduceDataset':
      raise Unsupported(f'{node.name} ({node.op}) reads a dataset')
    reduce = node
    loop = _LoopBuilder(self._functions, element_spec, specs,
                        self._fresh).build(
        chain, reduce)
    for function in loop.library.function:
      self._graph.library.function.add().CopyFrom(function)
      self._functions[function.signature.name] = (
          self._graph.library.function[-1])
    num_state = len(reduce.attr['Tstate'].list.type)
    inputs = list(refs) + list(reduce.input[1:1 + num_state])
    scans = [op for op in chain if op.op == 'ScanDataset']
    for op in scans:  # Their initial states.
      inputs.extend(op.input[1:1 + len(op.attr['Tstate'].list.type)])
    replaced = {op.name for op in chain + [reduce]}
    waits = []  # Control inputs, after the data ones; none on the chain.
    for op in chain + [reduce]:  # Their other arguments.
      start = 1 + len(op.attr['Tstate'].list.type)
      inputs.extend(i for i in op.input[start:] if not i.startswith('^'))
      waits.extend(i for i in op.input[start:] if i.startswith('^') and
                   i[1:] not in replaced and i not in waits)
    call = node_def_pb2.NodeDef(name=reduce.name,
                                op='StatefulPartitionedCall')
    call.input.extend(inputs + waits)
    call.attr['f'].func.name = loop.name
    call.attr['Tin'].list.type.extend(loop.input_types)
    call.attr['Tout'].list.type.extend(reduce.attr['Tstate'].list.type)
    for key in ('config', 'config_proto', 'executor_type'):
      call.attr[key].s = b''
    if scope.function is not None:
      old = f'{reduce.name}:components:'
      for other in scope.nodes:
        for i, name in enumerate(other.input):
          if name.startswith(old):
            other.input[i] = f'{reduce.name}:output:' + name[len(old):]
      for key, value in list(scope.function.ret.items()):
        if value.startswith(old):
          scope.function.ret[key] = f'{reduce.name}:output:' + value[len(old):]
    for op in chain:
      scope.remove(op)
    reduce.CopyFrom(call)  # In place: the function's control outputs name it.


def _shift_indexed(mapping, position, width, messages):
  """Re-keys an index-keyed map of a function's arguments after argument
  `position` became `width` arguments (its own entry is dropped)."""
  items = {k: (copy.deepcopy(v) if messages else v) for k, v in mapping.items()}
  for key in list(mapping.keys()):
    del mapping[key]
  for key, value in items.items():
    if key == position:
      continue
    new = key if key < position else key + width - 1
    if messages:
      mapping[new].CopyFrom(value)
    else:
      mapping[new] = value


def _shapes(node, key):
  return [tf.TensorShape(s) for s in node.attr[key].list.shape]


def _types(node, key):
  return [tf.dtypes.as_dtype(t) for t in node.attr[key].list.type]


class _Loop:
  """A traced loop function: its name, input dtypes and library."""

  def __init__(self, name, input_types, library):
    self.name, self.input_types, self.library = name, input_types, library


class _LoopBuilder:
  """Traces `loop(encoded elements, state, other arguments)`, calling
  stand-ins of the chain's functions, then points the calls at the real
  ones (stand-ins keep their exact signatures)."""

  def __init__(self, functions, element_spec, specs, fresh):
    self._functions = functions
    self._fresh = fresh
    self._element_spec = element_spec
    self._specs = specs

  def _stand_in(self, function_name, input_types, output_types,
                output_shapes):
    """A tf.function of the signature of library function `function_name`
    (types from its node's attrs) returning placeholders of its outputs."""
    fdef = self._functions.get(function_name)
    if fdef is None:
      raise Unsupported(f'function {function_name!r} is not in the library')
    declared = [tf.dtypes.as_dtype(a.type) for a in fdef.signature.input_arg]
    if declared != list(input_types):
      raise Unsupported(f'{function_name}: takes {declared}, called with '
                        f'{list(input_types)}')

    def stand_in(*args):
      del args
      return [tf.compat.v1.placeholder_with_default(
          tf.zeros([d or 0 for d in shape] if shape.rank is not None
                   else [], dtype), shape)
              for dtype, shape in zip(output_types, output_shapes)]

    traced = tf.function(stand_in, input_signature=[
        tf.TensorSpec(None, t) for t in input_types], autograph=False)
    return traced

  def build(self, chain, reduce):
    """The loop carries the reduce's state, then each scan's."""
    types = [s.dtype for s in tf.nest.flatten(self._element_spec)]
    state_types = _types(reduce, 'Tstate')
    state_shapes = _shapes(reduce, 'output_shapes')
    scan_types, scan_shapes = [], []
    stand_ins, steps = {}, []
    for position, op in enumerate(chain + [reduce]):
      kind = op.op
      if kind == 'RepeatDataset':  # Its one input: the count.
        if any(o.op == 'ScanDataset' for o in chain[:position]):
          raise Unsupported(f'{op.name}: a scan before a repeat')
        steps.append((kind, None, 1, 0))
        continue
      others = _types(op, 'Targuments')
      function_name = op.attr[_CHAIN_OPS.get(kind, 'f')].func.name
      out_types, out_shapes = [], []
      if kind in ('MapDataset', 'ScanDataset'):
        out_types, out_shapes = _types(op, 'output_types'), _shapes(
            op, 'output_shapes')
      if kind == 'FilterDataset':
        traced = self._stand_in(function_name, types + others, [tf.bool],
                                [tf.TensorShape([])])
        steps.append((kind, traced, len(others), 0))
      elif kind == 'MapDataset':
        traced = self._stand_in(function_name, types + others, out_types,
                                out_shapes)
        steps.append((kind, traced, len(others), 0))
      elif kind == 'ScanDataset':
        own = _types(op, 'Tstate')
        unknown = [tf.TensorShape(None)] * len(own)
        traced = self._stand_in(function_name, own + types + others,
                                own + out_types, unknown + out_shapes)
        # Its state's place in the loop's: after the reduce's and earlier
        # scans'.
        steps.append((kind, traced, len(others),
                      (len(state_types) + len(scan_types), len(own))))
        scan_types += own
        scan_shapes += unknown
      else:
        traced = self._stand_in(function_name, state_types + types + others,
                                state_types, state_shapes)
        steps.append((kind, traced, len(others), 0))
      stand_ins[function_name] = traced
      if out_types:
        types = out_types
    other_types = [t for op in chain + [reduce]
                   for t in (_types(op, 'Targuments')
                             if op.op != 'RepeatDataset' else [tf.int64])]
    carried_types = state_types + scan_types
    carried_shapes = state_shapes + scan_shapes
    input_specs = (list(self._specs) +
                   [tf.TensorSpec(s, t)
                    for s, t in zip(carried_shapes, carried_types)] +
                   [tf.TensorSpec(None, t) for t in other_types])
    element_spec = self._element_spec
    num_encoded, num_carried = len(self._specs), len(carried_types)
    num_state = len(state_types)

    def loop(*args):
      encoded = args[:num_encoded]
      carried = list(args[num_encoded:num_encoded + num_carried])
      others = list(args[num_encoded + num_carried:])
      step_others, start = [], 0
      for _, _, count, _ in steps:
        step_others.append(others[start:start + count])
        start += count
      elements = _element_count(element_spec, encoded)
      count = elements
      for (kind, _, _, _), repeat in zip(steps, step_others):
        if kind == 'RepeatDataset':  # Each repetition reads them again.
          endless = tf.logical_and(repeat[0] < 0, elements > 0)
          with tf.control_dependencies([tf.debugging.Assert(
              tf.logical_not(endless),
              ['an endless repeat() of a non-empty dataset'])]):
            count = count * tf.where(elements > 0, repeat[0], 0)

      def body(i, *carried):
        element = _element(element_spec, encoded, i % elements)
        new = _apply(steps, step_others, element, list(carried), num_state)
        return [i + 1] + [tf.convert_to_tensor(s) for s in new]

      result = tf.while_loop(
          lambda i, *_: i < count, body, [tf.constant(0, tf.int64)] + carried,
          shape_invariants=[tf.TensorShape([])] + carried_shapes,
          parallel_iterations=1)
      return result[1:1 + num_state]

    traced = tf.function(loop, input_signature=input_specs,
                         autograph=False).get_concrete_function()
    real = {_name(f.get_concrete_function()): name
            for name, f in stand_ins.items()}
    library = traced.graph.as_graph_def().library
    library.function.add().CopyFrom(traced.function_def)
    functions = [f for f in library.function if f.signature.name not in real]
    renamed = {f.signature.name: self._fresh(f.signature.name)
               for f in functions}
    for fdef in functions:
      fdef.signature.name = renamed[fdef.signature.name]
      for node in fdef.node_def:
        node.op = _STATEFUL.get(node.op, node.op)  # It calls real functions.
        for value in node.attr.values():
          for func in [value.func] + list(value.list.func):
            if func.name in real:
              func.name = real[func.name]
            elif func.name in renamed:
              func.name = renamed[func.name]
    del library.function[:]
    library.function.extend(functions)
    return _Loop(renamed[traced.function_def.signature.name],
                 [s.dtype.as_datatype_enum for s in input_specs], library)


def _name(concrete):
  name = concrete.function_def.signature.name
  return name.decode() if isinstance(name, bytes) else name


def _element_count(element_spec, encoded):
  spec = tf.nest.flatten(element_spec)[0]
  if spec.shape.rank == 0:
    return tf.shape(encoded[0], out_type=tf.int64)[0]
  return tf.shape(encoded[1], out_type=tf.int64)[0] - 1


def _element(element_spec, encoded, i):
  """Element `i` of the encoded elements, as flat tensors of the spec's
  shapes."""
  flat, position = [], 0
  for spec in tf.nest.flatten(element_spec):
    if spec.shape.rank == 0:
      flat.append(encoded[position][i])
      position += 1
      continue
    values, splits = encoded[position], encoded[position + 1]
    position += 2
    value = values[splits[i]:splits[i + 1]]
    flat.append(tf.ensure_shape(value, spec.shape)
                if spec.shape[0] is not None else value)
  return flat


def _apply(steps, step_others, element, carried, num_state):
  """The chain's steps on one element: the loop's new carried state (the
  reduce's, then each scan's); unchanged where a filter drops the element."""
  (kind, function, _, place), rest = steps[0], steps[1:]
  others, rest_others = step_others[0], step_others[1:]
  if kind == 'FilterDataset':
    keep = tf.reshape(function(*element, *others)[0], [])
    return tf.cond(
        keep,
        lambda: list(_apply(rest, rest_others, element, carried, num_state)),
        lambda: list(carried))
  if kind == 'MapDataset':
    return _apply(rest, rest_others, list(function(*element, *others)),
                  carried, num_state)
  if kind == 'RepeatDataset':
    return _apply(rest, rest_others, element, carried, num_state)
  if kind == 'ScanDataset':
    first, width = place
    outputs = list(function(*carried[first:first + width], *element,
                            *others))
    carried = carried[:first] + outputs[:width] + carried[first + width:]
    return _apply(rest, rest_others, outputs[width:], carried, num_state)
  return (list(function(*carried[:num_state], *element, *others)) +
          carried[num_state:])
