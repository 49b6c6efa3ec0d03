"""`FileProgramStateManager`: program state kept under a directory on any
storage `canonical.io` reaches (a local path, s3://, gs://).

    <root_dir>/
        program_state_1        one file per saved version (state_file.py):
        program_state_4        `<prefix><version>`, version in decimal
        .program_state_5.*.tmp a local write in flight, or left by a kill

A version is published by one create-only write of its whole file (a
temporary file hard-linked into place locally; a conditional PUT on an
object store): it appears whole or not at all, a save interrupted at any
point leaves no version that `load_latest` would return, and of two
managers saving one version exactly one succeeds (the other gets
ProgramStateExistsError). After each save, the versions that `keep_total`,
`keep_first` and `keep_every_k` do not keep are deleted, by TFF's rule
(even its quirk: keep_total=1 with keep_first keeps only the first).

TFF writes a SavedModel directory per version; these files hold numpy
arrays and JSON instead (readable with numpy alone). Python scalars come
back as themselves (TFF: as numpy scalars of TF's dtype, int32 and
float32), float64 stays float64, and named tuples and dataclasses come back
as the classes of the structure given to `load`.
"""

import asyncio
import logging
import os
import re
import threading

import numpy as np

from canonical import errors
from canonical import io as storage_lib
from canonical.program import program_state_manager
from canonical.program import state_file
from canonical.program import value_reference

_log = logging.getLogger('canonical.program')
_VERSION = re.compile(r'-?(0|[1-9][0-9]*)')


def check_int(value, where, what='version'):
  """`value` as an int; InvalidTypeError unless it is an integer."""
  if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
    return int(value)
  raise errors.InvalidTypeError(
      f'{where}: the {what} must be an int, got {type(value).__name__} '
      f'{value!r}.')


class FileProgramStateManager(program_state_manager.ProgramStateManager):
  """Program state in files under `root_dir` (created if missing), reached
  through `storage` (a `canonical.io.Storage`; the process's default if
  None), so `root_dir` may be local, s3:// or gs://."""

  def __init__(self, root_dir, prefix: str = 'program_state_',
               keep_total: int = 5, keep_first: bool = True,
               keep_every_k: int = 1, *, storage=None):
    if not isinstance(root_dir, (str, os.PathLike)):
      raise errors.InvalidTypeError(
          f'FileProgramStateManager: root_dir must be a path (str), got '
          f'{type(root_dir).__name__}.')
    root_dir = os.fspath(root_dir)
    if not root_dir:
      raise errors.InvalidValueError(
          'FileProgramStateManager: root_dir is empty; name a directory.')
    for name, value, kind in (('prefix', prefix, str),
                              ('keep_total', keep_total, int),
                              ('keep_first', keep_first, bool),
                              ('keep_every_k', keep_every_k, int)):
      if not isinstance(value, kind) or (kind is int and
                                         isinstance(value, bool)):
        raise errors.InvalidTypeError(
            f'FileProgramStateManager: {name} must be a {kind.__name__}, '
            f'got {type(value).__name__} {value!r}.')
    if '/' in prefix or os.sep in prefix:
      raise errors.InvalidValueError(
          f'FileProgramStateManager: prefix {prefix!r} holds a path '
          'separator; name subdirectories in root_dir instead.')
    if keep_every_k < 1:
      raise errors.InvalidValueError(
          f'FileProgramStateManager: keep_every_k must be 1 or more, got '
          f'{keep_every_k}.')
    self._storage = storage or storage_lib.default()
    self._root_dir = self._storage.absolute(root_dir)
    self._storage.makedirs(self._root_dir)
    self._prefix = prefix
    self._keep_total = keep_total
    self._keep_first = keep_first
    self._keep_every_k = keep_every_k
    self._lock = threading.Lock()  # One save's cleanup at a time.

  @property
  def root_dir(self) -> str:
    return self._root_dir

  def _path(self, version):
    return storage_lib.join(self._root_dir, f'{self._prefix}{version}')

  def _version_of(self, name):
    """The version a file name holds, or None (another file, a temporary
    one, or a spelling `_path` never writes, such as a leading zero)."""
    if not name.startswith(self._prefix):
      return None
    suffix = name[len(self._prefix):]
    return int(suffix) if _VERSION.fullmatch(suffix) else None

  def _versions(self):
    names = self._storage.list_names(self._root_dir)
    versions = sorted(v for v in map(self._version_of, names)
                      if v is not None)
    return versions or None

  async def get_versions(self) -> list[int] | None:
    return await asyncio.to_thread(self._versions)

  async def load(self, version: int, structure):
    """The state saved as `version`, in `structure`'s containers (None: the
    containers it was saved in, named tuples as new named tuple classes and
    dataclasses as dicts)."""
    version = check_int(version, 'FileProgramStateManager.load')
    return await asyncio.to_thread(self._load, version, structure)

  def _load(self, version, structure):
    path = self._path(version)
    try:
      data = self._storage.read_bytes(path)
    except storage_lib.NotFound:
      raise program_state_manager.ProgramStateNotFoundError(version) from None
    except IsADirectoryError:
      raise errors.InvalidValueError(
          f'{path!r} is a directory, not a program state file (a TFF '
          'SavedModel?); keep this manager\'s root_dir for its own files.'
      ) from None
    value = state_file.decode(
        data, state_file.AS_SAVED if structure is None else structure, path)
    _log.info('Program state loaded: %s', path)
    return value

  async def save(self, program_state, version: int) -> None:
    """Saves `program_state` as `version`, then deletes the versions the
    keep_* arguments let go."""
    version = check_int(version, 'FileProgramStateManager.save')
    program_state = await value_reference.materialize_value(program_state)
    await asyncio.to_thread(self._save, program_state, version)

  def _save(self, program_state, version):
    data = state_file.encode(program_state)  # Fails before any write.
    path = self._path(version)
    try:
      self._storage.create_only(path, data)
    except storage_lib.AlreadyExists:
      raise program_state_manager.ProgramStateExistsError(
          version=version, path=self._root_dir) from None
    _log.info('Program state saved: %s', path)
    self._remove_old_program_state()

  def _to_remove(self, versions):
    """TFF's rule: keep every k-th version, the latest, and the first if
    keep_first; then at most keep_total of those (the first, if kept, and
    the newest)."""
    last = len(versions) - 1
    kept = [v for i, v in enumerate(versions)
            if v % self._keep_every_k == 0 or i == last or (
                self._keep_first and i == 0)]
    if 0 < self._keep_total < len(kept):
      start = 1 if self._keep_first else 0
      del kept[start:len(kept) - (self._keep_total - start)]
    return [v for v in versions if v not in kept]

  def _remove_old_program_state(self):
    with self._lock:
      names = self._storage.list_names(self._root_dir)
      versions = sorted(v for v in map(self._version_of, names)
                        if v is not None)
      doomed = [self._path(v) for v in self._to_remove(versions)]
      # Temporary files of writes a killed process left (an hour old: a
      # younger one may be a live writer's).
      doomed += [storage_lib.join(self._root_dir, name) for name in names
                 if storage_lib.is_temporary(name) and
                 self._storage.is_abandoned_temporary(
                     storage_lib.join(self._root_dir, name))]
      if doomed:
        self._storage.delete(doomed)
        _log.info('Program state removed: %s', ', '.join(doomed))

  async def remove_all(self) -> None:
    """Deletes every saved version."""

    def remove():
      self._storage.delete([self._path(v) for v in self._versions() or ()])

    await asyncio.to_thread(remove)
