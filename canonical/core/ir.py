"""The federated IR: what tracing a federated computation records.

Like a jaxpr: a list of operations in the order they were traced (so already
topologically sorted), each consuming and producing `Value`s with federated
types. Every operation remembers the user's source line for error messages.
"""

import dataclasses
import threading

import tensorflow as tf

from canonical.core import naming
from canonical.core import types as ft
from canonical.errors import FederatedError


class Unplaced:
  """A tf_computation's result called for while tracing a federated
  computation (`init_fn()`): it has no placement until `federated_value`
  places it, which runs `computation` in the piece at that placement."""

  placement = None  # Not placed: a federated value's checks say so.

  def __init__(self, computation, location):
    self.computation = computation  # A TFComputation with no parameter.
    self.location = location

  def describe_for_error(self):
    return (f'the unplaced result of {self.computation.describe_for_error()} '
            f'called at {self.location} (place it with '
            'federated_value(value, SERVER or CLIENTS))')

  def __bool__(self):
    raise FederatedError(f'{self.describe_for_error()} has no truth value '
                         'while tracing.')

  def __getitem__(self, key):
    return self.computation.unplaced_element(key, self.location)

  def __iter__(self):  # `a, b = init()`: a struct result unpacks.
    result = self.computation.result_spec
    if not isinstance(result, (tuple, list)):
      raise FederatedError(f'{self.describe_for_error()} is not a tuple to '
                           'unpack.')
    return (self[i] for i in range(len(result)))

  def __repr__(self):
    return f'<unplaced {self.computation.name}()>'


class Value:
  """A federated value during tracing: typed, produced by an `Op` or a parameter."""

  def __init__(self, type_signature, producer=None, name=None):
    self.type_signature = type_signature
    self.producer = producer
    self.name = name

  @property
  def placement(self):
    return self.type_signature.placement

  @property
  def member(self):
    return self.type_signature.member

  def __getitem__(self, key):
    return select(self, key)

  def __getattr__(self, name):
    # A named element selects by name, as in TFF: `output.loss` (a
    # namedtuple's or Struct's by its index, a dict's by its key).
    type_signature = self.__dict__.get('type_signature')
    if name.startswith('_') or type_signature is None:
      raise AttributeError(name)
    member = type_signature.member
    fields = ([n for n, _ in ft.elements_of(member) if n is not None]
              if isinstance(member, ft.StructType) else [])
    if name in fields:
      return self[name if isinstance(member, dict) else fields.index(name)]
    raise AttributeError(
        f'{self!r} has no attribute {name!r}' +
        (f' (its fields are {", ".join(fields)})' if fields else ''))

  def __iter__(self):
    member = self.member
    if not isinstance(member, (tuple, list)):
      raise FederatedError(f'Cannot unpack a federated value of type '
                           f'{self.type_signature}: only tuples unpack.')
    return iter([self[i] for i in range(len(member))])

  def __len__(self):
    return len(self.member)

  def __bool__(self):
    raise FederatedError(
        'A federated value has no truth value while tracing: use tf.cond '
        'inside a tf_computation instead of Python control flow.')

  def __repr__(self):
    label = self.name or (self.producer.kind if self.producer else 'param')
    return f'<{label}: {self.type_signature}>'


@dataclasses.dataclass(eq=False)
class Op:
  """One intrinsic application. `attrs` holds its computations and constants."""
  kind: str
  inputs: tuple
  output: Value
  attrs: dict
  location: naming.Location

  def describe(self):
    return f'{self.kind} at {self.location}'


@dataclasses.dataclass(eq=False)
class Graph:
  """A traced federated computation."""
  name: str
  parameters: tuple
  ops: list
  result: object  # A structure of `Value`s.
  # (value, fact) pairs: facts about values that the compiler carries into
  # the form when the round uses the value (a DP aggregator's release).
  notes: list = dataclasses.field(default_factory=list)

  def result_values(self):
    return [v for v in tf.nest.flatten(self.result) if isinstance(v, Value)]


class _TraceState(threading.local):

  def __init__(self):
    self.stack = []


_TRACE = _TraceState()


class tracing:  # pylint: disable=invalid-name
  """Context in which intrinsics append ops to `graph`."""

  def __init__(self, graph):
    self.graph = graph

  def __enter__(self):
    _TRACE.stack.append(self.graph)
    return self.graph

  def __exit__(self, *exc):
    _TRACE.stack.pop()


def current_graph(intrinsic_name):
  if not _TRACE.stack:
    raise FederatedError(
        f'{intrinsic_name} can only be called while tracing a '
        'federated_computation.')
  return _TRACE.stack[-1]


def add_op(kind, inputs, output_type, attrs=None, location=None):
  """Appends an op to the graph being traced; returns its output value."""
  graph = current_graph(kind)
  for value in inputs:
    if not isinstance(value, Value):
      raise FederatedError(f'{kind}: expected federated values, got '
                           f'{naming.describe_object(value)}.')
  output = Value(output_type)
  op = Op(kind, tuple(inputs), output, dict(attrs or {}),
          location or naming.user_location())
  output.producer = op
  graph.ops.append(op)
  return output


def note(value, fact):
  """Records `fact` about `value` in the graph being traced (`Graph.notes`)."""
  current_graph('note').notes.append((value, fact))


def noted(graph, kind):
  """The facts of type `kind` noted about values the result depends on."""
  live = upstream_ops(graph.result_values())
  return tuple(fact for value, fact in graph.notes
               if isinstance(fact, kind) and value.producer is not None
               and id(value.producer) in live)


def upstream_ops(values):
  """Every op that `values` depend on, in trace order."""
  seen, stack = set(), list(values)
  while stack:
    value = stack.pop()
    op = value.producer
    if op is not None and id(op) not in seen:
      seen.add(id(op))
      stack.extend(op.inputs)
  return seen


SELECT = 'select'  # The kind of the ops `value[key]` records.


def _selects(member, key):
  """Whether `key` selects a part of values of type `member` as they are
  held: a mapping by its keys, a tuple or list by position (a `Struct` by
  name too). A struct type answers more (TFF's `t[0]` of a named one)."""
  if isinstance(member, dict):
    return isinstance(key, str) and key in dict.keys(member)
  if isinstance(member, (tuple, list)):
    return isinstance(key, (int, slice)) or (
        isinstance(key, str) and issubclass(ft.value_container(member),
                                            ft.Struct))
  return False


def select_type(value, key):
  """The type rule of `select`: one part of a structured value, where it is."""
  try:
    if not _selects(value.member, key):
      raise KeyError(key)
    part = value.member[key]
  except (KeyError, IndexError, TypeError):
    raise FederatedError(f'select at {naming.user_location()}: {value!r} has '
                         f'no element {key!r}.') from None
  return ft.FederatedType(part, value.placement,
                          value.type_signature.all_equal)


def select(value, key):
  """One part of a structured federated value (`value[key]`): a projection,
  recorded as a `select` op (the registry's `select` intrinsic). A named
  struct's element is selected by its name, given by position too, as in
  TFF: `value[0]` of `<a=...,b=...>` is `value['a']`."""
  member = value.type_signature.member
  if isinstance(member, dict) and isinstance(key, int) and not isinstance(
      key, bool) and -len(member) <= key < len(member):
    key = list(dict.keys(member))[key]
  return add_op(SELECT, [value], select_type(value, key), attrs={'key': key})
