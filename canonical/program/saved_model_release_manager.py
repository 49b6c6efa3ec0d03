"""`SavedModelFileReleaseManager`: each released value as a TensorFlow
SavedModel under `<root_dir>/<prefix><key>`, as TFF writes it: a
`tf.Module` whose no-argument function returns the value's structure, each
leaf that can be one held in a variable. `tf.saved_model.load(path)()` gives
the value back, and so does `get_value(key)` (tensors as numpy values;
strings come back as bytes, as in TFF).

Releases go through `canonical.io`, so `root_dir` may be local, s3:// or
gs://. A release is visible once its `saved_model.pb` exists, and that file
is written last: a release of a key first deletes the key's earlier one
(that file first), then writes the new one's variables, then its
`saved_model.pb`. A reader (or a kill) at any point finds the whole old
value, nothing (`ReleasedValueNotFoundError`), or the whole new value.
"""

import asyncio
import os
import tempfile
import threading

import tensorflow as tf

from canonical import errors
from canonical import io as storage_lib
from canonical.program import release_manager
from canonical.program import structure
from canonical.program import value_reference

_SAVED_MODEL = 'saved_model.pb'


class ReleasedValueNotFoundError(errors.Error, LookupError):
  """No value is released under the key asked for."""

  def __init__(self, key):
    super().__init__(f'No released value found for key: {key}.')


class _ValueModule(tf.Module):
  """A module whose call returns `value` (the SavedModel's content)."""

  def __init__(self, value):
    super().__init__()
    self._value = value

  @tf.function(input_signature=())
  def __call__(self):
    return self._value


def _as_variable(leaf):
  """A leaf as a variable (saved as its own tensor), where it can be one."""
  try:
    return tf.Variable(initial_value=leaf)
  except (ValueError, TypeError):
    return leaf


def _read(path) -> bytes:
  with open(path, 'rb') as f:
    return f.read()


def _local_files(directory):
  return sorted(os.path.relpath(os.path.join(d, name), directory)
                for d, _, names in os.walk(directory) for name in names)


class SavedModelFileReleaseManager(release_manager.ReleaseManager):
  """Releases values as SavedModels under `root_dir` (created if missing),
  each at `<prefix><key>`, through `storage` (a `canonical.io.Storage`; the
  process's default if None)."""

  def __init__(self, root_dir, prefix: str = 'release_', *, storage=None):
    if not isinstance(root_dir, (str, os.PathLike)):
      raise errors.InvalidTypeError(
          f'SavedModelFileReleaseManager: root_dir must be a path (str), got '
          f'{type(root_dir).__name__}.')
    root_dir = os.fspath(root_dir)
    if not root_dir:
      raise errors.InvalidValueError(
          'SavedModelFileReleaseManager: root_dir is empty; name a '
          'directory.')
    if not isinstance(prefix, str) or '/' in prefix or os.sep in prefix:
      raise errors.InvalidValueError(
          f'SavedModelFileReleaseManager: prefix must be a str without a '
          f'path separator, got {prefix!r}.')
    self._storage = storage or storage_lib.default()
    self._root_dir = self._storage.absolute(root_dir)
    self._storage.makedirs(self._root_dir)
    self._prefix = prefix
    self._lock = threading.Lock()  # One release of a key at a time.

  @property
  def root_dir(self) -> str:
    return self._root_dir

  def _path(self, key) -> str:
    name = f'{self._prefix}{key}'
    if '/' in name or os.sep in name or name in ('.', '..'):
      raise errors.InvalidValueError(
          f'SavedModelFileReleaseManager: key {key!r} would name '
          f'{name!r}, not a file in root_dir; use a key without path '
          'separators.')
    return storage_lib.join(self._root_dir, name)

  async def release(self, value, key) -> None:
    """Saves `value` (references materialized) as `key`, replacing the
    value released as `key` before, if any."""
    path = self._path(key)
    value = await value_reference.materialize_value(value)
    await asyncio.to_thread(self._release, value, path)

  def _release(self, value, path):
    with tempfile.TemporaryDirectory(prefix='saved_model_release_') as tmp:
      module = _ValueModule(structure.map_structure(
          lambda _, leaf: _as_variable(leaf), value))
      try:
        tf.saved_model.save(module, tmp, signatures={})
      except (ValueError, TypeError) as e:
        raise errors.InvalidTypeError(
            f'SavedModelFileReleaseManager: the value released to {path!r} '
            'cannot be saved as a SavedModel (it holds containers of '
            f'tensors, numpy arrays and Python scalars): {e}') from None
      files = {name: _read(os.path.join(tmp, name))
               for name in _local_files(tmp)}
    with self._lock:
      self._storage.delete([storage_lib.join(path, _SAVED_MODEL)])
      self._storage.delete_tree(path)
      for name in sorted(files, key=lambda n: n == _SAVED_MODEL):
        self._storage.write_bytes(storage_lib.join(path, *name.split(os.sep)),
                                  files[name])

  async def get_value(self, key):
    """The value released as `key` (ReleasedValueNotFoundError if none)."""
    path = self._path(key)
    return await asyncio.to_thread(self._get_value, key, path)

  def _get_value(self, key, path):
    if not self._storage.exists(storage_lib.join(path, _SAVED_MODEL)):
      raise ReleasedValueNotFoundError(key)
    with tempfile.TemporaryDirectory(prefix='saved_model_release_') as tmp:
      for name in self._storage.list_files(path):
        local = os.path.join(tmp, *name.split('/'))
        os.makedirs(os.path.dirname(local), exist_ok=True)
        with open(local, 'wb') as f:
          f.write(self._storage.read_bytes(storage_lib.join(path, name)))
      value = tf.saved_model.load(tmp)()

    def as_numpy(_, leaf):
      if isinstance(leaf, tf.Variable):
        leaf = leaf.read_value()
      return leaf.numpy() if isinstance(leaf, tf.Tensor) else leaf

    return structure.map_structure(as_numpy, value)
