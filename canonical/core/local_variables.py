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

import tensorflow as tf
from tensorflow.python.eager import context
from tensorflow.python.framework import ops
from tensorflow.python.util import nest

from canonical.core.local_variables_errors import Unsupported
from canonical.core.local_variables_lowering import _Lowering
from canonical.core.local_variables_trace import LocalVariable  # pylint: disable=unused-import
from canonical.core.local_variables_trace import creating_local_variables  # pylint: disable=unused-import
from canonical.core.local_variables_trace import forget  # pylint: disable=unused-import


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
