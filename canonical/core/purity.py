"""Whether a TensorFlow function is pure, as every piece of a form must be:
the ops that make one impure (state, stateful randomness, Python, mutable
tables, file writes, a dataset shuffled or sampled without a seed), and
where the user's code made each one."""

import dataclasses

from canonical.core import dataset_seeds
from canonical.core import naming

_STATEFUL_RANDOM = 'draws stateful random numbers (use tf.random.stateless_*)'
_VARIABLE = ('uses a variable made outside the computation (one it makes '
             'itself is lowered into values; pass an outside value in as a '
             'parameter)')
_PYTHON = 'calls Python (tf.py_function / tf.numpy_function)'
_MUTABLE_TABLE = 'uses a mutable hash table'
_FILE_WRITE = 'writes files'

# Ops that make a computation impure: state, stateful randomness, Python.
FORBIDDEN_OPS = {
    **dict.fromkeys([
        'VarHandleOp', 'VariableV2', 'Variable', 'TemporaryVariable',
        'ReadVariableOp', 'AssignVariableOp', 'AssignAddVariableOp',
        'AssignSubVariableOp', 'Assign', 'AssignAdd', 'AssignSub',
        'VarIsInitializedOp', 'DestroyResourceOp', 'VariableShape',
        'ScatterAdd', 'ScatterSub', 'ScatterUpdate', 'CountUpTo',
    ], _VARIABLE),
    **dict.fromkeys([
        'RandomUniform', 'RandomUniformInt', 'RandomStandardNormal',
        'TruncatedNormal', 'ParameterizedTruncatedNormal', 'RandomShuffle',
        'RandomGamma', 'RandomPoisson', 'RandomPoissonV2', 'RandomCrop',
        'Multinomial', 'StatefulUniform', 'StatefulUniformInt',
        'StatefulUniformFullInt', 'StatefulStandardNormal',
        'StatefulStandardNormalV2', 'StatefulTruncatedNormal',
        'StatefulRandomBinomial', 'RngSkip', 'RngReadAndSkip',
        'NonDeterministicInts',
    ], _STATEFUL_RANDOM),
    **dict.fromkeys(['PyFunc', 'PyFuncStateless', 'EagerPyFunc'], _PYTHON),
    **dict.fromkeys([
        'MutableHashTable', 'MutableHashTableV2', 'MutableHashTableOfTensors',
        'MutableHashTableOfTensorsV2', 'MutableDenseHashTable',
        'MutableDenseHashTableV2', 'LookupTableInsertV2', 'LookupTableRemoveV2',
    ], _MUTABLE_TABLE),
    **dict.fromkeys(['WriteFile', 'Save', 'SaveV2', 'SaveSlices'],
                    _FILE_WRITE),
}

# Whole families: every `Resource*` op (ResourceGather, ResourceApplyAdam,
# ResourceScatterAdd, ...) reads or writes a variable.
_FORBIDDEN_PREFIXES = (('Resource', _VARIABLE),)


def forbidden_reason(op_type):
  """Why op type `op_type` makes a piece impure, or None if it does not."""
  if op_type in FORBIDDEN_OPS:
    return FORBIDDEN_OPS[op_type]
  for prefix, reason in _FORBIDDEN_PREFIXES:
    if op_type.startswith(prefix):
      return reason
  return None


def graph_op_types(concrete_function, graph_def=None):
  """`(op type, node name)` of a concrete function's graph and its whole library.

  The library holds every function the graph calls, however deeply: nested
  `tf.function`s, while-loop and cond branches, dataset `reduce` / `map`
  bodies.
  """
  if graph_def is None:
    graph_def = concrete_function.graph.as_graph_def()
  types = [(node.op, node.name) for node in graph_def.node]
  for function in graph_def.library.function:
    types.extend((node.op, node.name) for node in function.node_def)
  return types


@dataclasses.dataclass(frozen=True)
class Impurity:
  """One op that makes a computation impure, and the user's line that made it."""
  op_type: str
  node_name: str
  reason: str
  location: object = None  # naming.Location, when TF kept the op's traceback.

  def __str__(self):
    where = f', created at {self.location}' if self.location else ''
    return f'op {self.node_name!r} ({self.op_type}) {self.reason}{where}'


def _func_graphs(graph):
  """`graph` and the graphs of every function it calls, depth first."""
  seen, stack = set(), [graph]
  while stack:
    g = stack.pop()
    if id(g) in seen:
      continue
    seen.add(id(g))
    yield g
    for function in getattr(g, '_functions', {}).values():
      inner = getattr(function, 'graph', None)
      if inner is not None:
        stack.append(inner)


def op_locator(graph):
  """`where(op type, node name)`: the user's line that made that op of
  `graph` or of a function it calls (None where unknown)."""
  located = {}
  for g in _func_graphs(graph):
    for op in g.get_operations():
      located.setdefault((op.type, op.name), op)

  def where(op_type, name):
    op = located.get((op_type, name))
    return naming.location_of_tf_op(op) if op is not None else None

  return where


def impure_ops(concrete_function, traced_graph=None):
  """Every forbidden op of a concrete function (library included), and every
  dataset shuffle or sample without a seed, located (in `traced_graph`, the
  graph as the user's code traced it, if the function is a rewrite of it)."""
  graph_def = concrete_function.graph.as_graph_def()
  reasons = {(t, n): forbidden_reason(t)
             for t, n in graph_op_types(concrete_function, graph_def)
             if forbidden_reason(t)}
  for found in dataset_seeds.unseeded(graph_def):
    reasons[found] = dataset_seeds.UNSEEDED
  if not reasons:
    return []
  where = op_locator(traced_graph or concrete_function.graph)
  found = [Impurity(t, n, reason, where(t, n))
           for (t, n), reason in reasons.items()]
  # The located ones first: they name the user's line.
  return sorted(found, key=lambda i: i.location is None)
