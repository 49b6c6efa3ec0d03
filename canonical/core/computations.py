"""Computations of the federated language: pure TF ones, and federated ones.

`tf_computation` wraps a pure TensorFlow function with its input signature.
`federated_computation` wraps Python that combines intrinsics; tracing it
records a `Graph` of federated ops (see `ir.py`).
"""

import abc
import inspect

import numpy as np
import tensorflow as tf
from tensorflow.python.util import nest

from canonical.core import context
from canonical.core import given_datasets
from canonical.core import ir
from canonical.core import local_variables
from canonical.core import naming
# What makes a computation impure has a module of its own (`purity`); its
# names are this module's too, where they always were.
from canonical.core.purity import FORBIDDEN_OPS  # pylint: disable=unused-import
from canonical.core.purity import forbidden_reason  # pylint: disable=unused-import
from canonical.core.purity import graph_op_types  # pylint: disable=unused-import
from canonical.core.purity import Impurity  # pylint: disable=unused-import
from canonical.core.purity import impure_ops
from canonical.core.purity import op_locator
from canonical.core import types as ft
from canonical import errors
from encoders.core import seeds

class Computation(abc.ABC):  # pylint: disable=too-few-public-methods
  """TFF's `tff.Computation`: what every computation here is an instance of
  (for `isinstance` and annotations)."""


class TFComputation(Computation):
  """A pure TensorFlow function with a fixed input signature.

  Traced once (with AutoGraph, so Python control flow over tensors and `for`
  loops over datasets work); every later use, eager or inside a piece, calls
  that one concrete function.
  """

  def __init__(self, fn, parameter_specs, name=None, location=None):
    self._fn = fn
    self.name = name or getattr(fn, '__name__', 'tf_computation')
    self._parameter_specs = tuple(
        ft.to_member(spec, f'tf_computation {self.name!r}')
        for spec in parameter_specs)
    self.location = location or naming.user_location()
    self._concrete = None
    self._traced_graph = None  # As traced, before variables were lowered.
    self._result_spec = None
    self._impurities = None

  @property
  def parameter_specs(self):
    """One member structure per positional parameter."""
    return self._parameter_specs

  @property
  def python_function(self):
    return self._fn

  def concrete_function(self):
    if self._concrete is None:
      fn = self._fn
      made = []

      def traced(*args):
        # Encoders draw no stateful noise inside a piece (encoders/core/seeds.py).
        with local_variables.creating_local_variables() as variables, \
            seeds.pure_randomness():
          made.append(variables)
          return fn(*_in_attrs_containers(self._parameter_specs, args))

      function = tf.function(traced, input_signature=list(
          self._parameter_specs), autograph=True)
      try:
        concrete = function.get_concrete_function()
        local_variables.forget(made[0] if made else ())
        self._traced_graph = concrete.graph
        if made and made[0]:  # Variables of this call: lowered into values.
          concrete = local_variables.lower(
              concrete, list(self._parameter_specs),
              op_locator(concrete.graph))
      except local_variables.Unsupported as e:
        raise local_variables.Unsupported(
            f'tf_computation {self.name!r} defined at {self.location}: '
            f'{e}') from None
      except Exception as e:  # Name the user's computation on any trace error.
        raise errors.FederatedError(
            f'tf_computation {self.name!r} defined at {self.location} failed '
            f'to trace: {type(e).__name__}: {e}') from e
      self._concrete = concrete
    return self._concrete

  @property
  def result_spec(self):
    """Member structure of the result (nameless specs)."""
    if self._result_spec is None:
      self._result_spec = ft.member_of(
          self.concrete_function().structured_outputs)
    return self._result_spec

  def impurities(self):
    """The forbidden ops of this computation's graph (cached)."""
    if self._impurities is None:
      self._impurities = impure_ops(self.concrete_function(),
                                    self._traced_graph)
    return self._impurities

  def check_pure(self, used_by=None):
    """Raises `FederatedError` naming the first impure op and its line."""
    impurities = self.impurities()
    if impurities:
      use = f' It is used by {used_by}.' if used_by else ''
      raise errors.FederatedError(
          f'tf_computation {self.name!r} defined at {self.location} is not '
          f'pure: {impurities[0]}.{use} Pieces of the canonical form must be '
          'pure functions: pass state in and out explicitly and use '
          'tf.random.stateless_* ops with a seed from the inputs.')

  def invoke(self, *args):
    """Calls the traced function on positional arguments of its signature.

    Eagerly this runs the graph; while tracing a piece it adds one call of
    the function (no retrace). Arguments are repacked into the declared
    structures, so a tuple may stand for a namedtuple of the same layout.
    """
    args = [tf.nest.pack_sequence_as(spec, _leaves(spec, arg))
            for spec, arg in zip(self._parameter_specs, args)]
    return self.concrete_function()(*args)

  def unplaced_element(self, key, location):
    """Element `key` of this no-parameter computation's result, unplaced
    (`a, b = init()` in a federated body)."""
    try:
      self.result_spec[key]  # pylint: disable=pointless-statement
    except (TypeError, KeyError, IndexError):
      raise errors.FederatedError(
          f'{self.name}() called at {location} has no element {key!r}: it '
          f'gives {ft.describe(self.result_spec)}.') from None
    return ir.Unplaced(TFComputation(
        lambda: self.invoke()[key], (), name=f'{self.name}()[{key!r}]',
        location=location), location)

  def call_with_member(self, member_value):
    """Calls the function on a value of the (single or tuple) parameter."""
    if not self._parameter_specs:
      return self.invoke()
    if len(self._parameter_specs) == 1:
      return self.invoke(member_value)
    return self.invoke(*member_value)

  def parameter_member(self):
    """The member type a federated argument must have."""
    if len(self._parameter_specs) == 1:
      return self._parameter_specs[0]
    return tuple(self._parameter_specs)

  def __call__(self, *args):
    _refuse_federated_arguments(self.name, args)
    if ir._TRACE.stack and tf.executing_eagerly():  # pylint: disable=protected-access
      # Called in a federated computation's body: an unplaced value, which
      # federated_value places (TFF's `federated_value(init(), SERVER)`).
      location = naming.user_location()
      return ir.Unplaced(self._bound(args, location), location)
    if not tf.executing_eagerly():
      return self._fn(*args)  # Inside a tf.function: the plain function.
    # From Python: the traced computation, on its declared types (a list
    # where a sequence goes is its elements), giving numpy values back as
    # TFF 0.87 does.
    return context.as_numpy(self.invoke(*_given_from_python(
        self._parameter_specs, args)))

  def _bound(self, args, location):
    """A no-argument computation calling this one on constant `args`."""
    if not args and not self._parameter_specs:
      return self
    if len(args) != len(self._parameter_specs):
      raise errors.FederatedError(
          f'tf_computation {self.name!r} called at {location} with '
          f'{len(args)} arguments; it takes {len(self._parameter_specs)}.')
    constants = []
    for arg, spec in zip(args, self._parameter_specs):
      if isinstance(arg, ir.Unplaced):  # Another call's result: run first.
        constants.append(arg.computation)
        continue
      specs = tf.nest.flatten(spec)
      try:
        leaves = nest.flatten_up_to(spec, arg, check_types=False)
        if any(isinstance(s, tf.data.DatasetSpec) for s in specs):
          raise errors.InvalidTypeError('a dataset cannot be a constant')
        constants.append([np.asarray(v, s.dtype.as_numpy_dtype)
                          for v, s in zip(leaves, specs)])
      except (TypeError, ValueError, KeyError, IndexError) as e:
        raise errors.FederatedError(
            f'tf_computation {self.name!r} called at {location}: '
            f'{naming.describe_object(arg)} is not a constant of type '
            f'{ft.describe(spec)} ({e}).') from None

    def call():
      return self.invoke(*[
          values.invoke() if isinstance(values, TFComputation) else
          tf.nest.pack_sequence_as(spec, [tf.constant(v) for v in values])
          for spec, values in zip(self._parameter_specs, constants)])

    # Traced now, eagerly, not inside the trace of `call`: variables it makes
    # (a tf.random.Generator's state) are made for this computation's graph.
    self.concrete_function()
    return TFComputation(call, (), name=self.name, location=location)

  @property
  def type_signature(self):
    """TFF's `FunctionType`: `(float32 -> <float32,int32>)`."""
    return ft.FunctionType(
        ft.parameter_of(self._parameter_specs,
                        _parameter_names(self._fn, len(self._parameter_specs))),
        self.result_spec)

  def describe_for_error(self):
    return f'tf_computation {self.name!r} defined at {self.location}'

  def __repr__(self):
    params = ', '.join(ft.describe(s) for s in self._parameter_specs)
    return f'<tf_computation {self.name}({params})>'


class PolymorphicComputation(Computation):
  """A tf_computation written without parameter types (TFF's untyped
  `tensorflow.computation`): each argument type it is used with makes one
  typed `TFComputation`, traced once, as TFF types it at its first call."""

  def __init__(self, fn, location):
    self._fn = fn
    self.name = getattr(fn, '__name__', 'tf_computation')
    self.location = location
    self._typed = {}
    self.arity = _positional_arity(fn)

  @property
  def python_function(self):
    return self._fn

  def for_specs(self, specs):
    """The typed computation taking `specs`, one per parameter (cached)."""
    key = repr(specs)
    if key not in self._typed:
      self._typed[key] = TFComputation(self._fn, specs, name=self.name,
                                       location=self.location)
    return self._typed[key]

  def for_member(self, member):
    """The typed computation taking one argument of type `member`, spread
    over the parameters when there are several (TFF's struct argument)."""
    if self.arity == 1:
      return self.for_specs((member,))
    parts = member
    if isinstance(member, dict):
      parts = tuple(member.values())
    if isinstance(parts, (tuple, list)) and len(parts) == self.arity:
      return self.for_specs(tuple(parts))
    raise errors.FederatedError(
        f'{self.describe_for_error()} takes {self.arity} parameters; it '
        f'cannot be typed by one argument of type {ft.describe(member)}.')

  def __call__(self, *args):
    _refuse_federated_arguments(self.name, args)
    try:
      specs = tuple(a.computation.result_spec if isinstance(a, ir.Unplaced)
                    else ft.member_of(a) for a in args)
    except (TypeError, ValueError) as e:
      raise errors.FederatedError(
          f'{self.describe_for_error()} called at {naming.user_location()}: '
          f'cannot type its arguments ({e}).') from None
    return self.for_specs(specs)(*args)

  def describe_for_error(self):
    return (f'tf_computation {self.name!r} defined at {self.location} '
            '(untyped)')

  def __repr__(self):
    return f'<tf_computation {self.name}(untyped)>'


def _refuse_federated_arguments(name, args):
  if any(isinstance(a, ir.Value) for a in tf.nest.flatten(args)):
    raise errors.FederatedError(
        f'tf_computation {name!r} was called on a federated value at '
        f'{naming.user_location()}; apply it with federated_map(computation, '
        'value) instead.')


def _positional_arity(fn):
  try:
    parameters = inspect.signature(fn).parameters.values()
  except (TypeError, ValueError):
    return 1
  return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
             for p in parameters)


def typed(computation, argument_member):
  """`computation` typed for an argument of `argument_member` if it is
  untyped; any other computation as it is."""
  if isinstance(computation, PolymorphicComputation):
    return computation.for_member(argument_member)
  return computation


def _untyped_or_no_parameter(fn, location):
  if _positional_arity(fn):
    return PolymorphicComputation(fn, location)
  return TFComputation(fn, (), location=location)


def tf_computation(*args):
  """Decorator: `@tf_computation(type, ...)`, `@tf_computation`, or
  `tf_computation(fn, type, ...)`; a type is a spec structure or any of TFF's
  spellings (`tf.float32`, `TensorType(...)`, `SequenceType(...)`, ...).
  Without types, a function with parameters is typed by its uses."""
  location = naming.user_location()
  if args and callable(args[0]) and not ft.is_type(args[0]):
    fn, specs = args[0], args[1:]
    if not specs:
      return _untyped_or_no_parameter(fn, location)
    return TFComputation(fn, specs, location=location)
  specs = [ft.to_member(spec, 'tf_computation input signature')
           for spec in args]

  def decorate(fn):
    if not callable(fn):
      raise errors.FederatedError(
          f'tf_computation at {location}: expected a function to decorate, '
          f'got {naming.describe_object(fn)}.')
    if not specs:
      return _untyped_or_no_parameter(fn, location)
    return TFComputation(fn, specs, location=location)

  return decorate


def _leaves(spec, arg):
  """`arg`'s leaves at `spec`'s leaves: a Python list where a tensor goes is
  that tensor's value, not a structure; named parts go by name."""
  try:
    return nest.flatten_up_to(spec, ft.by_name(spec, arg), check_types=False)
  except (TypeError, ValueError, KeyError, IndexError):
    return tf.nest.flatten(arg)  # The call itself then says what is wrong.


class FederatedComputation(Computation):
  """Python that combines intrinsics, traced into an `ir.Graph`."""

  def __init__(self, fn, parameter_types, name=None, location=None):
    self.location = location or naming.user_location()
    _check_parameter_types(parameter_types, self.location)
    self._fn = fn
    self._parameter_types = tuple(parameter_types)
    self.name = name or getattr(fn, '__name__', 'federated_computation')
    self._graph = None
    try:
      inspect.signature(fn).bind(*self._parameter_types)
    except TypeError as e:
      raise errors.FederatedError(
          f'federated_computation {self.name!r} at {self.location} is given '
          f'{len(self._parameter_types)} parameter types, which do not fit '
          f'its parameters ({e}): one type per parameter, as in '
          '@federated_computation(type_at_server(T), type_at_clients(U)).'
      ) from None
    except ValueError:
      pass  # No signature to check (a builtin); tracing will tell.

  @property
  def parameter_types(self):
    return self._parameter_types

  def trace(self):
    """The `ir.Graph` of this computation (traced once)."""
    if self._graph is None:
      names = _parameter_names(self._fn, len(self._parameter_types))
      parameters = tuple(ir.Value(t, name=n)
                         for t, n in zip(self._parameter_types, names))
      graph = ir.Graph(self.name, parameters, [], None)
      with ir.tracing(graph):
        graph.result = tf.nest.map_structure(self._result_leaf,
                                             self._fn(*parameters))
      self._graph = graph
    return self._graph

  def _result_leaf(self, leaf):
    """A federated value; or, as TFF allows a computation called from
    Python to return them, an unplaced value: a constant or a
    tf_computation's result, computed when the computation runs."""
    if isinstance(leaf, (ir.Value, ir.Unplaced)):
      return leaf
    location = self.location  # The user's return line is gone by now.
    try:
      constant = np.asarray(leaf)
      if constant.dtype == object:
        raise TypeError('not a constant')
    except (TypeError, ValueError):
      raise errors.FederatedError(
          f'{self.describe_for_error()} returned '
          f'{naming.describe_object(leaf)}; it must return federated '
          'values or constants.') from None
    dtype = tf.string if constant.dtype.kind in 'SU' else None
    if isinstance(leaf, (bool, int, float)):
      dtype = None  # TensorFlow's defaults for Python numbers: int32, float32.
      constant = leaf
    return ir.Unplaced(TFComputation(
        lambda: tf.constant(constant, dtype=dtype), (),
        name=f'constant {naming.describe_object(leaf)}', location=location),
                       location)

  @property
  def result_types(self):
    return tf.nest.map_structure(
        lambda v: (v.computation.result_spec if isinstance(v, ir.Unplaced)
                   else v.type_signature), self.trace().result)

  def __call__(self, *args):
    if ir._TRACE.stack:  # pylint: disable=protected-access
      # Composition: inline into the computation being traced.
      if len(args) != len(self._parameter_types):
        raise errors.FederatedError(
            f'{self.describe_for_error()} called at {naming.user_location()} '
            f'with {len(args)} arguments; it takes '
            f'{len(self._parameter_types)}.')
      for arg, t in zip(args, self._parameter_types):
        if not isinstance(arg, ir.Value) or not _fits(arg.type_signature, t):
          raise errors.FederatedError(
              f'{self.describe_for_error()} called at {naming.user_location()} '
              f'expects {t}, got {naming.describe_object(arg)}.')
      return self._fn(*args)
    return context.run(self, *args)

  @property
  def type_signature(self):
    """TFF's `FunctionType`: `({float32}@CLIENTS -> float32@SERVER)`."""
    return ft.FunctionType(
        ft.parameter_of(self._parameter_types,
                        _parameter_names(self._fn,
                                         len(self._parameter_types))),
        self.result_types)

  def describe_for_error(self):
    return f'federated_computation {self.name!r} defined at {self.location}'

  def __repr__(self):
    params = ', '.join(str(t) for t in self._parameter_types)
    return f'<federated_computation {self.name}({params})>'


# Plain Python on the arguments, kept out of AutoGraph's conversion of the
# functions calling them (it would rewrite their expressions).
@tf.autograph.experimental.do_not_convert
def _given_from_python(specs, args):
  """Arguments given from Python as the computation takes them: a list
  where a sequence goes is a dataset of its elements, a dataset is as TFF
  gives it (`given_datasets.as_given`)."""
  return [given_datasets.as_given(arg) if isinstance(arg, tf.data.Dataset)
          else ft.with_sequences(spec, arg) for spec, arg in zip(specs, args)]


@tf.autograph.experimental.do_not_convert
def _in_attrs_containers(specs, args):
  return [ft.with_attrs_containers(spec, arg)
          for spec, arg in zip(specs, args)]


def _parameter_names(fn, count):
  """The names of `fn`'s first `count` parameters (`argN` where unknown)."""
  try:
    names = list(inspect.signature(fn).parameters)[:count]
  except (TypeError, ValueError):
    names = []
  return names + [f'arg{i}' for i in range(len(names), count)]


def _check_parameter_types(parameter_types, location):
  for t in parameter_types:
    if not isinstance(t, ft.FederatedType):
      hint = (' Its parameters are all placed or all unplaced (then it is a '
              'computation at one place, a tf_computation): write '
              'type_at_server(T) or type_at_clients(T) for a placed one.'
              if ft.is_type(t) else '')
      raise errors.FederatedError(
          f'federated_computation at {location}: its parameter types must be '
          'FederatedTypes (type_at_server / type_at_clients), got '
          f'{naming.describe_object(t)}.{hint}')


def _fits(actual, expected):
  return (actual.placement == expected.placement and
          ft.same_member(actual.member, expected.member))


def _unplaced(types):
  """Whether every parameter type is unplaced (a member type)."""
  return bool(types) and all(
      not isinstance(t, ft.FederatedType) and ft.is_type(t) for t in types)


def _computation(fn, types, location):
  if _unplaced(types):
    # TFF lets a federated computation take unplaced values (a tutorial's
    # `local_train` over one client's batches): it runs at one place, which
    # is what a tf_computation is here; federated_map then applies it.
    return TFComputation(fn, types, location=location)
  return FederatedComputation(fn, types, location=location)


def federated_computation(*args):
  """Decorator: `@federated_computation(type_at_server(T), type_at_clients(T))`;
  bare `@federated_computation` for no parameter; or
  `federated_computation(fn, type, ...)`. With only unplaced parameter types
  (`tf.float32`, `SequenceType(T)`, ...) the result is a tf_computation."""
  location = naming.user_location()
  if args and callable(args[0]) and not isinstance(
      args[0], ft.FederatedType) and not ft.is_type(args[0]):
    return _computation(args[0], args[1:], location)
  if not _unplaced(args):
    _check_parameter_types(args, location)

  def decorate(fn):
    if not callable(fn):
      raise errors.FederatedError(
          f'federated_computation at {location}: expected a function to '
          f'decorate, got {naming.describe_object(fn)}.')
    return _computation(fn, args, location)

  return decorate
