"""Structures of values as `tff.program` sees them: which values are
containers, in what order their items come, and how one is rebuilt.

Containers are mappings, lists, tuples, named tuples and, beyond TFF (where
dm-tree makes them single values that then fail to save), dataclass
instances. Anything else is a value. Items come in TFF's (dm-tree's) order:
a mapping's keys sorted, a sequence's by position, a named tuple's and a
dataclass's by field. A path is the tuple of keys, indices and field names
from the root to an item: what `FilteringReleaseManager`'s `filter_fn` gets
and what `CSVFileReleaseManager` names its columns by.
"""

import collections
import collections.abc
import dataclasses


def is_named_tuple(value) -> bool:
  return isinstance(value, tuple) and hasattr(type(value), '_fields')


def is_dataclass_value(value) -> bool:
  return dataclasses.is_dataclass(value) and not isinstance(value, type)


def is_container(value) -> bool:
  return isinstance(value, (collections.abc.Mapping, list, tuple)) or \
      is_dataclass_value(value)


def dataclass_fields(value) -> list[str]:
  """The fields a dataclass instance is rebuilt from (its `__init__`'s)."""
  return [f.name for f in dataclasses.fields(value) if f.init]


def _sorted_keys(mapping):
  try:
    return sorted(mapping)
  except TypeError:  # Keys of mixed kinds: the mapping's own order.
    return list(mapping)


def items(value) -> list[tuple]:
  """A container's `(key, item)` pairs in flattening order."""
  if isinstance(value, collections.abc.Mapping):
    return [(k, value[k]) for k in _sorted_keys(value)]
  if is_named_tuple(value):
    return list(zip(type(value)._fields, value))
  if is_dataclass_value(value):
    return [(name, getattr(value, name)) for name in dataclass_fields(value)]
  return list(enumerate(value))


def rebuild(container, new_items: dict):
  """A container of `container`'s kind holding `new_items` (key -> item,
  every key `items(container)` has)."""
  if isinstance(container, collections.defaultdict):
    rebuilt = type(container)(container.default_factory)
    rebuilt.update((k, new_items[k]) for k in container)
    return rebuilt
  if isinstance(container, collections.abc.Mapping):
    return type(container)((k, new_items[k]) for k in container)
  if is_named_tuple(container):
    return type(container)(*[new_items[k] for k in type(container)._fields])
  if is_dataclass_value(container):
    return dataclasses.replace(container, **new_items)
  return type(container)(new_items[i] for i in range(len(container)))


def map_structure(fn, value, path=()):
  """`value` with each leaf replaced by `fn(path, leaf)`; containers are
  rebuilt, never changed in place."""
  if not is_container(value):
    return fn(path, value)
  return rebuild(value, {k: map_structure(fn, v, path + (k,))
                         for k, v in items(value)})


def flatten_with_path(value) -> list[tuple]:
  """`(path, leaf)` pairs in flattening order."""
  found = []
  map_structure(lambda path, leaf: found.append((path, leaf)), value)
  return found


def path_name(path) -> str:
  """A path as TFF names it in files: its parts joined by '/'."""
  return '/'.join(map(str, path))


def describe_path(path, root='value') -> str:
  """A path for errors: `value['a'][0]['x']`."""
  return root + ''.join(f'[{part!r}]' for part in path)
