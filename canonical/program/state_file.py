"""One version of program state as one file, and back.

The file is a zip archive (stored, not compressed), readable with `unzip`
and numpy alone:

    manifest.json       {"format": "canonical.program_state", "layout": 1,
                         "value": NODE}
    arrays/<i>.npy      each numpy leaf, in numpy's own format (no pickles)

A NODE is a container, `{"dict": [[key, NODE], ...], "type": "dict" |
"OrderedDict"}`, `{"list": [...]}`, `{"tuple": [...]}`, `{"namedtuple":
name, "fields": [...], "items": [...]}`, `{"dataclass": ...}` (the same), or
a leaf: `{"none": null}`, a Python `bool` / `int` / `float` / `complex` /
`str` / `bytes` kept exactly as itself, `{"array": i}` / `{"scalar": i}` for
a numpy array or scalar (tensors are saved as their numpy values), a string
tensor's elements, or `{"serialized": ...}`: the `to_bytes()` of an object
whose class has `from_bytes` (TFF's `tff.Serializable`, a data source
iterator). Every member carries a CRC-32 that reading checks, so a damaged
file is an error, never other numbers.

Reading puts the saved values into the containers of the structure the
caller gives (as TFF's `load(version, structure)` does), so named tuples and
dataclasses come back as the caller's own classes; with no structure, into
plain ones.
"""

import base64
import collections
import collections.abc
import io
import json
import zipfile

import numpy as np
import tensorflow as tf

from canonical import errors
from canonical.program import structure
from canonical.program import value_reference

FORMAT = 'canonical.program_state'
LAYOUT = 1
MANIFEST = 'manifest.json'

# `decode`'s structure meaning "the containers the file records".
AS_SAVED = object()

_CONTAINERS = ('dict', 'list', 'tuple', 'namedtuple', 'dataclass')
_LEAVES = ('none', 'bool', 'int', 'float', 'complex', 'str', 'bytes', 'array',
           'scalar', 'bytes_array', 'str_array', 'serialized')


def _b64(data: bytes) -> str:
  return base64.b64encode(data).decode('ascii')


def _unb64(text: str) -> bytes:
  return base64.b64decode(text.encode('ascii'), validate=True)


def _is_serializable(value):
  from_bytes = getattr(type(value), 'from_bytes', None)
  return callable(getattr(value, 'to_bytes', None)) and callable(from_bytes) \
      and not isinstance(value, (int, bytes, bytearray))


# -- Writing -----------------------------------------------------------------


def encode(value) -> bytes:
  """The file's bytes for `value` (references already materialized); raises
  InvalidTypeError naming the first value that cannot be saved, before
  anything is written."""
  arrays = []
  node = _encode(value, (), arrays)
  buffer = io.BytesIO()
  with zipfile.ZipFile(buffer, 'w', zipfile.ZIP_STORED) as archive:
    archive.writestr(MANIFEST, json.dumps(
        {'format': FORMAT, 'layout': LAYOUT, 'value': node}))
    for i, array in enumerate(arrays):
      with archive.open(f'arrays/{i}.npy', 'w', force_zip64=True) as f:
        np.lib.format.write_array(f, array, allow_pickle=False)
  return buffer.getvalue()


def _cannot_save(path, value, why=None):
  why = why or f'a {type(value).__name__} is not a value it can hold'
  return errors.InvalidTypeError(
      f'Program state {structure.describe_path(path, "state")} cannot be '
      f'saved: {why}. A program state holds containers (dict, list, tuple, '
      'named tuple, dataclass) of numpy arrays, tensors, Python scalars, '
      'strings and None.')


def _encode(value, path, arrays):
  if isinstance(value, collections.abc.Mapping):
    pairs = []
    for key, item in value.items():
      if isinstance(key, bool) or not isinstance(key, (str, int)):
        raise errors.InvalidTypeError(
            f'Program state {structure.describe_path(path, "state")} cannot '
            f'be saved: its key {key!r} is a {type(key).__name__}; keys must '
            'be str or int.')
      pairs.append([key, _encode(item, path + (key,), arrays)])
    kind = 'OrderedDict' if isinstance(value,
                                       collections.OrderedDict) else 'dict'
    return {'dict': pairs, 'type': kind}
  if structure.is_named_tuple(value) or structure.is_dataclass_value(value):
    kind = 'namedtuple' if isinstance(value, tuple) else 'dataclass'
    pairs = structure.items(value)
    return {kind: type(value).__name__, 'fields': [k for k, _ in pairs],
            'items': [_encode(v, path + (k,), arrays) for k, v in pairs]}
  if isinstance(value, (list, tuple)):
    kind = 'list' if isinstance(value, list) else 'tuple'
    return {kind: [_encode(v, path + (i,), arrays)
                   for i, v in enumerate(value)]}
  return _encode_leaf(value, path, arrays)


def _encode_leaf(value, path, arrays):
  if value is None:
    return {'none': None}
  if isinstance(value, np.generic):  # Before Python's: np.float64 is a float.
    return _encode_array(value, path, arrays)
  for kind in (bool, int, float, str):  # bool before int: True is an int.
    if isinstance(value, kind):
      return {kind.__name__: kind(value)}
  if isinstance(value, complex):
    return {'complex': [value.real, value.imag]}
  if isinstance(value, (bytes, bytearray)):
    return {'bytes': _b64(bytes(value))}
  if isinstance(value, value_reference.MaterializableValueReference):
    raise _cannot_save(path, value, 'a value reference not materialized')
  if _is_serializable(value):
    return {'serialized': _b64(value.to_bytes())}
  if isinstance(value, tf.data.Dataset):
    raise _cannot_save(path, value, 'a tf.data.Dataset; save its elements, '
                       'or the iterator that selects it')
  if isinstance(value, (tf.Tensor, tf.Variable)):
    try:
      value = value.numpy()
    except (AttributeError, NotImplementedError, TypeError):
      raise _cannot_save(path, value, 'a symbolic (graph) tensor') from None
    return _encode_leaf(value, path, arrays)
  if isinstance(value, np.ndarray):
    return _encode_array(value, path, arrays)
  raise _cannot_save(path, value)


def _encode_array(value, path, arrays):
  array = np.asarray(value)
  if array.dtype == object:
    return _encode_strings(array, path, value)
  arrays.append(array)
  return {'scalar' if isinstance(value, np.generic) else 'array':
          len(arrays) - 1}


def _encode_strings(array, path, value):
  """A string tensor's numpy value: an object array of bytes (or of str)."""
  flat = list(array.reshape(-1))
  if all(isinstance(x, bytes) for x in flat):
    return {'bytes_array': [_b64(x) for x in flat], 'shape': array.shape}
  if all(isinstance(x, str) for x in flat):
    return {'str_array': flat, 'shape': array.shape}
  raise _cannot_save(path, value, 'a numpy array of Python objects')


# -- Reading -----------------------------------------------------------------


def damaged(where, problem):
  return errors.InvalidValueError(
      f'{where} is not a readable program state file: {problem}. Delete it '
      '(load_latest then finds the version before it), or restore it from '
      'a copy.')


def decode(data: bytes, structure_=AS_SAVED, where='program state'):
  """The value a file holds, in `structure_`'s containers (AS_SAVED: the
  containers the file records). InvalidValueError if the file is damaged or
  the structure does not fit it."""
  try:
    archive = zipfile.ZipFile(io.BytesIO(data))
    manifest = json.loads(archive.read(MANIFEST))
  except (zipfile.BadZipFile, KeyError, ValueError, EOFError) as e:
    raise damaged(where, f'{type(e).__name__}: {e}') from None
  if not isinstance(manifest, dict) or manifest.get('format') != FORMAT:
    raise damaged(where, f'its manifest is not a {FORMAT} manifest')
  if manifest.get('layout') != LAYOUT:
    raise damaged(where, f'layout {manifest.get("layout")!r}, this version '
                  f'reads layout {LAYOUT}')
  reader = _Reader(archive, where)
  try:
    return reader.build(manifest['value'], structure_, ())
  except errors.Error:
    raise
  except Exception as e:  # pylint: disable=broad-except
    raise damaged(where, f'{type(e).__name__}: {e}') from None


def _kind(node):
  if isinstance(node, dict):
    for kind in _CONTAINERS + _LEAVES:
      if kind in node:
        return kind
  raise ValueError(f'unknown manifest node {str(node)[:80]}')


def _describe_saved(node):
  kind = _kind(node)
  if kind == 'dict':
    keys = sorted(str(k) for k, _ in node['dict'])
    return f'a mapping with keys {keys}'
  if kind in ('namedtuple', 'dataclass'):
    return f'{kind} {node[kind]} with fields {node["fields"]}'
  if kind in ('list', 'tuple'):
    return f'a {kind} of {len(node[kind])} items'
  return 'a single value'


def _describe_structure(value):
  if isinstance(value, collections.abc.Mapping):
    return f'a mapping with keys {sorted(map(str, value))}'
  if structure.is_named_tuple(value) or structure.is_dataclass_value(value):
    return (f'{type(value).__name__} with fields '
            f'{[k for k, _ in structure.items(value)]}')
  if isinstance(value, (list, tuple)):
    return f'a {type(value).__name__} of {len(value)} items'
  return f'a single value ({type(value).__name__})'


class _Reader:
  """Builds values from a manifest's nodes and the archive's arrays."""

  def __init__(self, archive, where):
    self._archive = archive
    self._where = where

  def _mismatch(self, node, struct, path):
    return errors.InvalidValueError(
        f'{self._where}: the saved program state does not fit the structure '
        f'given to load, at {structure.describe_path(path, "structure")}: '
        f'saved {_describe_saved(node)}, the structure has '
        f'{_describe_structure(struct)}.')

  def build(self, node, struct, path):
    kind = _kind(node)
    if struct is AS_SAVED:
      return self._as_saved(node, kind, path)
    if not structure.is_container(struct):
      if kind in _CONTAINERS:
        raise self._mismatch(node, struct, path)
      return self._leaf(node, kind, struct)
    if kind not in _CONTAINERS:
      raise self._mismatch(node, struct, path)
    keyed, positional = _saved_items(node, kind)
    wanted = [k for k, _ in structure.items(struct)]
    by_key = isinstance(struct, collections.abc.Mapping) or \
        structure.is_dataclass_value(struct) or (
            structure.is_named_tuple(struct) and keyed is not None)
    if by_key:
      if keyed is None or set(keyed) != set(wanted):
        raise self._mismatch(node, struct, path)
      saved = keyed
    else:
      if positional is None or len(positional) != len(wanted):
        raise self._mismatch(node, struct, path)
      saved = dict(enumerate(positional))
      if structure.is_named_tuple(struct):
        saved = dict(zip(wanted, positional))
    children = dict(structure.items(struct))
    return structure.rebuild(struct, {
        k: self.build(saved[k], children[k], path + (k,)) for k in wanted})

  def _as_saved(self, node, kind, path):
    if kind not in _CONTAINERS:
      return self._leaf(node, kind, None)
    if kind == 'dict':
      container = collections.OrderedDict if node.get(
          'type') == 'OrderedDict' else dict
      return container((k, self._as_saved(n, _kind(n), path + (k,)))
                       for k, n in node['dict'])
    if kind in ('list', 'tuple'):
      items = [self._as_saved(n, _kind(n), path + (i,))
               for i, n in enumerate(node[kind])]
      return items if kind == 'list' else tuple(items)
    fields = node['fields']
    items = [self._as_saved(n, _kind(n), path + (k,))
             for k, n in zip(fields, node['items'])]
    if kind == 'namedtuple':
      return collections.namedtuple(node['namedtuple'], fields)(*items)
    return dict(zip(fields, items))  # A dataclass, as its fields.

  def _array(self, index):
    data = self._archive.read(f'arrays/{int(index)}.npy')  # Checks the CRC.
    return np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)

  def _leaf(self, node, kind, struct):
    value = node[kind]
    if kind == 'none':
      return None
    if kind in ('bool', 'int', 'float', 'str'):
      return {'bool': bool, 'int': int, 'float': float, 'str': str}[kind](
          value)
    if kind == 'complex':
      return complex(*value)
    if kind == 'bytes':
      return _unb64(value)
    if kind == 'array':
      return self._array(value)
    if kind == 'scalar':
      return self._array(value)[()]
    if kind in ('bytes_array', 'str_array'):
      flat = [_unb64(x) for x in value] if kind == 'bytes_array' else value
      array = np.empty(len(flat), dtype=object)
      array[:] = flat
      return array.reshape(node['shape'])
    data = _unb64(value)  # 'serialized'
    if struct is not None and _is_serializable(struct):
      return type(struct).from_bytes(data)
    return data


def _saved_items(node, kind):
  """`(key -> node or None, [node] or None)`: how a saved container's items
  can be looked up, by key and by position."""
  if kind == 'dict':
    return {k: n for k, n in node['dict']}, None
  if kind in ('list', 'tuple'):
    return None, list(node[kind])
  keyed = dict(zip(node['fields'], node['items']))
  return keyed, (list(node['items']) if kind == 'namedtuple' else None)
