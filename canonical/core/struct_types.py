"""TFF's struct types, each an instance of its Python container, so that
`tf.nest` walks a struct type as it walks the container (see
`canonical.core.types`), and the helpers over their elements."""

import collections
import collections.abc

from canonical.core import naming
from canonical.core import struct as struct_lib
from canonical.core.struct import Struct
from canonical.core.type_base import _as_type_or_none
from canonical.core.type_base import _fail
from canonical.core.type_base import conversions
from canonical.core.type_base import Type
from canonical import errors


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
  return [(name, conversions.convert(value, where))
          for name, value in pairs]


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
