"""`tff.structure` of TensorFlow Federated 0.87: `Struct` and its functions.

Computations here return plain Python containers (dicts, tuples,
namedtuples) where TFF 0.87 sometimes returns a `Struct`, so every function
takes either: a `Struct`, a struct type, or a container (mapping,
namedtuple, attrs class, tuple, list), read in its own order. Where TFF's
function builds a structure it builds a `Struct`. `flatten`, `map_structure`
and `pack_sequence_as` walk Structs and struct types in their order and
anything else as `tf.nest` does (a dict by sorted keys), as TFF's do.
"""

import collections
import collections.abc

import tensorflow as tf

from canonical.core import struct as struct_lib
from canonical.core import types as _types
from canonical.core.struct import Struct
from canonical import errors

__all__ = [
    'Struct', 'flatten', 'from_container', 'has_field', 'is_same_structure',
    'iter_elements', 'map_structure', 'name_list', 'name_list_with_nones',
    'name_to_index_map', 'pack_sequence_as', 'to_elements', 'to_odict',
    'to_odict_or_tuple', 'update_struct',
]


class MissingFieldError(errors.Error, KeyError):
  """`update_struct` named a field the structure does not have."""


def _is_struct(value):
  return isinstance(value, Struct)  # Struct values and struct types.


def to_elements(struct):
  """The `(name or None, value)` pairs of `struct`, in its order."""
  return _types.elements_of(struct)


def iter_elements(struct):
  """An iterator over the `(name or None, value)` pairs of `struct`."""
  return iter(to_elements(struct))


def name_list(struct):
  """The names of `struct`'s named fields, in order."""
  return [name for name, _ in to_elements(struct) if name is not None]


def name_list_with_nones(struct):
  """The names of all of `struct`'s fields, None where unnamed."""
  return [name for name, _ in to_elements(struct)]


def name_to_index_map(structure):
  """`{name: index}` of `structure`'s named fields."""
  return {name: i for i, (name, _) in enumerate(to_elements(structure))
          if name is not None}


def has_field(structure, field):
  """Whether `structure` has a field named `field`."""
  return field in name_list_with_nones(structure)


def _to_container(elements, make, recursive, struct):
  def convert(value):
    return _to_container(to_elements(value), make, True, value) if (
        recursive and _is_struct(value)) else value
  return make([(name, convert(value)) for name, value in elements], struct)


def _odict(pairs, struct):
  if any(name is None for name, _ in pairs):
    raise errors.InvalidValueError(
        f'{struct!r} has unnamed fields: it has no OrderedDict form.')
  return collections.OrderedDict(pairs)


def _odict_or_tuple(pairs, struct):
  named = [name is not None for name, _ in pairs]
  if any(named) and not all(named):
    raise errors.InvalidValueError(
        f'{struct!r} has named and unnamed fields: neither an OrderedDict '
        'nor a tuple holds it.')
  if any(named):
    return collections.OrderedDict(pairs)
  return tuple(value for _, value in pairs)


def to_odict(struct, recursive=False):
  """`struct` as an OrderedDict (every field named); nested Structs too if
  `recursive`."""
  return _to_container(to_elements(struct), _odict, recursive, struct)


def to_odict_or_tuple(struct, recursive=True):
  """`struct` as an OrderedDict (every field named) or a tuple (none
  named); nested Structs too if `recursive`."""
  return _to_container(to_elements(struct), _odict_or_tuple, recursive,
                       struct)


def from_container(value, recursive=False):
  """The `Struct` of a container (mapping, namedtuple, attrs class, tuple,
  list or Struct); its elements too if `recursive`."""
  def convert(v, must_be_container):
    if _is_struct(v) and not isinstance(v, _types.Type):
      return Struct([(name, convert(x, False) if recursive else x)
                     for name, x in to_elements(v)]) if recursive else v
    try:
      elements = _types.elements_of(v)
    except errors.InvalidTypeError:
      if must_be_container:
        raise errors.InvalidTypeError(
            f'from_container: cannot make a Struct of a '
            f'{type(v).__name__}: {v!r}.') from None
      return v
    return Struct([(name, convert(x, False) if recursive else x)
                   for name, x in elements])
  return convert(value, True)


def flatten(struct):
  """The leaves of `struct`: Structs and struct types in their order,
  anything else as `tf.nest.flatten` has them."""
  if not _is_struct(struct):
    return tf.nest.flatten(struct)
  leaves = []
  for _, value in to_elements(struct):
    leaves.extend(flatten(value))
  return leaves


def pack_sequence_as(structure, flat_sequence):
  """`flat_sequence` in the structure of `structure`: Structs (and struct
  types) become Structs, anything else is packed as `tf.nest` packs it."""
  flat_sequence = list(flat_sequence)
  if not _is_struct(structure):
    return tf.nest.pack_sequence_as(structure, flat_sequence)

  def pack(shape, position):
    if not _is_struct(shape):
      count = len(tf.nest.flatten(shape))
      return (tf.nest.pack_sequence_as(
          shape, flat_sequence[position:position + count]),
              position + count)
    elements = []
    for name, value in to_elements(shape):
      packed, position = pack(value, position)
      elements.append((name, packed))
    return Struct(elements), position

  result, used = pack(structure, 0)
  if used != len(flat_sequence):
    raise errors.InvalidValueError(
        f'pack_sequence_as: the structure has {used} leaves, given '
        f'{len(flat_sequence)} values.')
  return result


def is_same_structure(a, b):
  """Whether `a` and `b` have the same names and nesting (Structs, struct
  types), and leaves of the same structure to `tf.nest`."""
  if _is_struct(a) or _is_struct(b):
    if not (_is_struct(a) and _is_struct(b)):
      return False
    elements_a, elements_b = to_elements(a), to_elements(b)
    return len(elements_a) == len(elements_b) and all(
        name_a == name_b and is_same_structure(value_a, value_b)
        for (name_a, value_a), (name_b, value_b) in zip(elements_a,
                                                        elements_b))
  try:
    tf.nest.assert_same_structure(a, b, check_types=True)
  except (TypeError, ValueError):
    return False
  return True


def map_structure(fn, *structures):
  """`fn` applied to the leaves of `structures` at the same places: a
  Struct when they are Structs (of the same structure), `tf.nest`'s result
  otherwise."""
  if not structures:
    raise errors.InvalidValueError('map_structure: give a structure.')
  if not all(_is_struct(s) for s in structures):
    return tf.nest.map_structure(fn, *structures)
  for i, other in enumerate(structures[1:], 1):
    if not is_same_structure(structures[0], other):
      raise errors.InvalidTypeError(
          f'map_structure: structure {i} is not the structure of the first.')
  flats = [flatten(s) for s in structures]
  return pack_sequence_as(structures[0], [fn(*leaves)
                                          for leaves in zip(*flats)])


def update_struct(structure, **kwargs):
  """A copy of `structure` (a Struct, mapping, namedtuple or attrs class)
  with the named fields of `kwargs` replaced (the first level only)."""
  if _is_struct(structure) and not isinstance(structure, _types.Type):
    names = struct_lib.names_of(structure)
    unknown = set(kwargs) - set(names)
    if unknown:
      raise MissingFieldError(
          f'update_struct: the structure has no fields {sorted(unknown)}.')
    return Struct([(name, kwargs.get(name, value)) if name is not None else
                   (name, value) for name, value in to_elements(structure)])
  attributes = getattr(type(structure), '__attrs_attrs__', None)
  if isinstance(structure, tuple) and hasattr(structure, '_fields'):
    fields = dict(structure._asdict())
  elif attributes is not None:
    fields = {a.name: getattr(structure, a.name) for a in attributes}
  elif isinstance(structure, collections.abc.Mapping):
    fields = dict(structure.items())
  else:
    raise errors.InvalidTypeError(
        f'update_struct: expected a structure with named fields (a Struct, '
        f'a mapping, a namedtuple or an attrs class), got '
        f'{type(structure).__name__}.')
  unknown = set(kwargs) - set(fields)
  if unknown:
    raise MissingFieldError(
        f'update_struct: the structure has no fields {sorted(unknown)}.')
  fields.update(kwargs)
  if isinstance(structure, collections.abc.Mapping):
    return type(structure)(fields.items()) if not isinstance(
        structure, _types.Type) else dict(fields)
  return type(structure)(**fields)
