"""In-place edits of GraphDef and FunctionDef protos that the variable
lowering is made of, and the clean-up after it: kept apart from the walk
that decides what to edit."""

import copy

from tensorflow.core.framework import attr_value_pb2
from tensorflow.core.framework import op_def_pb2
from tensorflow.python.framework import op_def_registry

from canonical.core.local_variables_errors import Unsupported


def _type_attr(dtype):
  return attr_value_pb2.AttrValue(type=dtype)


def _int_attr(value):
  return attr_value_pb2.AttrValue(i=value)


class _Scope:
  """The graph's nodes or one function's, and how their inputs name
  tensors ('node:index' in a graph, 'node:output_arg:index' in a function,
  an argument's name for a function's argument)."""

  def __init__(self, nodes, function=None):
    self.nodes = nodes  # A repeated NodeDef field, edited in place.
    self.function = function

  def ref(self, node_name, arg, index):
    if self.function is None:
      return node_name if index == 0 else f'{node_name}:{index}'
    return f'{node_name}:{arg}:{index}'

  def canonical(self, ref):
    if self.function is None and ':' not in ref:
      return ref + ':0'
    return ref

  def producer(self, ref):
    """The node name a (data or control) input comes from; None for a
    function's argument."""
    ref = ref.lstrip('^')
    if self.function is not None and ':' not in ref:
      return None if ref in self._arg_names() else ref
    return ref.split(':')[0]

  def _arg_names(self):
    return {a.name for a in self.function.signature.input_arg}

  def add(self, name, op, inputs, attrs):
    node = self.nodes.add(name=self.unique(name), op=op)
    node.input.extend(inputs)
    for key, value in attrs.items():
      node.attr[key].CopyFrom(value)
    return node

  def unique(self, stem):
    names = {n.name for n in self.nodes}
    name, count = stem, 0
    while name in names:
      count += 1
      name = f'{stem}_{count}'
    return name

  def rename_output(self, node_name, old_arg, new_arg):
    """References to `node_name`'s output `old_arg` now read `new_arg`
    (functions name outputs by their op's argument names)."""
    if self.function is None or old_arg == new_arg:
      return
    old = f'{node_name}:{old_arg}:'
    new = f'{node_name}:{new_arg}:'
    for node in self.nodes:
      for i, name in enumerate(node.input):
        if name.startswith(old):
          node.input[i] = new + name[len(old):]
    for key, value in list(self.function.ret.items()):
      if value.startswith(old):
        self.function.ret[key] = new + value[len(old):]

  def topological(self):
    """The nodes, each after its inputs; ties in their original order."""
    index = {node.name: i for i, node in enumerate(self.nodes)}
    waiting = {}
    users = {}
    for node in self.nodes:
      producers = {self.producer(r) for r in node.input} - {None}
      producers &= index.keys()
      waiting[node.name] = len(producers)
      for p in producers:
        users.setdefault(p, []).append(node.name)
    ready = sorted(index[n] for n, count in waiting.items() if count == 0)
    order = []
    import heapq  # pylint: disable=import-outside-toplevel
    heapq.heapify(ready)
    nodes = list(self.nodes)
    while ready:
      node = nodes[heapq.heappop(ready)]
      order.append(node)
      for user in users.get(node.name, ()):
        waiting[user] -= 1
        if waiting[user] == 0:
          heapq.heappush(ready, index[user])
    if len(order) != len(nodes):
      raise Unsupported('the graph has a cycle')
    return order


# Marks a node `_become` made: a pure op now, that nothing needs to wait for.
_LOWERED = '_lowered_variable_op'


def _become(node, op, data_inputs, attrs):
  """Turns `node` into an `op` node of the same name (its control inputs
  kept, so what it was ordered with it still is)."""
  controls = [i for i in node.input if i.startswith('^')]
  name, device = node.name, node.device
  node.Clear()
  node.name, node.op, node.device = name, op, device
  node.input.extend(list(data_inputs) + controls)
  for key, value in attrs.items():
    node.attr[key].CopyFrom(value)
  node.attr[_LOWERED].b = True


def _drop_waits_for_lowered(nodes, function=None):
  """Control dependencies on lowered ops go: they ordered reads and writes
  of a variable, which data edges order now; kept, they would also force
  values nothing reads (a variable's initial value that the next assignment
  replaces) to be computed."""
  lowered = set()
  for node in nodes:
    # Not attr.pop(_LOWERED, None): protobuf's (upb) map gives an empty
    # AttrValue for a missing key there, not the default.
    if _LOWERED in node.attr:
      del node.attr[_LOWERED]
      lowered.add(node.name)
  if not lowered:
    return
  for node in nodes:
    kept = [i for i in node.input
            if not (i.startswith('^') and i[1:] in lowered)]
    if len(kept) != len(node.input):
      del node.input[:]
      node.input.extend(kept)
  if function is not None:
    for name in lowered & set(function.control_ret):
      del function.control_ret[name]
    outputs = [o for o in function.signature.control_output
               if o not in lowered]
    del function.signature.control_output[:]
    function.signature.control_output.extend(outputs)
  _bypass_identities([n for n in nodes if n.name in lowered], nodes,
                     function)


def _bypass_identities(lowered, nodes, function):
  """Readers of a lowered `Identity` (a read or an assignment, now) read its
  input instead; the identity is then dead (`_drop_dead`)."""
  scope = _Scope(nodes, function)
  source = {}
  for node in lowered:
    if node.op == 'Identity':
      source[scope.canonical(scope.ref(node.name, 'output', 0))] = (
          _data_inputs(node)[0])

  def resolved(ref):
    seen = 0
    while scope.canonical(ref) in source and seen < len(source):
      ref, seen = source[scope.canonical(ref)], seen + 1
    return ref

  if not source:
    return
  for node in nodes:
    for i, ref in enumerate(node.input):
      if not ref.startswith('^'):
        node.input[i] = resolved(ref)
  if function is not None:
    for key, ref in list(function.ret.items()):
      function.ret[key] = resolved(ref)


def _stateful(node):
  """Whether `node` may not be dropped when nothing reads it: a stateful op,
  a call of a function by name, or an op this TensorFlow does not know."""
  op_def = op_def_registry.get(node.op)
  return op_def is None or op_def.is_stateful


def _drop_dead(nodes, roots, keep):
  """Drops the nodes that neither `roots` (node names) nor a node `keep`s
  needs: lowering leaves values behind that nothing reads any more (an
  initial value the next assignment replaced), which TensorFlow would
  otherwise carry into every instantiation of the function."""
  by_name = {node.name: node for node in nodes}
  stack = [r for r in roots if r in by_name]
  stack += [node.name for node in nodes if keep(node)]
  live = set()
  while stack:
    name = stack.pop()
    if name in live:
      continue
    live.add(name)
    for ref in by_name[name].input:
      producer = ref.lstrip('^').split(':')[0]
      if producer in by_name and producer not in live:
        stack.append(producer)
  if len(live) == len(nodes):
    return
  kept = [node for node in nodes if node.name in live]
  del nodes[:]
  nodes.extend(kept)


def _data_inputs(node):
  return [i for i in node.input if not i.startswith('^')]


def _add_component(node, var):
  node.attr['output_types'].list.type.append(var.dtype)
  node.attr['output_shapes'].list.shape.add().CopyFrom(var.shape)


def _unique_arg_name(function, stem):
  names = ({a.name for a in function.signature.input_arg} |
           {a.name for a in function.signature.output_arg} |
           {n.name for n in function.node_def})
  name, count = stem, 0
  while name in names:
    count += 1
    name = f'{stem}_{count}'
  return name


def _insert_input(function, index, stem, dtype):
  """A new argument at `index` of `function`; returns its name."""
  name = _unique_arg_name(function, stem)
  args = list(function.signature.input_arg)
  args.insert(index, op_def_pb2.OpDef.ArgDef(name=name, type=dtype))
  del function.signature.input_arg[:]
  function.signature.input_arg.extend(args)
  _shift(function.arg_attr, index, messages=True)
  _shift(function.resource_arg_unique_id, index, messages=False)
  return name


def _shift(mapping, index, messages):
  items = {k: (copy.deepcopy(v) if messages else v)
           for k, v in mapping.items()}
  mapping.clear()
  for key, value in items.items():
    new = key + 1 if key >= index else key
    if messages:
      mapping[new].CopyFrom(value)
    else:
      mapping[new] = value


def _insert_output(function, index, stem, dtype, ref):
  name = _unique_arg_name(function, stem)
  outputs = list(function.signature.output_arg)
  outputs.insert(index, op_def_pb2.OpDef.ArgDef(name=name, type=dtype))
  del function.signature.output_arg[:]
  function.signature.output_arg.extend(outputs)
  function.ret[name] = ref


def _reorder_arguments(function, original, order):
  """`function` (a copy of `original`) taking its arguments in `order`."""
  args = list(original.signature.input_arg)
  del function.signature.input_arg[:]
  function.signature.input_arg.extend(args[i] for i in order)
  function.arg_attr.clear()
  function.resource_arg_unique_id.clear()
  for new, old in enumerate(order):
    if old in original.arg_attr:
      function.arg_attr[new].CopyFrom(original.arg_attr[old])
    if old in original.resource_arg_unique_id:
      function.resource_arg_unique_id[new] = (
          original.resource_arg_unique_id[old])


def _ident(name):
  return ''.join(c if c.isalnum() else '_' for c in name).lower() or 'v'
