"""TFF's `Struct`: a value whose fields are named, unnamed, or some of each.

`Struct([('a', 1), (None, 2)])` reads as TFF 0.87's does: `s.a`, `s['a']`,
`s[1]`, `len(s)`, iteration over the values, `dir(s)` the names. TFF keeps
every layout in one class that `tf.nest` does not walk; here each layout of
names has its own (cached) tuple class, so that `tf.nest` walks a Struct in
its order and rebuilds it, and a `tf.function` given one gives one back:

* every field named: a named tuple for `tf.nest` (`_fields`, built from
  positional or keyword values, `_asdict`, `_make`, `_replace`), so a
  tf.function parameter of a struct type gets a Struct, as in TFF;
* some or none named: a tuple subclass, rebuilt from its list of values.

A Struct pickles by its elements (`Struct(elements)`), whatever its class.
"""

import collections
from collections.abc import Iterable

from canonical import errors

# Names a field cannot have: they are the Struct's own attributes.
_RESERVED = frozenset(('_asdict', '_fields', '_names', '_make', '_replace'))


def _name_value_pair(element):
  return (isinstance(element, (tuple, list)) and len(element) == 2 and
          (element[0] is None or isinstance(element[0], str)))


class Struct:
  """TFF's `tff.structure.Struct(elements)`: `elements` are
  `(name or None, value)` pairs, in order."""

  __slots__ = ()
  _names = ()  # One per field; None where unnamed (set by each layout).

  def __new__(cls, elements: Iterable):
    if cls is not Struct:  # A subclass that did not override __new__.
      return super().__new__(cls)
    pairs = list(elements)
    for pair in pairs:
      if not _name_value_pair(pair):
        raise errors.InvalidTypeError(
            'Struct: expected (name, value) pairs whose name is a string or '
            f'None, found {pair!r}.')
    names = tuple(name for name, _ in pairs)
    given = [name for name in names if name is not None]
    if len(set(given)) != len(given):
      raise errors.InvalidValueError(
          f'Struct: repeated names in {list(names)}.')
    reserved = _RESERVED.intersection(given)
    if reserved:
      raise errors.InvalidValueError(
          f'Struct: the names {sorted(reserved)} are reserved.')
    return layout(names)._of([value for _, value in pairs])

  def __init__(self, *args, **kwargs):
    del args, kwargs  # Built by __new__.

  @classmethod
  def named(cls, **kwargs):
    """A Struct whose every field is named, in the order given."""
    return cls(tuple(kwargs.items()))

  @classmethod
  def unnamed(cls, *args):
    """A Struct of unnamed fields."""
    return cls(tuple((None, v) for v in args))

  def __getitem__(self, key):
    if isinstance(key, str):
      return self.__getattr__(key)
    if isinstance(key, int) and not 0 <= key < tuple.__len__(self):
      raise IndexError(f'index {key} is out of range: the Struct has '
                       f'{tuple.__len__(self)} fields.')
    return tuple.__getitem__(self, key)

  def __getattr__(self, name):
    names = type(self)._names
    if name.startswith('__') or name not in names:
      raise AttributeError(
          f'the Struct of {len(names)} fields has no field {name!r} (its '
          f'named fields: {[n for n in names if n is not None][:10]})')
    return tuple.__getitem__(self, names.index(name))

  def __dir__(self):
    return [name for name in type(self)._names if name is not None]

  def __eq__(self, other):
    if self is other:
      return True
    if not isinstance(other, Struct):
      return False  # Not even a tuple of the same values, as in TFF.
    return (type(self)._names == type(other)._names and
            tuple(self) == tuple(other))

  def __ne__(self, other):
    return not self.__eq__(other)

  def __hash__(self):
    return hash(('Struct', tuple(self), type(self)._names))

  def __repr__(self):
    return 'Struct([{}])'.format(', '.join(
        f'({name!r}, {value!r})' for name, value in self._pairs()))

  def __str__(self):
    return '<{}>'.format(','.join(
        str(value) if name is None else f'{name}={value}'
        for name, value in self._pairs()))

  def _pairs(self):
    return list(zip(type(self)._names, tuple.__iter__(self)))

  def _asdict(self, recursive=False):
    """The fields as an OrderedDict (every field must be named)."""
    def convert(value):
      if recursive and isinstance(value, Struct):
        return value._asdict(recursive=True)  # pylint: disable=protected-access
      return value
    if None in type(self)._names:
      raise errors.InvalidValueError(
          f'{self!r} has unnamed fields: it has no OrderedDict form.')
    return collections.OrderedDict(
        (name, convert(value)) for name, value in self._pairs())

  def __reduce__(self):
    return Struct, (self._pairs(),)

  def __copy__(self):
    return self

  def __deepcopy__(self, memo):
    del memo  # Rebuilt from its values, which deepcopy copies.
    import copy  # pylint: disable=g-import-not-at-top
    return Struct([(name, copy.deepcopy(value))
                   for name, value in self._pairs()])


class _NamedLayout(Struct, tuple):
  """A Struct whose every field is named: a named tuple to tf.nest."""
  __slots__ = ()

  def __new__(cls, *args, **kwargs):
    fields = cls._fields  # pylint: disable=no-member
    if kwargs:
      if args or sorted(kwargs) != sorted(fields):
        raise errors.InvalidTypeError(
            f'Struct with fields {list(fields)} built from {len(args)} '
            f'values and names {sorted(kwargs)}.')
      args = tuple(kwargs[name] for name in fields)
    if len(args) != len(fields):
      raise errors.InvalidTypeError(
          f'Struct with fields {list(fields)} built from {len(args)} values.')
    return tuple.__new__(cls, args)

  @classmethod
  def _of(cls, values):
    return tuple.__new__(cls, values)

  @classmethod
  def _make(cls, iterable):
    return cls._of(list(iterable))

  def _replace(self, **kwargs):
    unknown = set(kwargs) - set(self._fields)  # pylint: disable=no-member
    if unknown:
      raise errors.InvalidValueError(
          f'Struct has no fields {sorted(unknown)} to replace.')
    return self._of([kwargs.get(name, value) for name, value in
                     self._pairs()])


class _PositionalLayout(Struct, tuple):
  """A Struct with an unnamed field: a tuple to tf.nest."""
  __slots__ = ()

  def __new__(cls, values=()):
    values = tuple(values)
    if len(values) != len(cls._names):
      raise errors.InvalidTypeError(
          f'Struct of {len(cls._names)} fields built from {len(values)} '
          'values.')
    return tuple.__new__(cls, values)

  @classmethod
  def _of(cls, values):
    return tuple.__new__(cls, values)


_LAYOUTS = {}


def layout(names):
  """The Struct class of fields named `names` (None for an unnamed one)."""
  names = tuple(names)
  cls = _LAYOUTS.get(names)
  if cls is None:
    named = bool(names) and None not in names
    attributes = {'__slots__': (), '_names': names,
                  '__module__': __name__, '__qualname__': 'Struct'}
    if named:
      attributes['_fields'] = names
    # 'Struct' for every layout: tf.nest takes two named tuples of the same
    # class name and fields for the same structure.
    cls = type('Struct', (_NamedLayout if named else _PositionalLayout,),
               attributes)
    _LAYOUTS[names] = cls
  return cls


def names_of(struct):
  """The field names of a Struct, None where unnamed."""
  return list(type(struct)._names)  # pylint: disable=protected-access
