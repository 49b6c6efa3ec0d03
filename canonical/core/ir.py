"""The federated IR: what tracing a federated computation records.

Like a jaxpr: a list of operations in the order they were traced (so already
topologically sorted), each consuming and producing `Value`s with federated
types. Every operation remembers the user's source line for error messages.
"""

import dataclasses
import linecache
import os
import sys
import sysconfig
import threading

import tensorflow as tf


class FederatedError(TypeError):
  """A federated program is ill-typed or cannot be expressed; names where."""


@dataclasses.dataclass(frozen=True)
class Location:
  filename: str
  lineno: int

  def __str__(self):
    line = linecache.getline(self.filename, self.lineno).strip()
    where = f'{os.path.basename(self.filename)}:{self.lineno}'
    return f'{where} ({line})' if line else where


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The language and what runs it: a frame here is never the user's line.
_LIBRARY_DIRS = tuple(os.path.join(_PACKAGE_DIR, d) + os.sep for d in (
    'core', 'compiler', 'templates', 'executors'))
_STDLIB_DIR = os.path.abspath(sysconfig.get_paths()['stdlib'])


def is_library_file(filename):
  """Whether a frame in `filename` is library code rather than the user's.

  The language and what runs it (`canonical`'s own modules and its `core`,
  `compiler`, `templates` and `executors`), installed packages (TensorFlow,
  Keras), the standard library and AutoGraph's generated files are library;
  everything else, `canonical.learning` and `canonical.aggregators`
  included, is user code.
  """
  if not filename or filename.startswith('<'):
    return True
  path = os.path.abspath(filename)
  parts = path.split(os.sep)
  return (os.path.dirname(path) == _PACKAGE_DIR or
          path.startswith(_LIBRARY_DIRS) or
          'site-packages' in parts or 'dist-packages' in parts or
          path.startswith(_STDLIB_DIR + os.sep) or
          os.path.basename(path).startswith('__autograph_generated_file'))


def user_location():
  """The innermost stack frame outside the library: the user's line."""
  frame = sys._getframe(1)  # pylint: disable=protected-access
  while frame is not None:
    if not is_library_file(frame.f_code.co_filename):
      return Location(frame.f_code.co_filename, frame.f_lineno)
    frame = frame.f_back
  return Location('<unknown>', 0)


def location_of_tf_op(op):
  """The user's line that created TF op `op` (AutoGraph lines mapped back)."""
  for frame in reversed(list(getattr(op, 'traceback', None) or ())):
    if not is_library_file(frame.filename):
      return Location(frame.filename, frame.lineno)
  return None


def describe_object(obj):
  """A short name for `obj` in an error message: computations and functions
  by their names and lines, never by a repr that shows a memory address."""
  describe = getattr(obj, 'describe_for_error', None)
  if callable(describe) and not isinstance(obj, type):
    return describe()
  if isinstance(obj, type):
    return f'the class {obj.__qualname__}'
  code = getattr(obj, '__code__', None)
  if code is not None:
    where = Location(code.co_filename, code.co_firstlineno)
    return (f'the Python function {getattr(obj, "__qualname__", "?")!r} '
            f'defined at {where}')
  if isinstance(obj, tf.data.Dataset):
    from canonical.core import types as ft  # pylint: disable=g-import-not-at-top
    return f'a dataset {ft.describe(ft.spec_of(obj))}'
  if tf.is_tensor(obj):
    dims = ','.join('?' if d is None else str(d) for d in obj.shape.as_list()) \
        if obj.shape.rank is not None else '...'
    return f'a tensor {obj.dtype.name}[{dims}]'
  text = repr(obj)
  if ' at 0x' in text or ' object at ' in text:
    return f'a {type(obj).__name__} object'
  return text if len(text) <= 80 else text[:77] + '...'


class Unplaced:
  """A tf_computation's result called for while tracing a federated
  computation (`init_fn()`): it has no placement until `federated_value`
  places it, which runs `computation` in the piece at that placement."""

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
    from canonical.core import intrinsics  # pylint: disable=g-import-not-at-top
    return intrinsics.select(self, key)

  def __getattr__(self, name):
    # Fields of a namedtuple member select like indices: `output.loss`.
    type_signature = self.__dict__.get('type_signature')
    if name.startswith('_') or type_signature is None:
      raise AttributeError(name)
    fields = getattr(type_signature.member, '_fields', ())
    if name in fields:
      return self[fields.index(name)]
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
  location: Location

  def describe(self):
    return f'{self.kind} at {self.location}'


@dataclasses.dataclass(eq=False)
class Graph:
  """A traced federated computation."""
  name: str
  parameters: tuple
  ops: list
  result: object  # A structure of `Value`s.

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
                           f'{describe_object(value)}.')
  output = Value(output_type)
  op = Op(kind, tuple(inputs), output, dict(attrs or {}),
          location or user_location())
  output.producer = op
  graph.ops.append(op)
  return output


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
