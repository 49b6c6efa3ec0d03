"""Step 1 of the call-local variable pass: while a computation traces,
every `tf.Variable` it makes becomes ops of its own graph, which the
rewrite can then lower."""

import contextlib
import functools
import inspect
import sys
import uuid

import tensorflow as tf
from tensorflow.python.eager import context
from tensorflow.python.eager import lift_to_graph
from tensorflow.python.framework import ops
from tensorflow.python.ops import gen_resource_variable_ops
from tensorflow.python.ops import resource_variable_ops

from canonical.core import naming
from canonical.core.local_variables_errors import Unsupported

# Higher than tf.function's own variable creator (100), so that ours is
# asked first, also inside nested tf.functions.
_CREATOR_PRIORITY = 1000


class LocalVariable(resource_variable_ops.ResourceVariable):
  """A `tf.Variable` made while a computation traces: its handle and its
  initial assignment are ops of the computation's graph, which `lower`
  turns into values. It reads and writes as any resource variable does (and
  is one, for TensorFlow's checks), but is built from its handle."""

  def __init__(self, **kwargs):  # pylint: disable=super-init-not-called
    resource_variable_ops.BaseResourceVariable.__init__(self, **kwargs)

  def __repr__(self):
    return f'<call-local tf.Variable {self.name!r} {self.dtype.name}>'


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
