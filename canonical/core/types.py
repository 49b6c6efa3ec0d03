"""Types: TensorFlow Federated 0.87's type classes, which are also the
structures of `tf.TensorSpec` / `tf.data.DatasetSpec` the language computes
with.

The language treats a member type (what one place holds) as a structure
that `tf.nest` walks, whose leaves are `tf.TensorSpec`s and
`tf.data.DatasetSpec`s: the compiler flattens it, tf.functions take it as
their input signature. TFF's users treat a type as an object of its classes:
`isinstance(t, tff.StructType)`, `t.is_assignable_from(u)`, `t.member`,
`t.python_container`. Here one object is both, so every type a user meets
(`type_signature`, `state_type`, `.member`, `to_type(...)`) answers TFF's
questions while the language keeps computing with it as before:

* `TensorType` is a `tf.TensorSpec`, `SequenceType` a `tf.data.DatasetSpec`
  (leaves to `tf.nest`; a tf.function takes them). `TensorType.dtype` is a
  `tf.DType` that also answers numpy (`np.dtype(t.dtype)`,
  `np.issubdtype(t.dtype, np.floating)`); `shape` is a `tf.TensorShape`,
  which equals TFF's tuple.
* A struct type is an instance of its Python container: a class made (once
  per container) from the container and `StructType`, so that
  `StructWithPythonType([...], OrderedDict)` is an OrderedDict of element
  types, one with a namedtuple container is that namedtuple. `tf.nest`
  walks it as it walks the container, and whatever it (or a tf.function)
  rebuilds from one is the plain container of the new leaves: a type never
  holds values. A struct without a Python container holds its elements in a
  dict when they are named (so it matches OrderedDict-typed values, as
  TFF's assignability does), else in a tuple; one made from a `Struct` value
  (and a computation's several parameters) is a `Struct` layout, whose
  values are `Struct`s, as TFF gives them.
* What the container decides stays the container's: a struct type held in a
  dict iterates its names, as a dict does (TFF's iterates its element
  types; `tff.structure.iter_elements`, `t[0]`, `t.x` and `t['x']` work on
  both). Struct types are immutable and hashable.
* Equality between types is TFF's (containers, names and elements); between
  a type and a plain structure of specs it is the plain structure's.

`FederatedType`, `FunctionType`, `AbstractType` and `PlacementType` are
plain classes. Assignability follows TFF 0.87's rules (tests hold them to
TFF's answers on a table of pairs).
"""

import abc
import collections
import collections.abc
import difflib
import enum
from typing import Optional, Union

import numpy as np
import tensorflow as tf

from canonical.core import naming
from canonical.core import struct as struct_lib
# The language's helpers over member structures, under their old home.
from canonical.core.member_structures import (  # pylint: disable=unused-import
    by_name, check_member, dataset_mismatch, has_dataset, is_fully_defined,
    same_member, spec_of, with_sequences)
from canonical.core.naming import describe
from canonical.core.naming import form_text  # pylint: disable=unused-import
from canonical.core.struct import Struct
from canonical import errors


class Placement(enum.Enum):
  SERVER = 'SERVER'
  CLIENTS = 'CLIENTS'

  def __str__(self):
    return self.value

  @property
  def uri(self):
    """TFF's name of the placement in serialized types."""
    return self.value.lower()

  @property
  def default_all_equal(self):
    return self is Placement.SERVER


SERVER = Placement.SERVER
CLIENTS = Placement.CLIENTS

def _fail(where, message):
  raise errors.FederatedError(f'{where} at {naming.user_location()}: {message}')


# ----------------------------------------------------------------------------
# TFF's relations between types, and their errors.


class UnexpectedTypeError(errors.Error, TypeError):
  """A type of another kind than expected."""

  def __init__(self, expected, actual):
    super().__init__(f'Expected type of kind {expected}, found type {actual}')
    self.expected = expected
    self.actual = actual


@enum.unique
class TypeRelation(enum.Enum):
  EQUIVALENT = 'equivalent'
  IDENTICAL = 'identical'
  ASSIGNABLE = 'assignable'


_LINE = 100  # Longer types are shown formatted, with a diff.


def type_mismatch_error_message(first, second, relation,
                                second_is_expected=False):
  """Why `first` is not `relation` to `second`: both types, formatted and
  diffed when they are long, by their reprs when their texts agree."""
  first, second = to_type(first), to_type(second)
  first_text = first.compact_representation()
  second_text = second.compact_representation()
  diff = None
  if first_text == second_text:
    # They differ in what the text does not show (containers).
    first_text, second_text = repr(first), repr(second)
  elif max(len(first_text), len(second_text)) > _LINE:
    first_text = first.formatted_representation()
    second_text = second.formatted_representation()
    diff = '\n'.join(difflib.unified_diff(first_text.split('\n'),
                                          second_text.split('\n')))
  parts = ['Type', f'`{first_text}`',
           f'is not {relation.value} to '
           f'{"expected " if second_is_expected else ""}type',
           f'`{second_text}`']
  if diff:
    parts.append(f'\nDiff:\n{diff}')
  line = ' '.join(parts)
  return '\n'.join(parts) if len(line) > _LINE or '\n' in line else line


class TypeNotAssignableError(errors.Error, TypeError):

  def __init__(self, source_type, target_type):
    self.message = type_mismatch_error_message(source_type, target_type,
                                               TypeRelation.ASSIGNABLE)
    super().__init__(self.message)
    self.source_type = source_type
    self.target_type = target_type


class TypesNotEquivalentError(errors.Error, TypeError):

  def __init__(self, first_type, second_type):
    self.message = type_mismatch_error_message(first_type, second_type,
                                               TypeRelation.EQUIVALENT)
    super().__init__(self.message)
    self.first_type = first_type
    self.second_type = second_type


class TypesNotIdenticalError(errors.Error, TypeError):

  def __init__(self, first_type, second_type):
    self.message = type_mismatch_error_message(first_type, second_type,
                                               TypeRelation.IDENTICAL)
    super().__init__(self.message)
    self.first_type = first_type
    self.second_type = second_type


# ----------------------------------------------------------------------------
# The type classes.


class Type(abc.ABC):
  """TFF's `tff.Type`: what every type here is an instance of."""

  __slots__ = ()

  def compact_representation(self) -> str:
    """The type on one line: `<x=int32,y=float32[2]>`."""
    return ''.join(line.rstrip() for line in _lines(self, formatted=False))

  def formatted_representation(self) -> str:
    """The type over several lines, a struct's elements indented."""
    return '\n'.join(line.rstrip() for line in _lines(self, formatted=True))

  @abc.abstractmethod
  def children(self):
    """The immediate child types."""

  def __str__(self):
    return self.compact_representation()

  def check_assignable_from(self, source_type) -> None:
    if not self.is_assignable_from(source_type):
      raise TypeNotAssignableError(source_type=source_type, target_type=self)

  @abc.abstractmethod
  def is_assignable_from(self, source_type) -> bool:
    """Whether values of `source_type` can be used where this type is."""

  def check_equivalent_to(self, other) -> None:
    if not self.is_equivalent_to(other):
      raise TypesNotEquivalentError(self, other)

  def is_equivalent_to(self, other) -> bool:
    other = _as_type_or_none(other)
    return (other is not None and self.is_assignable_from(other) and
            other.is_assignable_from(self))

  def check_identical_to(self, other) -> None:
    if not self.is_identical_to(other):
      raise TypesNotIdenticalError(self, other)

  def is_identical_to(self, other) -> bool:
    return self == other


def _as_type_or_none(value):
  """`value` as a type (a spec structure is one here), or None."""
  if isinstance(value, Type):
    return value
  try:
    return to_type(value)
  except (errors.Error, TypeError, ValueError):
    return None


# TensorType --------------------------------------------------------------


class _NumpyDType(tf.dtypes.DType):
  """A `tf.DType` that numpy reads as its own dtype, as TFF 0.87's
  `TensorType.dtype` is: `np.dtype(d)`, `np.issubdtype(d, np.floating)`,
  `d.type`, `d.kind`, `d.itemsize`. TensorFlow reads it as the DType it is."""

  @property
  def type(self):
    return np.str_ if self.as_datatype_enum == tf.string.as_datatype_enum \
        else self.as_numpy_dtype

  @property
  def dtype(self):  # numpy's protocol: np.dtype(obj) reads obj.dtype.
    return np.dtype(self.type)

  @property
  def kind(self):
    return self.dtype.kind

  @property
  def itemsize(self):
    return self.dtype.itemsize

  @property
  def char(self):
    return self.dtype.char

  @property
  def str(self):
    return self.dtype.str


_DTYPES = {}


def _numpy_dtype(dtype):
  enum_value = dtype.as_datatype_enum
  if enum_value not in _DTYPES:
    _DTYPES[enum_value] = _NumpyDType(enum_value)
  return _DTYPES[enum_value]


def _as_dtype(value):
  """The tf.DType `value` names (tf.float32, np.float32, a numpy dtype), or
  None."""
  if isinstance(value, tf.DType):
    return tf.as_dtype(value)
  if isinstance(value, np.dtype) or (
      isinstance(value, type) and issubclass(value, np.generic)):
    try:
      return tf.as_dtype(value)
    except TypeError:
      return None
  return None


def _is_shape(value):
  if value is None or isinstance(value, tf.TensorShape):
    return True
  return isinstance(value, (list, tuple)) and all(
      d is None or (isinstance(d, (int, np.integer)) and not isinstance(
          d, bool)) for d in value)


class TensorType(Type, tf.TensorSpec):
  """TFF's `TensorType(dtype, shape=())`: a `tf.TensorSpec` with no name.
  `shape=None` means an unknown rank; a tf.DType is taken too."""

  __slots__ = ()

  def __init__(self, dtype, shape=()):  # pylint: disable=super-init-not-called
    as_dtype = _as_dtype(dtype)
    if as_dtype is None:
      _fail('TensorType', f'expected a dtype such as np.float32, got '
            f'{naming.describe_object(dtype)}.')
    if not _is_shape(shape):
      _fail('TensorType', f'expected a shape (a list of ints and None, or '
            f'None), got {naming.describe_object(shape)}.')
    tf.TensorSpec.__init__(self, tf.TensorShape(shape), as_dtype)
    self._dtype = _numpy_dtype(as_dtype)

  def children(self):
    return iter(())

  def is_assignable_from(self, source_type) -> bool:
    source = _as_type_or_none(source_type)
    if not isinstance(source, TensorType) or self.dtype != source.dtype:
      return False
    target_dims, source_dims = self.shape.dims, source.shape.dims
    if target_dims is None:
      return True
    if source_dims is None or len(target_dims) != len(source_dims):
      return False
    return all(t.value is None or t.value == s.value
               for t, s in zip(target_dims, source_dims))

  def _plain(self):
    return tf.TensorSpec(self.shape, tf.as_dtype(self.dtype))

  def __eq__(self, other):
    if self is other:
      return True
    if not isinstance(other, tf.TensorSpec):
      return NotImplemented
    return self.dtype == other.dtype and self.shape == other.shape

  def __ne__(self, other):
    equal = self.__eq__(other)
    return equal if equal is NotImplemented else not equal

  __hash__ = tf.TensorSpec.__hash__

  def __repr__(self):
    dtype = f'np.{self.dtype.type.__name__}'
    if self.shape.rank == 0:
      return f'TensorType({dtype})'
    shape = None if self.shape.rank is None else tuple(self.shape.as_list())
    return f'TensorType({dtype}, {shape!r})'

  def __reduce__(self):
    shape = None if self.shape.rank is None else self.shape.as_list()
    return TensorType, (tf.as_dtype(self.dtype), shape)

  def __copy__(self):
    return self

  def __deepcopy__(self, memo):
    return self

  # TensorFlow's own operations on specs give plain TensorSpecs back.
  @classmethod
  def _deserialize(cls, serialization):
    return tf.TensorSpec(*serialization)

  def is_compatible_with(self, spec_or_tensor):
    return self._plain().is_compatible_with(spec_or_tensor)

  def is_subtype_of(self, other):
    return self._plain().is_subtype_of(_plain_spec(other))

  def most_specific_common_supertype(self, others):
    return self._plain().most_specific_common_supertype(
        [_plain_spec(o) for o in others])


def _plain_spec(spec):
  plain = getattr(spec, '_plain', None)
  return plain() if callable(plain) else spec


# SequenceType --------------------------------------------------------------


class SequenceType(Type, tf.data.DatasetSpec):
  """TFF's `SequenceType(element)`: a `tf.data.DatasetSpec` whose element
  type is `element` (lists in it become tuples, as datasets make them)."""

  def __init__(self, element):  # pylint: disable=super-init-not-called
    element = _tuples_for_lists(to_member(element, 'SequenceType'))
    if has_dataset(element):
      _fail('SequenceType', f'elements cannot be sequences, got '
            f'{describe(element)}.')
    tf.data.DatasetSpec.__init__(self, element)

  @property
  def element(self):
    return self._element_spec

  def children(self):
    yield self._element_spec

  def is_assignable_from(self, source_type) -> bool:
    source = _as_type_or_none(source_type)
    return isinstance(source, SequenceType) and (
        self.element.is_assignable_from(source.element))

  def _plain(self):
    return tf.data.DatasetSpec(self._element_spec, self._dataset_shape)

  def __eq__(self, other):
    if self is other:
      return True
    if not isinstance(other, tf.data.DatasetSpec):
      return NotImplemented
    return self.element == other.element_spec

  def __ne__(self, other):
    equal = self.__eq__(other)
    return equal if equal is NotImplemented else not equal

  def __hash__(self):
    return hash(('SequenceType', self.element))

  def __repr__(self):
    return f'SequenceType({self.element!r})'

  def __reduce__(self):
    return SequenceType, (self.element,)

  def __copy__(self):
    return self

  def __deepcopy__(self, memo):
    return self

  @classmethod
  def _deserialize(cls, serialization):
    return tf.data.DatasetSpec(*serialization)

  def is_compatible_with(self, spec_or_value):
    return self._plain().is_compatible_with(_plain_spec(spec_or_value))

  def is_subtype_of(self, other):
    return self._plain().is_subtype_of(_plain_spec(other))

  def most_specific_common_supertype(self, others):
    return self._plain().most_specific_common_supertype(
        [_plain_spec(o) for o in others])


def _tuples_for_lists(member):
  """`member` with list containers made tuples (a dataset's elements)."""
  if isinstance(member, StructType):
    pairs = [(name, _tuples_for_lists(value))
             for name, value in elements_of(member)]
    container = type(member)._container  # pylint: disable=protected-access
    if issubclass(container, list):
      container = tuple
    python_container = member.python_container
    if python_container is list:
      python_container = tuple
    return _struct(pairs, container, python_container)
  return member


# Struct types --------------------------------------------------------------


class StructType(Struct, Type):
  """TFF's `StructType(elements, *, convert=True)`: a structure of types,
  each named or not. Without a Python container: a dict of the element
  types when they are named, a tuple when they are not."""

  __slots__ = ()
  _container = tuple  # What holds the elements (set by each class).
  _python_container = None  # TFF's `python_container`.

  def __new__(cls, elements, *, convert=True):
    del convert  # Elements are types, or converted to types, either way.
    pairs = _named_types(elements, 'StructType')
    named = [name is not None for name, _ in pairs]
    if any(named) and not all(named):
      _fail('StructType', 'name every element or none (a struct with some '
            'names has no Python value: TFF 0.87 cannot return one either).')
    return _struct(pairs, dict if any(named) else tuple, None)

  @property
  def python_container(self):
    return type(self)._python_container

  def children(self):
    return iter([value for _, value in elements_of(self)])

  def is_assignable_from(self, source_type) -> bool:
    source = _as_type_or_none(source_type)
    if source is self:
      return True
    if not isinstance(source, StructType):
      return False
    target_elements, source_elements = _in_order(self), _in_order(source)
    if len(target_elements) != len(source_elements):
      return False
    return all(
        (source_name is None or source_name == target_name) and
        target.is_assignable_from(value)
        for (target_name, target), (source_name, value) in zip(
            target_elements, source_elements))


class StructWithPythonType(StructType):
  """TFF's `StructWithPythonType(elements, container_type)`: a struct type
  whose values are `container_type`s (tuple, list, dict, OrderedDict, a
  namedtuple or an attrs class); the type is an instance of that container
  (of a `Struct` layout of its fields for an attrs class)."""

  __slots__ = ()

  def __new__(cls, elements, container_type):
    pairs = _named_types(elements, 'StructWithPythonType')
    names = [name for name, _ in pairs if name is not None]
    if names and len(names) != len(pairs):
      _fail('StructWithPythonType', 'name every element or none.')
    fields = getattr(container_type, '_fields', None)
    is_class = isinstance(container_type, type)
    if is_class and issubclass(container_type, tuple) and fields is not None:
      if names and list(fields) != names:
        _fail('StructWithPythonType', f'{container_type.__name__} has fields '
              f'{list(fields)}, the elements are named {names}.')
      if len(fields) != len(pairs):
        _fail('StructWithPythonType', f'{container_type.__name__} has '
              f'{len(fields)} fields, given {len(pairs)} elements.')
      pairs = [(name, value) for name, (_, value) in zip(fields, pairs)]
    elif is_class and issubclass(container_type, dict):
      if not names and pairs:
        _fail('StructWithPythonType', f'a {container_type.__name__} needs '
              'named elements, (name, type) pairs.')
    elif is_class and issubclass(container_type, (tuple, list)):
      if names:
        _fail('StructWithPythonType', f'a {container_type.__name__} holds '
              'unnamed elements; use dict, OrderedDict or a namedtuple class '
              'for named ones.')
    elif _is_attrs_class(container_type):
      fields = [a.name for a in container_type.__attrs_attrs__]
      if (names or fields) != fields or len(fields) != len(pairs):
        _fail('StructWithPythonType', f'{container_type.__name__} has fields '
              f'{fields}, the elements are {[n for n, _ in pairs]}.')
      pairs = [(name, value) for name, (_, value) in zip(fields, pairs)]
      return _struct(pairs, struct_lib.layout(tuple(fields)), container_type)
    else:
      _fail('StructWithPythonType', f'the container must be tuple, list, '
            f'dict, OrderedDict, a namedtuple or an attrs class, got '
            f'{naming.describe_object(container_type)}.')
    return _struct(pairs, container_type, container_type)


def _is_attrs_class(cls):
  return isinstance(cls, type) and getattr(
      cls, '__attrs_attrs__', None) is not None


def _named_types(elements, where):
  """`(name or None, type)` pairs of TFF's element specifications: a list of
  types or of (name, type) pairs, a mapping, a namedtuple or a Struct."""
  if isinstance(elements, Struct):  # Its values, unnamed, as TFF takes it.
    pairs = [(None, value) for _, value in elements_of(elements)]
  elif _is_pair(elements):
    pairs = [elements]
  elif hasattr(elements, '_asdict') and isinstance(elements, tuple):
    pairs = list(elements._asdict().items())
  elif isinstance(elements, collections.abc.Mapping):
    pairs = list(elements.items())
  elif isinstance(elements, collections.abc.Iterable) and not isinstance(
      elements, (str, bytes)):
    pairs = [e if _is_pair(e) else (None, e) for e in elements]
  else:
    _fail(where, f'expected a list of types or of (name, type) pairs, got '
          f'{naming.describe_object(elements)}.')
  names = [name for name, _ in pairs if name is not None]
  if len(set(names)) != len(names):
    _fail(where, f'repeated names in {names}.')
  return [(name, _to_type(value, where)) for name, value in pairs]


def _is_pair(value):
  return (isinstance(value, tuple) and not hasattr(value, '_fields') and
          len(value) == 2 and isinstance(value[0], str))


class _StructBehaviour:
  """What every struct type's class does, before its container's methods
  (its container comes next in the class's order, then `StructType`)."""

  __slots__ = ()
  _value_container = tuple  # What tf.nest rebuilds from one.

  def __new__(cls, *args, **kwargs):
    # tf.nest, a tf.function or `type(t)(...)` rebuilding a structure like
    # this type: the plain container of what it is given.
    return cls._value_container(*args, **kwargs)

  def __init__(self, *args, **kwargs):
    del args, kwargs  # Built by _struct.

  @classmethod
  def _make(cls, iterable):  # A namedtuple's, building its plain values.
    return cls._value_container(*iterable)

  def __getitem__(self, key):
    container = type(self)._container
    if isinstance(key, str):
      if issubclass(container, dict):
        return dict.__getitem__(self, key)
      names = [name for name, _ in elements_of(self)]
      if key not in names:
        raise KeyError(key)
      return container.__getitem__(self, names.index(key))
    if issubclass(container, dict):  # TFF's index into a named struct.
      return list(dict.values(self))[key]
    return container.__getitem__(self, key)

  def __getattr__(self, name):
    if name.startswith('__'):
      raise AttributeError(name)
    for element_name, value in elements_of(self):
      if element_name is not None and element_name == name:
        return value
    raise AttributeError(
        f'the struct type {self} has no element {name!r}')

  def _replace(self, **kwargs):  # A namedtuple's, building plain values.
    return self._make(kwargs.get(name, value)
                      for name, value in elements_of(self))

  def __dir__(self):
    return [name for name, _ in elements_of(self) if name is not None]

  def __eq__(self, other):
    if self is other:
      return True
    if isinstance(other, Type):
      return (isinstance(other, StructType) and
              self.python_container is other.python_container and
              _in_order(self) == _in_order(other))
    # A plain structure of specs compares as that structure does.
    return type(self)._container.__eq__(self, other)

  def __ne__(self, other):
    equal = self.__eq__(other)
    return equal if equal is NotImplemented else not equal

  def __hash__(self):
    return hash(('StructType', self.python_container,
                 tuple(_in_order(self))))

  def __repr__(self):
    members = ', '.join(repr(value) if name is None else
                        f'({name!r}, {value!r})'
                        for name, value in elements_of(self))
    container = self.python_container
    return f'StructType([{members}])' + (
        f' as {container.__name__}' if container is not None else '')

  def __str__(self):
    return self.compact_representation()

  def __reduce__(self):
    container = type(self)._container
    if issubclass(container, Struct):  # A Struct layout: by its names.
      container = struct_lib.names_of(self)
    return _rebuild_struct, (elements_of(self), container,
                             self.python_container)

  def __copy__(self):
    return self

  def __deepcopy__(self, memo):
    return self



def _immutable(self, *args, **kwargs):
  del args, kwargs
  raise errors.InvalidTypeError(
      f'the struct type {self} cannot be changed: types are immutable; '
      'build a new one.')


class _DictStructBehaviour(_StructBehaviour):
  """A struct type held in a dict: its methods that change it refuse."""
  __slots__ = ()
  __setitem__ = __delitem__ = __ior__ = _immutable
  update = pop = popitem = clear = setdefault = move_to_end = _immutable


class _ListStructBehaviour(_StructBehaviour):
  """A struct type held in a list: its methods that change it refuse."""
  __slots__ = ()
  __setitem__ = __delitem__ = __iadd__ = __imul__ = _immutable
  append = extend = insert = remove = sort = reverse = pop = clear = (
      _immutable)


_STRUCT_CLASSES = {}


def _struct_class(container, python_container):
  """The class of struct types held in `container` whose TFF
  `python_container` is `python_container` (None: it has none), cached."""
  key = (container, python_container)
  cls = _STRUCT_CLASSES.get(key)
  if cls is None:
    base = StructType if python_container is None else StructWithPythonType
    named_tuple = issubclass(container, tuple) and hasattr(
        container, '_fields')
    # A named tuple's class name is part of its structure to tf.nest.
    name = container.__name__ if named_tuple else base.__name__
    attributes = {
        '__slots__': (), '__module__': __name__, '__qualname__': name,
        '_container': container, '_python_container': python_container,
        '_value_container': container,
    }
    behaviour = (_DictStructBehaviour if issubclass(container, dict) else
                 _ListStructBehaviour if issubclass(container, list) else
                 _StructBehaviour)
    cls = type(name, (behaviour, container, base), attributes)
    _STRUCT_CLASSES[key] = cls
  return cls


def _struct(pairs, container, python_container):
  """The struct type of `(name, type)` pairs held in `container`."""
  cls = _struct_class(container, python_container)
  values = [value for _, value in pairs]
  if issubclass(container, dict):
    instance = container.__new__(cls)
    for name, value in pairs:
      container.__setitem__(instance, name, value)
    return instance
  if issubclass(container, list):
    instance = list.__new__(cls)
    list.extend(instance, values)
    return instance
  return tuple.__new__(cls, values)


def _rebuild_struct(pairs, container, python_container):
  if not isinstance(container, type):  # The names of a Struct layout.
    container = struct_lib.layout(tuple(container))
  return _struct(pairs, container, python_container)


def elements_of(value):
  """`(name or None, element)` pairs of a struct type, a `Struct` value or a
  Python container (mapping, namedtuple, attrs class, tuple or list), in
  its order."""
  if isinstance(value, Struct) and not isinstance(value, dict):
    names = struct_lib.names_of(value) if not isinstance(
        value, StructType) else _names_of_struct_type(value)
    return list(zip(names, tuple.__iter__(value) if isinstance(
        value, tuple) else list.__iter__(value)))
  if isinstance(value, collections.abc.Mapping):
    return list(value.items())
  fields = getattr(type(value), '_fields', None)
  if isinstance(value, tuple) and fields is not None:
    return list(zip(fields, value))
  attributes = getattr(type(value), '__attrs_attrs__', None)
  if attributes is not None:
    return [(a.name, getattr(value, a.name)) for a in attributes]
  if isinstance(value, (tuple, list)):
    return [(None, v) for v in value]
  raise errors.InvalidTypeError(
      f'expected a structure (a Struct, a struct type, a mapping, a '
      f'namedtuple, a tuple or a list), got {naming.describe_object(value)}.')


def _in_order(struct_type):
  """The elements of a struct type in the order that matters to it: a
  plain dict's by name (dicts compare so, and tf.nest walks them so; TFF
  0.87 keeps their insertion order), any other's as they are."""
  pairs = elements_of(struct_type)
  if struct_type.python_container is dict:
    return sorted(pairs, key=lambda pair: pair[0])
  return pairs


def value_container(member):
  """The class that holds values of type `member`: a struct type's
  container (a `Struct` layout where it has none and names its elements),
  else the class of `member` itself."""
  if isinstance(member, StructType):
    return type(member)._value_container  # pylint: disable=protected-access
  return type(member)


def with_attrs_containers(member, value):
  """`value`, held as `member`'s structure (a traced parameter), with each
  struct whose type's container is an attrs class made an instance of it:
  TFF 0.87 hands a computation such a parameter so, and
  `structure.update_struct` on it gives the class back. Anything else is
  left as it is."""
  if not isinstance(member, StructType) or not any(
      _is_attrs_class(getattr(t, 'python_container', None))
      for t in _struct_types_in(member)):
    return value
  parts = [with_attrs_containers(t, v) for (_, t), (_, v) in zip(
      elements_of(member), elements_of(value))]
  container = member.python_container
  if _is_attrs_class(container):
    return container(**dict(zip(
        (a.name for a in container.__attrs_attrs__), parts)))
  if isinstance(value, dict):
    return type(value)(zip(value.keys(), parts))
  if isinstance(value, tuple) and hasattr(value, '_fields'):
    return type(value)(*parts)
  return type(value)(parts)


def _struct_types_in(member):
  """`member` and every struct type inside it."""
  if not isinstance(member, StructType):
    return []
  found = [member]
  for _, element in elements_of(member):
    found += _struct_types_in(element)
  return found


def _names_of_struct_type(value):
  container = type(value)._container  # pylint: disable=protected-access
  fields = getattr(container, '_fields', None)
  if fields is not None:
    return list(fields)
  names = getattr(container, '_names', None)  # A Struct layout.
  if names is not None:
    return list(names)
  return [None] * len(value)


# FederatedType, FunctionType, AbstractType, PlacementType -----------------


class FederatedType(Type):
  """TFF's `FederatedType(member, placement, all_equal=None)`: a member type
  (in any spelling `to_type` takes) at SERVER or CLIENTS. `all_equal=None`
  means True at the SERVER (a SERVER value is one value) and False at the
  CLIENTS."""

  __slots__ = ('_member', '_placement', '_all_equal')

  def __init__(self, member, placement, all_equal=None):
    if not isinstance(placement, Placement):
      _fail('FederatedType', f'the placement must be SERVER or CLIENTS, got '
            f'{naming.describe_object(placement)}.')
    self._member = to_member(member, 'FederatedType')
    self._placement = placement
    self._all_equal = (placement is SERVER if all_equal is None or
                       placement is SERVER else bool(all_equal))

  @property
  def member(self):
    return self._member

  @property
  def placement(self):
    return self._placement

  @property
  def all_equal(self):
    return self._all_equal

  def children(self):
    yield self._member

  def is_assignable_from(self, source_type) -> bool:
    source = _as_type_or_none(source_type)
    return (isinstance(source, FederatedType) and
            self.member.is_assignable_from(source.member) and
            (not self.all_equal or source.all_equal) and
            self.placement is source.placement)

  def __eq__(self, other):
    if self is other:
      return True
    if not isinstance(other, FederatedType):
      return NotImplemented
    return (self.placement is other.placement and
            self.all_equal == other.all_equal and
            self.member == other.member)

  def __ne__(self, other):
    equal = self.__eq__(other)
    return equal if equal is NotImplemented else not equal

  def __hash__(self):
    return hash(('FederatedType', self._member, self._placement,
                 self._all_equal))

  def __repr__(self):
    return (f'FederatedType({self._member!r}, {self._placement.name}, '
            f'{self._all_equal})')

  def __reduce__(self):
    return FederatedType, (self._member, self._placement, self._all_equal)


def server(member):
  """`member` placed at the server."""
  return FederatedType(to_member(member, 'server type'), SERVER, True)


def clients(member, all_equal=False):
  """`member` placed at the clients (one value per client unless all_equal)."""
  return FederatedType(to_member(member, 'clients type'), CLIENTS, all_equal)


# TensorFlow Federated's names.
type_at_server = server
type_at_clients = clients
at_server = server
at_clients = clients


class FunctionType(Type):
  """TFF's `FunctionType(parameter, result)`: a computation's type, as
  `.type_signature` gives it (`parameter` None when it takes none; a struct
  named by the Python parameters when it takes several)."""

  __slots__ = ('_parameter', '_result')

  def __init__(self, parameter, result):
    self._parameter = None if parameter is None else to_type(parameter)
    self._result = to_type(result)

  @property
  def parameter(self):
    return self._parameter

  @property
  def result(self):
    return self._result

  def children(self):
    if self._parameter is not None:
      yield self._parameter
    yield self._result

  def is_assignable_from(self, source_type) -> bool:
    source = _as_type_or_none(source_type)
    if not isinstance(source, FunctionType):
      return False
    if (self.parameter is None) != (source.parameter is None):
      return False
    # Parameters are contravariant: the source must take what this takes.
    if self.parameter is not None and not source.parameter.is_assignable_from(
        self.parameter):
      return False
    return self.result.is_assignable_from(source.result)

  def __eq__(self, other):
    if self is other:
      return True
    if not isinstance(other, FunctionType):
      return NotImplemented
    return (self.parameter == other.parameter and
            self.result == other.result)

  def __ne__(self, other):
    equal = self.__eq__(other)
    return equal if equal is NotImplemented else not equal

  def __hash__(self):
    return hash(('FunctionType', self._parameter, self._result))

  def __repr__(self):
    return f'FunctionType({self._parameter!r}, {self._result!r})'

  def __reduce__(self):
    return FunctionType, (self._parameter, self._result)


class AbstractType(Type):
  """TFF's `AbstractType(label)`: a type variable of a generic signature.
  This runtime has no generic computations: it is a type to print and
  compare; TFF 0.87 cannot assign to or from it either."""

  __slots__ = ('_label',)

  def __init__(self, label):
    if not isinstance(label, str):
      raise errors.InvalidTypeError(
          f'AbstractType: the label must be a string, got '
          f'{naming.describe_object(label)}.')
    self._label = label

  @property
  def label(self):
    return self._label

  def children(self):
    return iter(())

  def is_assignable_from(self, source_type) -> bool:
    raise errors.InvalidTypeError('Abstract types are not comparable.')

  def __eq__(self, other):
    if not isinstance(other, AbstractType):
      return NotImplemented
    return self._label == other.label

  def __ne__(self, other):
    equal = self.__eq__(other)
    return equal if equal is NotImplemented else not equal

  def __hash__(self):
    return hash(('AbstractType', self._label))

  def __repr__(self):
    return f'AbstractType({self._label!r})'

  def __reduce__(self):
    return AbstractType, (self._label,)


class PlacementType(Type):
  """TFF's `PlacementType()`: the one type of placements."""

  __slots__ = ()

  def __init__(self, *args, **kwargs):
    del args, kwargs  # There is only one placement type.

  def children(self):
    return iter(())

  def is_assignable_from(self, source_type) -> bool:
    return isinstance(_as_type_or_none(source_type), PlacementType)

  def __eq__(self, other):
    if not isinstance(other, Type):
      return NotImplemented
    return isinstance(other, PlacementType)

  def __ne__(self, other):
    equal = self.__eq__(other)
    return equal if equal is NotImplemented else not equal

  def __hash__(self):
    return 0

  def __repr__(self):
    return 'PlacementType()'


# A computation's several parameters --------------------------------------


def parameter_of(types, names):
  """TFF's parameter type of a computation taking `types` (one per Python
  parameter named `names`): None, the one type, or a struct named by them,
  which unpacks into the parameters' types as TFF's does."""
  if not types:
    return None
  if len(types) == 1:
    return to_type(types[0])
  # TFF's is an OrderedDict struct that unpacks into the types; held as a
  # Struct layout, it does (a dict would give the names).
  return _struct([(name, to_type(t)) for name, t in zip(names, types)],
                 struct_lib.layout(tuple(names)), collections.OrderedDict)


# ----------------------------------------------------------------------------
# Conversions: TFF's spellings and TensorFlow's specs to types.


def _is_array_shape(value):
  return value is None or (
      isinstance(value, (list, tuple)) and not hasattr(value, '_fields') and
      all(d is None or (isinstance(d, (int, np.integer)) and
                        not isinstance(d, bool)) for d in value))


def _to_type(value, where):
  """TFF's `to_type`, also taking TensorFlow's specs and dtypes; names
  `where` and the user's line when `value` is no type."""
  if isinstance(value, Type):
    return value
  if isinstance(value, tf.TensorSpec):
    return TensorType(value.dtype, None if value.shape.rank is None
                      else value.shape)
  if isinstance(value, tf.data.DatasetSpec):
    return SequenceType(value.element_spec)
  dtype = _as_dtype(value)
  if dtype is not None:
    return TensorType(dtype)
  if (isinstance(value, tuple) and not hasattr(value, '_fields') and
      len(value) == 2 and _as_dtype(value[0]) is not None and
      (_is_array_shape(value[1]) or isinstance(value[1], tf.TensorShape))):
    return TensorType(value[0], value[1])
  if isinstance(value, Struct):
    names = struct_lib.names_of(value)
    pairs = [(name, _to_type(v, where)) for name, v in zip(names, value)]
    if any(name is not None for name in names):
      if None in names:
        _fail(where, 'name every element of the Struct or none.')
      return _struct(pairs, struct_lib.layout(tuple(names)), None)
    return _struct(pairs, tuple, None)
  if isinstance(value, (list, tuple)) and not hasattr(value, '_fields') and \
      any(_is_pair(e) for e in value):
    return StructType(value)  # (name, type) pairs: no Python container.
  if isinstance(value, (list, tuple, collections.abc.Mapping)):
    container = type(value)
    if isinstance(value, collections.abc.Mapping) and not issubclass(
        container, dict):
      _fail(where, f'a mapping type must be a dict (dict, OrderedDict, ...), '
            f'got {naming.describe_object(container)}.')
    pairs = [(name, _to_type(v, where)) for name, v in elements_of(value)]
    return _struct(pairs, container, container)
  if _is_attrs_class(type(value)):
    # Held as a Struct layout (an attrs instance cannot hold types); values
    # of the type are made the attrs class, as TFF 0.87 makes them.
    pairs = [(name, _to_type(v, where)) for name, v in elements_of(value)]
    return _struct(pairs, struct_lib.layout(tuple(n for n, _ in pairs)),
                   type(value))
  _fail(where, f'expected a type (tf.TensorSpec, tf.data.DatasetSpec, '
        f'TensorType, SequenceType, a dtype, or a structure of them), found '
        f'{naming.describe_object(value)}.')


def to_type(obj):
  """TFF's `to_type(obj)`: a type from a `Type`, a dtype, `(dtype, shape)`,
  a TensorFlow spec, or a structure of them (a list of `(name, type)` pairs
  is a struct with no Python container; a tuple, list, dict or namedtuple a
  struct held in one)."""
  return _to_type(obj, 'to_type')


def tensorflow_to_type(obj):
  """TFF's `tensorflow_to_type`: a type from TensorFlow specs, dtypes and
  `(dtype, tf.TensorShape)`, or structures of them."""
  return _to_type(obj, 'tensorflow_to_type')


def to_member(value, where='type'):
  """The member type (what one place holds) of a type in any spelling
  `to_type` takes: a tensor, a sequence, or a structure of them. Raises
  `FederatedError` naming `where` and the caller's line."""
  if isinstance(value, FederatedType):
    _fail(where, f'{value} is a placed type where a member type (what one '
          'place holds) is expected; drop type_at_server / type_at_clients.')
  member = _to_type(value, where)
  for leaf in tf.nest.flatten(member):
    if not isinstance(leaf, (TensorType, SequenceType)):
      _fail(where, f'a member type holds tensors and sequences, found '
            f'{leaf} in {member}.')
  return member


def is_type(value):
  """Whether `value` is a member type in some accepted spelling."""
  try:
    to_member(value)
  except errors.FederatedError:
    return False
  return True


def member_of(structure):
  """The member type of a structure of values."""
  return to_type(tf.nest.map_structure(spec_of, structure))



# ----------------------------------------------------------------------------
# TFF's texts of types.


def _tensor_text(t):
  name = 'str' if t.dtype == tf.string else t.dtype.name
  if t.shape.rank is None:
    return f'{name!r}(shape=None)'
  if t.shape.rank == 0:
    return name
  return f'{name}[{naming.dims(t.shape)}]'


def _join(parts):
  """Lines of `parts` (each a list of lines) run together: each part's first
  line continues the line before it."""
  lines = ['']
  for part in parts:
    lines[-1] += part[0]
    lines.extend(part[1:])
  return lines


def _lines(t, formatted):
  """The lines of type `t`'s text (one unless `formatted`)."""
  if isinstance(t, AbstractType):
    return [t.label]
  if isinstance(t, PlacementType):
    return ['placement']
  if isinstance(t, FederatedType):
    member = _lines(t.member, formatted)
    where = [f'@{t.placement}']
    if t.all_equal:
      return _join([member, where])
    return _join([['{'], member, ['}'], where])
  if isinstance(t, FunctionType):
    parameter = [''] if t.parameter is None else _lines(t.parameter,
                                                         formatted)
    return _join([['('], parameter, [' -> '], _lines(t.result, formatted),
                  [')']])
  if isinstance(t, SequenceType):
    return _join([_lines(t.element, formatted), ['*']])
  if isinstance(t, TensorType):
    return [_tensor_text(t)]
  if isinstance(t, StructType):
    pairs = elements_of(t)
    if not pairs:
      return ['<>']
    parts = []
    for i, (name, value) in enumerate(pairs):
      if i:
        parts.append([',', ''] if formatted else [','])
      element = _lines(value, formatted)
      parts.append(element if name is None else _join([[f'{name}='],
                                                       element]))
    elements = _join(parts)
    if formatted:
      return _join([['<', ''], ['  ' + line for line in elements],
                    ['', '>']])
    return _join([['<'], elements, ['>']])
  return [describe(t)]  # A plain spec structure inside a structure of types.


ArrayShape = Union[tuple[Optional[int], ...], None, tuple[()]]
