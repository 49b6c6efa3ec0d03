"""Step 2 of the call-local variable pass: the rewrite of a traced
GraphDef that follows each variable's resource through its graph and
functions, threading the variable's value instead."""

import copy
import dataclasses
import uuid

from tensorflow.core.framework import attr_value_pb2
from tensorflow.core.framework import types_pb2

from canonical.core.local_variables_errors import Unsupported
from canonical.core.local_variables_graph import _LOWERED
from canonical.core.local_variables_graph import _Scope
from canonical.core.local_variables_graph import _add_component
from canonical.core.local_variables_graph import _become
from canonical.core.local_variables_graph import _data_inputs
from canonical.core.local_variables_graph import _drop_dead
from canonical.core.local_variables_graph import _drop_waits_for_lowered
from canonical.core.local_variables_graph import _ident
from canonical.core.local_variables_graph import _insert_input
from canonical.core.local_variables_graph import _insert_output
from canonical.core.local_variables_graph import _reorder_arguments
from canonical.core.local_variables_graph import _stateful
from canonical.core.local_variables_graph import _type_attr
from canonical.core.local_variables_ops import _SIMPLE

_RESOURCE = types_pb2.DT_RESOURCE
_CALLS = ('PartitionedCall', 'StatefulPartitionedCall')
_WHILES = ('While', 'StatelessWhile')
_IFS = ('If', 'StatelessIf')
_CASES = ('Case', 'StatelessCase')
# Dataset transformations a variable may pass through on its way to a
# `ReduceDataset` (what `dataset.reduce` and AutoGraph's `for x in dataset`
# make), with the attr naming their function.
_CHAIN = {'ScanDataset': 'f', 'MapDataset': 'f', 'FilterDataset': 'predicate',
          'TakeWhileDataset': 'predicate'}
_SUFFIX = '_lowered'


@dataclasses.dataclass(frozen=True, eq=False)  # One per variable.
class _Variable:
  """What the rewrite knows of a variable: its name, dtype and shape."""
  name: str
  dtype: int  # a types_pb2 enum
  shape: object  # a TensorShapeProto


class _Lowering:
  """One rewrite of a GraphDef: its variables' ops made into values."""

  def __init__(self, graph_def, where):
    self.graph = copy.deepcopy(graph_def)
    self.functions = {f.signature.name: f for f in self.graph.library.function}
    self.where = where  # (node type, node name) -> Location or None
    self._tag = uuid.uuid4().hex[:12]
    self._count = 0
    self._initial = {}  # function name -> {variable: its given value's ref}

  def _fresh(self, stem):
    self._count += 1
    return f'{stem}{_SUFFIX}_{self._tag}_{self._count}'

  def refuse(self, node, text):
    location = self.where(node.op, node.name)
    at = f' (at {location})' if location else ''
    raise Unsupported(f'op {node.name!r} ({node.op}){at} {text}')

  def run(self, outputs):
    """The rewritten GraphDef; `outputs` are the node names of its
    results."""
    scope = _Scope(self.graph.node)
    sources = {}
    handles = [n for n in self.graph.node if n.op == 'VarHandleOp']
    for node in handles:
      name = node.attr['debug_name'].s.decode() or node.name
      sources[f'{node.name}:0'] = (_Variable(name, node.attr['dtype'].type,
                                             node.attr['shape'].shape), None)
    self._lower_scope(scope, sources)
    for node in handles:
      _become(node, 'NoOp', [], {})
    for node in self.graph.node:
      node.attr.pop('_class', None)  # Colocation with handles now gone.
    self._prune_library()
    self._rename_originals()
    _drop_waits_for_lowered(self.graph.node)
    _drop_dead(self.graph.node, outputs,
               lambda node: node.op == 'Placeholder' or _stateful(node))
    for function in self.graph.library.function:
      _drop_waits_for_lowered(function.node_def, function)
      roots = [ref.split(':')[0] for ref in function.ret.values()]
      _drop_dead(function.node_def, roots + list(function.control_ret.values()),
                 _stateful)
    self.functions = {f.signature.name: f for f in self.graph.library.function}
    self._prune_library()
    return self.graph

  def _prune_library(self):
    """Only the functions the graph still calls: the originals that took
    variables are left out."""
    needed, stack = set(), []

    def visit(nodes):
      for node in nodes:
        if node.op in self.functions and node.op not in needed:
          needed.add(node.op)  # A function called by name, as an op.
          stack.append(node.op)
        for value in node.attr.values():
          for func in [value.func] + list(value.list.func):
            if func.name and func.name not in needed:
              needed.add(func.name)
              stack.append(func.name)

    visit(self.graph.node)
    while stack:
      function = self.functions.get(stack.pop())
      if function is not None:
        visit(function.node_def)
    kept = [f for f in self.graph.library.function
            if f.signature.name in needed]
    del self.graph.library.function[:]
    self.graph.library.function.extend(kept)

  def _rename_originals(self):
    """The functions the rewrite left as they were get fresh names too:
    imported again, TensorFlow re-encodes them, and the runtime refuses two
    different definitions of one name (the originals are registered)."""
    renamed = {}
    for function in self.graph.library.function:
      name = function.signature.name
      if f'{_SUFFIX}_{self._tag}_' not in name:
        renamed[name] = self._fresh(name)
        function.signature.name = renamed[name]
    nodes = list(self.graph.node)
    for function in self.graph.library.function:
      nodes.extend(function.node_def)
    for node in nodes:
      if node.op in renamed:  # A function called by name as an op.
        node.op = renamed[node.op]
      for value in node.attr.values():
        for func in [value.func] + list(value.list.func):
          if func.name in renamed:
            func.name = renamed[func.name]
    for function in self.graph.library.function:
      for key, value in function.attr.items():
        for func in [value.func] + list(value.list.func):
          if func.name in renamed:
            func.name = renamed[func.name]
    gradients = list(self.graph.library.gradient)
    del self.graph.library.gradient[:]
    for gradient in gradients:
      if gradient.function_name in renamed:
        gradient.function_name = renamed[gradient.function_name]
        gradient.gradient_func = renamed.get(gradient.gradient_func,
                                             gradient.gradient_func)
        self.graph.library.gradient.add().CopyFrom(gradient)

  # The walk over one scope.

  def _lower_scope(self, scope, sources):
    """Rewrites `scope`'s uses of the resources `sources` ({canonical ref:
    (variable, initial value ref or None)}); returns ({variable: final
    value ref}, {canonical resource ref: variable})."""
    tracked = {ref: var for ref, (var, _) in sources.items()}
    current = {}
    for var, initial in sources.values():
      current.setdefault(var, initial)
    for node in scope.topological():
      if _LOWERED in node.attr:  # Made by this rewrite: no variable in it.
        continue
      uses = [(i, tracked[scope.canonical(r)])
              for i, r in enumerate(node.input)
              if not r.startswith('^') and scope.canonical(r) in tracked]
      if uses:
        self._lower_node(scope, node, uses, current, tracked)
    return current, tracked

  def value(self, node, var, current):
    """`var`'s current value where `node` uses it."""
    value = current.get(var)
    if value is None:
      self.refuse(node, f'reads variable {var.name!r} before it is '
                  'initialized')
    return value

  def _lower_node(self, scope, node, uses, current, tracked):
    op = node.op
    if op in _CALLS:
      return self._lower_call(scope, node, uses, current, tracked)
    if op in _WHILES:
      return self._lower_while(scope, node, uses, current, tracked)
    if op in _IFS or op in _CASES:
      return self._lower_branches(scope, node, uses, current, tracked)
    if op == 'ReduceDataset':
      return self._lower_reduce(scope, node, uses, current)
    if op in _CHAIN:
      return self._lower_transformation(scope, node, uses, current, tracked)
    if op == 'Identity':  # Another name for the same handle.
      tracked[scope.canonical(scope.ref(node.name, 'output', 0))] = uses[0][1]
      _become(node, 'NoOp', [], {})
      return None
    if len(uses) != 1:
      self.refuse(node, 'takes call-local variables as several inputs')
    var = uses[0][1]
    (position, _), = uses
    lowering = _SIMPLE.get(op)
    if lowering is None:
      if op.endswith('Dataset') or op.startswith('Dataset'):
        self.refuse(node, f'uses call-local variable {var.name!r} in a '
                    'dataset transformation: it would run lazily, when the '
                    'dataset is read. Use the variable in dataset.reduce or '
                    'in a for loop over the dataset.')
      self.refuse(node, f'uses call-local variable {var.name!r}; this op '
                  'is not one the variable lowering knows (see canonical/'
                  'core/local_variables.py).')
    if position != 0:
      self.refuse(node, f'takes variable {var.name!r} as its input '
                  f'{position}')
    new_value = lowering(self, scope, node, var, current)
    if new_value is not None:
      current[var] = new_value
    return None

  # Calls, loops, branches and reductions: the value goes in and comes out.

  def _function_copy(self, name, positions, order=None):
    """A fresh copy of function `name` whose arguments at `positions`
    ({index: variable}) take the variables' values, lowered; returns (copy,
    final values, tracked refs). With `order` (old indices), the copy takes
    its arguments in that order (`positions` index the new one)."""
    original = self.functions.get(name)
    if original is None:
      raise Unsupported(f'function {name!r} is not in the graph\'s library')
    function = self.graph.library.function.add()
    function.CopyFrom(original)
    function.signature.name = self._fresh(name)
    self.functions[function.signature.name] = function
    if order is not None:
      _reorder_arguments(function, original, order)
    scope = _Scope(function.node_def, function)
    sources, initial = {}, {}
    for position, var in positions.items():
      arg = function.signature.input_arg[position]
      arg.type = var.dtype
      del arg.handle_data[:]
      if position in function.arg_attr:
        for key in ('_handle_dtypes', '_handle_shapes', '_output_shapes'):
          function.arg_attr[position].attr.pop(key, None)
      function.resource_arg_unique_id.pop(position, None)
      if var not in initial:
        # The value goes by another name than the argument, which still
        # names the variable to the ops being rewritten.
        value = scope.add(f'{arg.name}_value', 'Identity', [arg.name],
                          {'T': _type_attr(var.dtype),
                           _LOWERED: attr_value_pb2.AttrValue(b=True)})
        initial[var] = scope.ref(value.name, 'output', 0)
      sources[arg.name] = (var, initial[var])
    function.attr.pop('_input_shapes', None)
    self._initial[function.signature.name] = initial
    finals, tracked = self._lower_scope(scope, sources)
    return function, finals, tracked

  def _writes(self, function, var, finals):
    """Whether lowered copy `function` writes `var` (its final value is not
    the one it was given)."""
    return finals[var] != self._initial[function.signature.name][var]

  @staticmethod
  def _add_output(function, stem, var, ref):
    names = {a.name for a in function.signature.output_arg}
    name, count = stem, 0
    while name in names:
      count += 1
      name = f'{stem}_{count}'
    function.signature.output_arg.add(name=name, type=var.dtype)
    function.ret[name] = ref

  @staticmethod
  def _resource_outputs(function, tracked, finals):
    """Outputs returning a lowered variable return its value now:
    {output index: variable}."""
    found = {}
    scope = _Scope(function.node_def, function)
    for index, arg in enumerate(function.signature.output_arg):
      if arg.type != _RESOURCE:
        continue
      var = tracked.get(scope.canonical(function.ret[arg.name]))
      if var is not None:
        arg.type = var.dtype
        function.ret[arg.name] = finals[var]
        found[index] = var
    return found

  def _lower_call(self, scope, node, uses, current, tracked):
    positions = {i: var for i, var in uses}
    for i, var in positions.items():
      node.input[i] = self.value(node, var, current)
      node.attr['Tin'].list.type[i] = var.dtype
    function, finals, inner = self._function_copy(node.attr['f'].func.name,
                                                  positions)
    outputs = node.attr['Tout'].list.type
    for index, var in self._resource_outputs(function, inner, finals).items():
      outputs[index] = var.dtype
      tracked[scope.canonical(scope.ref(node.name, 'output', index))] = var
    for var in dict.fromkeys(positions.values()):
      if self._writes(function, var, finals):  # It returns the new value.
        self._add_output(function, f'{_ident(var.name)}_value', var,
                         finals[var])
        current[var] = scope.ref(node.name, 'output', len(outputs))
        outputs.append(var.dtype)
    node.attr['f'].func.name = function.signature.name
    node.attr.pop('_read_only_resource_inputs', None)

  def _lower_while(self, scope, node, uses, current, tracked):
    positions = {i: var for i, var in uses}
    cond, cond_finals, _ = self._function_copy(node.attr['cond'].func.name,
                                               positions)
    for i, var in positions.items():
      if self._writes(cond, var, cond_finals):
        self.refuse(node, f'writes variable {var.name!r} in a while '
                    'loop\'s condition')
    body, finals, in_body = self._function_copy(node.attr['body'].func.name,
                                                positions)
    body_scope = _Scope(body.node_def, body)
    for i, var in positions.items():
      out = body.signature.output_arg[i]
      if in_body.get(body_scope.canonical(body.ret[out.name])) != var:
        self.refuse(node, f'does not carry variable {var.name!r} through '
                    'its loop unchanged')
      out.type = var.dtype
      body.ret[out.name] = finals[var]
      node.input[i] = self.value(node, var, current)
      node.attr['T'].list.type[i] = var.dtype
      node.attr['output_shapes'].list.shape[i].CopyFrom(var.shape)
      current[var] = scope.ref(node.name, 'output', i)
      # The handle the loop passed on, used after it (by a gradient, say).
      tracked[scope.canonical(current[var])] = var
    node.attr['cond'].func.name = cond.signature.name
    node.attr['body'].func.name = body.signature.name
    node.attr.pop('_read_only_resource_inputs', None)

  def _lower_branches(self, scope, node, uses, current, tracked):
    """If / Case: input 0 picks the branch; the others are its arguments."""
    positions = {i - 1: var for i, var in uses if i > 0}
    if len(positions) != len(uses):
      self.refuse(node, 'branches on a variable\'s handle')
    key = 'branches' if node.op in _CASES else None
    names = ([f.name for f in node.attr['branches'].list.func] if key else
             [node.attr['then_branch'].func.name,
              node.attr['else_branch'].func.name])
    copies = [self._function_copy(name, positions) for name in names]
    outputs = node.attr['Tout'].list.type
    shapes = node.attr['output_shapes'].list.shape
    resource_outputs = [self._resource_outputs(f, t, finals)
                        for f, finals, t in copies]
    if any(r != resource_outputs[0] for r in resource_outputs):
      self.refuse(node, 'returns different variables from its branches')
    for index, var in resource_outputs[0].items():
      outputs[index] = var.dtype
      tracked[scope.canonical(scope.ref(node.name, 'output', index))] = var
    for i, var in positions.items():
      node.input[i + 1] = self.value(node, var, current)
      node.attr['Tin'].list.type[i] = var.dtype
    for var in dict.fromkeys(positions.values()):
      for function, finals, _ in copies:
        self._add_output(function, f'{_ident(var.name)}_value', var,
                         finals[var])
      current[var] = scope.ref(node.name, 'output', len(outputs))
      outputs.append(var.dtype)
      if len(shapes) == len(outputs) - 1:
        shapes.add().CopyFrom(var.shape)
    if key:
      for func, (function, _, _) in zip(node.attr['branches'].list.func,
                                        copies):
        func.name = function.signature.name
    else:
      node.attr['then_branch'].func.name = copies[0][0].signature.name
      node.attr['else_branch'].func.name = copies[1][0].signature.name
    node.attr.pop('_read_only_resource_inputs', None)

  def _lower_reduce(self, scope, node, uses, current):
    """dataset.reduce: each variable joins the reduce's state."""
    num_state = len(node.attr['Tstate'].list.type)
    inputs = _data_inputs(node)
    controls = [i for i in node.input if i.startswith('^')]
    others = inputs[1 + num_state:]
    first_other = 1 + num_state
    moved = {}  # position among the other arguments -> variable
    for i, var in uses:
      if i < first_other:
        self.refuse(node, 'reduces a variable\'s handle as its state')
      moved[i - first_other] = var
    if len(set(moved.values())) != len(moved):
      self.refuse(node, 'takes the same variable twice')
    original = self.functions[node.attr['f'].func.name]
    num_args = len(original.signature.input_arg)
    num_elements = num_args - num_state - len(others)
    # The function's arguments: state, the variables' values (new state),
    # the element's components, the other arguments left.
    other_args = list(range(num_state + num_elements, num_args))
    order = (list(range(num_state)) +
             [other_args[q] for q in moved] +
             list(range(num_state, num_state + num_elements)) +
             [a for q, a in enumerate(other_args) if q not in moved])
    function, finals, _ = self._function_copy(
        node.attr['f'].func.name,
        {num_state + k: var for k, var in enumerate(moved.values())}, order)
    for var in moved.values():
      self._add_output(function, f'{_ident(var.name)}_value', var,
                       finals[var])
    values = [self.value(node, var, current) for var in moved.values()]
    new_inputs = (inputs[:first_other] + values +
                  [o for q, o in enumerate(others) if q not in moved])
    del node.input[:]
    node.input.extend(new_inputs + controls)
    arguments = node.attr['Targuments'].list.type
    kept = [t for q, t in enumerate(arguments) if q not in moved]
    del arguments[:]
    arguments.extend(kept)
    for k, var in enumerate(moved.values()):
      node.attr['Tstate'].list.type.append(var.dtype)
      node.attr['output_types'].list.type.append(var.dtype)
      node.attr['output_shapes'].list.shape.add().CopyFrom(var.shape)
      current[var] = scope.ref(node.name, 'components', num_state + k)
    node.attr['f'].func.name = function.signature.name


  # Dataset transformations: they run while the reduce reads the dataset.

  def _lower_transformation(self, scope, node, uses, current, tracked):
    """A map, filter, take_while or scan whose function uses variables. One
    that only reads a variable takes its value (the reduce that reads the
    dataset is the next op on it: automatic control dependencies order it
    so). A scan that writes one carries its value in the scan's state, and
    every element carries it on to the reduce, whose state then ends with
    the value after the last element."""
    del uses  # Found again after each variable: the inputs move.
    attr = _CHAIN[node.op]
    while True:
      num_state = len(node.attr['Tstate'].list.type) if (
          node.op == 'ScanDataset') else 0
      first_other = 1 + num_state
      by_var = {}
      for i, ref in enumerate(_data_inputs(node)):
        var = tracked.get(scope.canonical(ref))
        if var is None:
          continue
        if i < first_other:
          self.refuse(node, f'takes variable {var.name!r} as its dataset '
                      'or state')
        by_var.setdefault(var, []).append(i - first_other)
      if not by_var:
        return
      var, places = next(iter(by_var.items()))
      name = node.attr[attr].func.name
      num_args = len(self.functions[name].signature.input_arg)
      num_others = len(node.attr['Targuments'].list.type)
      arg_positions = {num_args - num_others + q: var for q in places}
      function, finals, _ = self._function_copy(name, arg_positions)
      writes = self._writes(function, var, finals)
      if not writes:
        for q in places:
          node.input[first_other + q] = self.value(node, var, current)
          node.attr['Targuments'].list.type[q] = var.dtype
        node.attr[attr].func.name = function.signature.name
        continue
      if node.op != 'ScanDataset' or len(places) != 1:
        self.refuse(node, f'writes variable {var.name!r} in a dataset '
                    f'{node.op}: only dataset.reduce and a for loop over '
                    'a dataset may write a variable')
      self._thread_through_scan(scope, node, places[0], var, current,
                                tracked)

  def _downstream(self, scope, node):
    """The transformations after `node` up to the reduce that reads them."""
    chain = []
    while True:
      handle = scope.canonical(scope.ref(node.name, 'handle', 0))
      consumers = [n for n in scope.nodes
                   if any(scope.canonical(i) == handle for i in n.input)]
      if len(consumers) != 1 or (consumers[0].op not in _CHAIN and
                                 consumers[0].op != 'ReduceDataset'):
        self.refuse(node, 'is not read by one chain of dataset '
                    'transformations ending in a reduce')
      node = consumers[0]
      chain.append(node)
      if node.op == 'ReduceDataset':
        return chain

  def _thread_through_scan(self, scope, scan, place, var, current, tracked):
    num_state = len(scan.attr['Tstate'].list.type)
    inputs = _data_inputs(scan)
    controls = [i for i in scan.input if i.startswith('^')]
    others = inputs[1 + num_state:]
    original = self.functions[scan.attr['f'].func.name]
    num_args = len(original.signature.input_arg)
    num_components = num_args - num_state - len(others)
    other_args = list(range(num_state + num_components, num_args))
    order = (list(range(num_state)) + [other_args[place]] +
             list(range(num_state, num_state + num_components)) +
             [a for q, a in enumerate(other_args) if q != place])
    function, finals, _ = self._function_copy(
        scan.attr['f'].func.name, {num_state: var}, order)
    stem = _ident(var.name)
    _insert_output(function, num_state, f'{stem}_state', var.dtype,
                   finals[var])
    _insert_output(function, len(function.signature.output_arg),
                   f'{stem}_value', var.dtype, finals[var])
    value = self.value(scan, var, current)
    del scan.input[:]
    scan.input.extend(inputs[:1 + num_state] + [value] +
                      [o for q, o in enumerate(others) if q != place] +
                      controls)
    scan.attr['Tstate'].list.type.append(var.dtype)
    del scan.attr['Targuments'].list.type[place]
    _add_component(scan, var)
    scan.attr['f'].func.name = function.signature.name
    for node in self._downstream(scope, scan):
      for i in node.input:
        if tracked.get(scope.canonical(i)) is var:
          self.refuse(node, f'uses variable {var.name!r}, which a scan '
                      'before it writes')
      if node.op == 'ReduceDataset':
        current[var] = self._thread_into_reduce(scope, node, var, value)
      else:
        self._pass_component(node, var)

  def _pass_component(self, node, var):
    """`node` (after the scan) takes one more element component, the
    variable's value, and passes it on."""
    attr = _CHAIN[node.op]
    function = self._plain_copy(node.attr[attr].func.name)
    num_state = len(node.attr['Tstate'].list.type) if (
        node.op == 'ScanDataset') else 0
    num_others = len(node.attr['Targuments'].list.type)
    index = len(function.signature.input_arg) - num_others
    arg = _insert_input(function, index, f'{_ident(var.name)}_value',
                        var.dtype)
    if node.op in ('MapDataset', 'ScanDataset'):
      _insert_output(function, len(function.signature.output_arg),
                     f'{_ident(var.name)}_value', var.dtype, arg)
    del num_state
    _add_component(node, var)
    node.attr[attr].func.name = function.signature.name

  def _thread_into_reduce(self, scope, reduce, var, initial):
    """The reduce keeps the value its last element carries (its initial
    value when there is none); returns the ref of its final value."""
    num_state = len(reduce.attr['Tstate'].list.type)
    function = self._plain_copy(reduce.attr['f'].func.name)
    num_others = len(reduce.attr['Targuments'].list.type)
    stem = _ident(var.name)
    _insert_input(function, num_state, f'{stem}_state', var.dtype)
    end_of_element = len(function.signature.input_arg) - num_others
    arg = _insert_input(function, end_of_element, f'{stem}_value', var.dtype)
    _insert_output(function, num_state, f'{stem}_state', var.dtype, arg)
    inputs = _data_inputs(reduce)
    controls = [i for i in reduce.input if i.startswith('^')]
    del reduce.input[:]
    reduce.input.extend(inputs[:1 + num_state] + [initial] +
                        inputs[1 + num_state:] + controls)
    reduce.attr['Tstate'].list.type.append(var.dtype)
    reduce.attr['output_types'].list.type.insert(num_state, var.dtype)
    shapes = reduce.attr['output_shapes'].list.shape
    shapes.insert(num_state, var.shape)
    reduce.attr['f'].func.name = function.signature.name
    return scope.ref(reduce.name, 'components', num_state)

  def _plain_copy(self, name):
    function = self.graph.library.function.add()
    function.CopyFrom(self.functions[name])
    function.signature.name = self._fresh(name)
    self.functions[function.signature.name] = function
    return function
