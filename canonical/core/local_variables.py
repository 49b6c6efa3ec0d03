"""Call-local variables, lowered into values threaded through the dataflow.

TFF gives a computation fresh variables on every call, so a `tf.Variable`
made inside a `tf_computation` (a `VariableModel`'s weights, a Keras metric's
counters, a Keras optimizer's slots) is a pure function in disguise: its
value is its initial value, then each write in turn. This module makes the
disguise explicit, in two steps.

1. Trace (`creating_local_variables`). While the computation traces, every
   `tf.Variable` it makes (also inside nested `tf.function`s, as TFF lifts
   them) is a `LocalVariable`: a `VarHandleOp` and its initializing
   `AssignVariableOp` in the computation's own graph, instead of an eager
   variable the graph would capture. TensorFlow's automatic control
   dependencies order every read and write of it, as they would on any
   variable.

2. Lower (`lower`). A rewrite of the traced GraphDef and its function
   library follows each variable's resource from its `VarHandleOp` through
   the ops that consume it, in that order, keeping its current value:

   - `ReadVariableOp`: the current value (`Identity`);
   - `AssignVariableOp(v, x)`: x is the current value now;
   - `AssignAddVariableOp` / `AssignSubVariableOp`: `AddV2` / `Sub` of it;
   - `ResourceScatter{Add,Sub,Update,Min,Max}`, `ResourceScatterNd*`:
     the `TensorScatter*` of it;
   - `ResourceGather` / `ResourceGatherNd`: `GatherV2` / `GatherNd` of it;
   - `ResourceStridedSliceAssign`: `TensorStridedSliceUpdate` of it;
   - `ResourceApplyGradientDescent`: `Sub(v, Mul(delta, alpha))`;
   - `RngReadAndSkip` (a `tf.random.Generator`'s draw): the Philox state,
     its 128-bit counter moved on as the kernel moves it;
   - `VariableShape`, `VarIsInitializedOp`: `Shape` of it, a constant;
   - a call (`tf.function`): the callee takes the value and returns the
     new one;
   - `While` (`tf.while_loop`, AutoGraph loops): one more loop variable;
   - `If` / `Case` (`tf.cond`, AutoGraph `if`): each branch returns the
     new value;
   - `ReduceDataset` (`dataset.reduce`), and AutoGraph's `for x in
     dataset` (a `ScanDataset` then the reduce): one more part of the
     reduce's (and the scan's) state.

   Each op is replaced in place by one of the same name, so the control
   dependencies that ordered it still hold; rewritten functions are copies
   under fresh names (never the originals, which other graphs may call).
   These are the ops a variable's methods and Keras 3 (its metrics, its
   optimizers: `assign`, `assign_add`, `assign_sub`, `scatter_*` for sparse
   gradients) emit; any other op given a call-local variable is refused by
   name (`Unsupported`), as is one inside a dataset transformation other
   than `reduce` (it would run lazily, at an order the graph does not fix).

The result is the same computation, re-imported as a concrete function of
the same structured inputs and outputs, with no variable left: the same ops
on the same values in the same order, so its results are bit for bit those
of running the ops eagerly on fresh variables. A variable captured from
outside the call (made eagerly before, then used inside) is not lowered:
its value is not the call's to thread, and the purity check refuses it.
"""

import contextlib
import copy
import dataclasses
import functools
import inspect
import sys
import uuid

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2
from tensorflow.core.framework import node_def_pb2
from tensorflow.core.framework import op_def_pb2
from tensorflow.core.framework import types_pb2
from tensorflow.python.eager import context
from tensorflow.python.eager import lift_to_graph
from tensorflow.python.framework import op_def_registry
from tensorflow.python.framework import ops
from tensorflow.python.ops import gen_resource_variable_ops
from tensorflow.python.ops import resource_variable_ops
from tensorflow.python.util import nest

from canonical import errors
from canonical.core import naming

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
# Higher than tf.function's own variable creator (100), so that ours is
# asked first, also inside nested tf.functions.
_CREATOR_PRIORITY = 1000


class Unsupported(errors.FederatedError):
  """A call-local variable is used in a way this pass does not lower."""


class LocalVariable(resource_variable_ops.ResourceVariable):
  """A `tf.Variable` made while a computation traces: its handle and its
  initial assignment are ops of the computation's graph, which `lower`
  turns into values. It reads and writes as any resource variable does (and
  is one, for TensorFlow's checks), but is built from its handle."""

  def __init__(self, **kwargs):  # pylint: disable=super-init-not-called
    resource_variable_ops.BaseResourceVariable.__init__(self, **kwargs)

  def __repr__(self):
    return f'<call-local tf.Variable {self.name!r} {self.dtype.name}>'


@dataclasses.dataclass(frozen=True, eq=False)  # One per variable.
class _Variable:
  """What the rewrite knows of a variable: its name, dtype and shape."""
  name: str
  dtype: int  # a types_pb2 enum
  shape: object  # a TensorShapeProto


@tf.autograph.experimental.do_not_convert
def _make_local_variable(graph, made, kwargs):
  """A LocalVariable in `graph` (the computation's), built from a
  `tf.Variable` call's arguments."""
  initial_value = kwargs.get('initial_value')
  name = kwargs.get('name') or 'Variable'
  if initial_value is None:
    raise Unsupported(
        f'tf.Variable {name!r} made inside a computation at '
        f'{naming.user_location()} has no initial value.')
  dtype = kwargs.get('dtype')
  with graph.as_default(), ops.name_scope(name, skip_on_eager=False) as scope:
    if callable(initial_value):
      initial_value = initial_value()
    if isinstance(initial_value, resource_variable_ops.BaseResourceVariable):
      initial_value = initial_value.read_value()
    if tf.is_tensor(initial_value) and initial_value.graph is not graph:
      initial_value = _lifted(initial_value, graph, name)
    initial_value = ops.convert_to_tensor(initial_value, dtype=dtype,
                                          name='initial_value')
    shape = kwargs.get('shape')
    if shape is None:
      shape = (initial_value.shape if kwargs.get('validate_shape', True)
               else tf.TensorShape(None))
    handle = gen_resource_variable_ops.var_handle_op(
        shape=shape, dtype=initial_value.dtype,
        shared_name=f'{scope}{uuid.uuid4().hex}', name='handle',
        debug_name=name)
    initializer = gen_resource_variable_ops.assign_variable_op(
        handle, initial_value, name='initial_assign')
  variable = LocalVariable(
      trainable=kwargs.get('trainable'), shape=shape,
      dtype=initial_value.dtype, handle=handle, name=name,
      unique_id=handle.op.name, handle_name=handle.op.name,
      initial_value=initial_value, initializer_op=initializer,
      in_graph_mode=False, constraint=kwargs.get('constraint'),
      synchronization=kwargs.get('synchronization'),
      aggregation=kwargs.get('aggregation'),
      validate_shape=kwargs.get('validate_shape', True))
  made.append(variable)
  return variable


def _lifted(tensor, graph, name):
  """`tensor`, of a nested function's graph, copied into `graph` (where TFF
  too lifts a variable's creation); refused if it needs that function's
  arguments."""
  try:
    return lift_to_graph.lift_to_graph([tensor], graph, handle_captures=True,
                                       base_graph=tensor.graph)[tensor]
  except Exception as e:  # pylint: disable=broad-except
    raise Unsupported(
        f'tf.Variable {name!r} is made at {naming.user_location()} inside a '
        'nested tf.function (or loop or branch) with an initial value '
        'computed from that function\'s arguments. Variables made there are '
        'created once for the whole computation, as TFF lifts them: compute '
        'the initial value from the computation\'s parameters or constants, '
        f'or pass a callable ({type(e).__name__}: {e}).') from None


@contextlib.contextmanager
def creating_local_variables():
  """Inside a trace: every `tf.Variable` made is a `LocalVariable` of the
  graph being traced (the list yielded collects them)."""
  graph = ops.get_default_graph()
  made = []

  def creator(next_creator, **kwargs):
    if context.executing_eagerly():  # Lifted out on purpose (init_scope).
      return next_creator(**kwargs)
    return _make_local_variable(graph, made, kwargs)

  with graph._variable_creator_scope(  # pylint: disable=protected-access
      creator, priority=_CREATOR_PRIORITY), _tensor_learning_rates():
    yield made


def forget(variables):
  """Graphs that enclose the trace (a computation traced while another
  function traces) stop watching `variables`. TensorFlow notes every
  variable read in a graph and in the graphs around it, weakly, and checks
  they are alive when those graphs' functions are called; these are the
  trace's own and die with it (the lowered function holds none)."""
  graph = ops.get_default_graph()
  while graph is not None:
    watched = getattr(graph, '_watched_variables', None)
    if watched is not None:
      for variable in variables:
        watched.discard(variable)
    graph = getattr(graph, 'outer_graph', None)


@contextlib.contextmanager
def _tensor_learning_rates():
  """Keras optimizers made in the trace take a tensor learning rate.

  TFF 0.87's tutorials write `tf.keras.optimizers.SGD(learning_rate)` with
  the computation's parameter: Keras 2 kept it in a variable initialized to
  that tensor. Keras 3 takes only a float (or a schedule); here it is given
  a placeholder float and then the tensor is assigned to its learning-rate
  variable, which is what Keras 2 held.
  """
  module = sys.modules.get('keras.src.optimizers.base_optimizer')
  optimizer = getattr(module, 'BaseOptimizer', None)
  if optimizer is None or getattr(optimizer.__init__, _PATCHED, False):
    yield
    return
  original = optimizer.__init__
  signature = inspect.signature(original)

  @functools.wraps(original)
  def init(self, *args, **kwargs):
    bound = signature.bind(self, *args, **kwargs)
    learning_rate = bound.arguments.get('learning_rate')
    if not tf.is_tensor(learning_rate) or isinstance(
        learning_rate, tf.Variable):
      return original(self, *args, **kwargs)
    bound.arguments['learning_rate'] = 0.0
    original(*bound.args, **bound.kwargs)
    self.learning_rate = learning_rate
    return None

  setattr(init, _PATCHED, True)
  optimizer.__init__ = init
  try:
    yield
  finally:
    optimizer.__init__ = original


_PATCHED = '_canonical_takes_tensor_learning_rates'


# --- The rewrite ---------------------------------------------------------


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


# --- Re-import -----------------------------------------------------------


@tf.autograph.experimental.do_not_convert  # Runs while outer code traces.
def lower(concrete, input_signature, where=lambda op_type, name: None):
  """`concrete` (traced with `creating_local_variables`) with its
  call-local variables lowered: a concrete function of `input_signature`
  and the same structured outputs, holding no variable of its own.

  `where(op type, node name)` locates an op for an error message.
  """
  graph = concrete.graph
  graph_def = _Lowering(graph.as_graph_def(), where).run(
      [t.op.name for t in graph.outputs])
  captures = list(graph.captures)
  inputs = graph.inputs[:len(graph.inputs) - len(captures)]
  output_names = [t.name for t in graph.outputs]
  structure = concrete.structured_outputs

  def rebuilt(*args):
    flat = nest.flatten(args, expand_composites=True)
    if len(flat) != len(inputs):
      raise Unsupported(f'the traced function takes {len(inputs)} tensors, '
                        f'its signature {len(flat)}')
    input_map = {t.name: a for t, a in zip(inputs, flat)}
    graph = ops.get_default_graph()
    input_map.update({internal.name: graph.capture(external)
                      for external, internal in captures})
    fetched = iter(tf.graph_util.import_graph_def(
        graph_def, input_map=input_map, return_elements=output_names,
        name=''))
    leaves = [leaf if leaf is None else next(fetched)
              for leaf in nest.flatten(structure, expand_composites=True)]
    return nest.pack_sequence_as(structure, leaves, expand_composites=True)

  # Imported functions are the graph's, not yet the runtime's (those the
  # runtime has already are the originals, which were left as they are).
  runtime = context.context()
  for function in graph_def.library.function:
    if not runtime.has_function(function.signature.name):
      runtime.add_function_def(function)
  return tf.function(rebuilt, input_signature=input_signature,
                     autograph=False).get_concrete_function()
