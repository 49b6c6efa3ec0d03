"""Computations of the federated language: pure TF ones, and federated ones.

`tf_computation` wraps a pure TensorFlow function with its input signature.
`federated_computation` wraps Python that combines intrinsics; tracing it
records a `Graph` of federated ops (see `ir.py`).
"""

import inspect

import tensorflow as tf

from canonical import ir
from canonical import types as ft

# Ops that make a computation impure: state, stateful randomness, Python.
FORBIDDEN_OPS = {
    'VarHandleOp': 'creates or reads a variable',
    'VariableV2': 'creates a variable',
    'ReadVariableOp': 'reads a variable',
    'AssignVariableOp': 'assigns a variable',
    'AssignAddVariableOp': 'assigns a variable',
    'AssignSubVariableOp': 'assigns a variable',
    'RandomUniform': 'draws stateful random numbers',
    'RandomUniformInt': 'draws stateful random numbers',
    'RandomStandardNormal': 'draws stateful random numbers',
    'TruncatedNormal': 'draws stateful random numbers',
    'RandomShuffle': 'draws stateful random numbers',
    'RandomGamma': 'draws stateful random numbers',
    'RandomPoisson': 'draws stateful random numbers',
    'RandomPoissonV2': 'draws stateful random numbers',
    'Multinomial': 'draws stateful random numbers',
    'StatefulUniform': 'draws stateful random numbers',
    'StatefulUniformInt': 'draws stateful random numbers',
    'StatefulStandardNormalV2': 'draws stateful random numbers',
    'StatefulTruncatedNormal': 'draws stateful random numbers',
    'RngSkip': 'draws stateful random numbers',
    'RngReadAndSkip': 'draws stateful random numbers',
    'PyFunc': 'calls Python (tf.py_function / tf.numpy_function)',
    'PyFuncStateless': 'calls Python (tf.py_function / tf.numpy_function)',
    'EagerPyFunc': 'calls Python (tf.py_function / tf.numpy_function)',
}


def _is_spec_structure(value):
  leaves = tf.nest.flatten(value)
  return bool(leaves) and all(
      isinstance(leaf, (tf.TensorSpec, tf.data.DatasetSpec)) for leaf in leaves)


def _spec_of(value):
  if isinstance(value, tf.data.Dataset):
    return tf.data.DatasetSpec.from_value(value)
  return tf.TensorSpec.from_tensor(tf.convert_to_tensor(value))


def graph_op_types(concrete_function):
  """Op types of a concrete function's graph and its whole function library."""
  graph_def = concrete_function.graph.as_graph_def()
  types = [(node.op, node.name) for node in graph_def.node]
  for function in graph_def.library.function:
    types.extend((node.op, node.name) for node in function.node_def)
  return types


class TFComputation:
  """A pure TensorFlow function with a fixed input signature."""

  def __init__(self, fn, parameter_specs, name=None, location=None):
    self._fn = fn
    self._parameter_specs = tuple(
        ft.check_member(spec, f'tf_computation {name or fn.__name__}')
        for spec in parameter_specs)
    self.name = name or getattr(fn, '__name__', 'tf_computation')
    self.location = location or ir.user_location()
    self._concrete = None

  @property
  def parameter_specs(self):
    """One member structure per positional parameter."""
    return self._parameter_specs

  @property
  def python_function(self):
    return self._fn

  def concrete_function(self):
    if self._concrete is None:
      function = tf.function(self._fn, input_signature=list(
          self._parameter_specs), autograph=True)
      try:
        self._concrete = function.get_concrete_function()
      except Exception as e:  # Name the user's computation on any trace error.
        raise ir.FederatedError(
            f'tf_computation {self.name!r} defined at {self.location} failed '
            f'to trace: {type(e).__name__}: {e}') from e
    return self._concrete

  @property
  def result_spec(self):
    """Member structure of the result."""
    outputs = self.concrete_function().structured_outputs
    return tf.nest.map_structure(_spec_of, outputs)

  def check_pure(self):
    """Raises `FederatedError` naming the first impure op."""
    for op_type, node_name in graph_op_types(self.concrete_function()):
      if op_type in FORBIDDEN_OPS:
        raise ir.FederatedError(
            f'tf_computation {self.name!r} defined at {self.location} is not '
            f'pure: op {node_name!r} ({op_type}) {FORBIDDEN_OPS[op_type]}. '
            'Pieces of the canonical form must be pure functions: pass state '
            'in and out explicitly and use tf.random.stateless_* ops.')

  def call_with_member(self, member_value):
    """Calls the function on a value of the (single or tuple) parameter."""
    if not self._parameter_specs:
      return self._fn()
    if len(self._parameter_specs) == 1:
      return self._fn(member_value)
    return self._fn(*member_value)

  def parameter_member(self):
    """The member type a federated argument must have."""
    if len(self._parameter_specs) == 1:
      return self._parameter_specs[0]
    return tuple(self._parameter_specs)

  def __call__(self, *args):
    if any(isinstance(a, ir.Value) for a in tf.nest.flatten(args)):
      raise ir.FederatedError(
          f'tf_computation {self.name!r} was called on a federated value; '
          'apply it with federated_map(computation, value) instead.')
    return self._fn(*args)

  def __repr__(self):
    params = ', '.join(ft.describe(s) for s in self._parameter_specs)
    return f'<tf_computation {self.name}({params})>'


def tf_computation(*args):
  """Decorator: `@tf_computation(spec, ...)`, `@tf_computation`, or `tf_computation(fn, spec, ...)`."""
  location = ir.user_location()
  if args and callable(args[0]) and not _is_spec_structure(args[0]):
    fn, specs = args[0], args[1:]
    return TFComputation(fn, specs, location=location)
  for spec in args:
    if not _is_spec_structure(spec):
      raise TypeError('tf_computation takes tf.TensorSpec / '
                      'tf.data.DatasetSpec structures as its input signature, '
                      f'got {spec!r}.')

  def decorate(fn):
    return TFComputation(fn, args, location=location)

  return decorate


class FederatedComputation:
  """Python that combines intrinsics, traced into an `ir.Graph`."""

  def __init__(self, fn, parameter_types, name=None):
    for t in parameter_types:
      if not isinstance(t, ft.FederatedType):
        raise TypeError('federated_computation takes FederatedType '
                        f'parameters (e.g. types.server(spec)), got {t!r}.')
    self._fn = fn
    self._parameter_types = tuple(parameter_types)
    self.name = name or getattr(fn, '__name__', 'federated_computation')
    self.location = ir.user_location()
    self._graph = None

  @property
  def parameter_types(self):
    return self._parameter_types

  def trace(self):
    """The `ir.Graph` of this computation (traced once)."""
    if self._graph is None:
      try:
        names = list(inspect.signature(self._fn).parameters)
      except (TypeError, ValueError):
        names = []
      names += [f'arg{i}' for i in range(len(names), len(self._parameter_types))]
      parameters = tuple(ir.Value(t, name=n)
                         for t, n in zip(self._parameter_types, names))
      graph = ir.Graph(self.name, parameters, [], None)
      with ir.tracing(graph):
        graph.result = self._fn(*parameters)
      for leaf in tf.nest.flatten(graph.result):
        if not isinstance(leaf, ir.Value):
          raise ir.FederatedError(
              f'federated_computation {self.name!r} returned {leaf!r}; it must '
              'return federated values (use federated_value for constants).')
      self._graph = graph
    return self._graph

  @property
  def result_types(self):
    return tf.nest.map_structure(lambda v: v.type_signature,
                                 self.trace().result)

  def __call__(self, *args):
    if ir._TRACE.stack:  # pylint: disable=protected-access
      # Composition: inline into the computation being traced.
      for arg, t in zip(args, self._parameter_types):
        if not isinstance(arg, ir.Value) or not _fits(arg.type_signature, t):
          raise ir.FederatedError(
              f'federated_computation {self.name!r} expects {t}, got {arg!r}.')
      return self._fn(*args)
    from canonical import reference  # pylint: disable=g-import-not-at-top
    return reference.run(self, *args)


def _fits(actual, expected):
  return (actual.placement == expected.placement and
          ft.same_member(actual.member, expected.member))


def federated_computation(*parameter_types):
  """Decorator: `@federated_computation(types.server(spec), types.clients(spec))`."""

  def decorate(fn):
    return FederatedComputation(fn, parameter_types)

  return decorate
