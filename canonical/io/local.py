"""Local files (and file:// URLs), straight through the OS.

A write goes to a temporary file beside its target, then is renamed over it
(whole or nothing); `create_only` hard-links the temporary file to the
target, which fails if any file is there, whoever made it.
"""

import os
import shutil
import tempfile
import time

from canonical.io import errors
from canonical.io.errors import AlreadyExists
from canonical.io.errors import NotFound
from canonical.io.errors import StorageError
from canonical.io import filestore
from canonical.io import paths

_mode = None  # A new file's mode under this process's umask.


def _local_mode():
  global _mode
  if _mode is None:
    mask = os.umask(0)  # The only way to read it; set back at once.
    os.umask(mask)
    _mode = 0o666 & ~mask
  return _mode


class LocalStore(filestore.FileStore):
  """Files on this machine's (or a mounted shared) disk."""

  def absolute(self, path):
    return os.path.abspath(paths.local(path))

  def read_bytes(self, path):
    try:
      with open(paths.local(path), 'rb') as f:
        return f.read()
    except FileNotFoundError:
      raise NotFound(f'No such file: {path!r}') from None
    except IsADirectoryError:
      raise
    except OSError as e:
      raise StorageError(f'Cannot read {path!r}: {errors.reason(e)}') from None

  def write_bytes(self, path, data, sync=False):
    return self._write(paths.local(path), data, sync)

  def create_only(self, path, data):
    return self._write(paths.local(path), data, sync=True, exclusive=True)

  def _write(self, path, data, sync, exclusive=False):
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix='.' + os.path.basename(path) + '.',
                                suffix=paths.TEMPORARY_SUFFIX, dir=directory)
    try:
      with os.fdopen(fd, 'wb') as f:
        f.write(data)
        if sync:
          f.flush()
          os.fsync(f.fileno())
      os.chmod(temp, _local_mode())
      if not exclusive:
        os.replace(temp, path)
        return path
      try:
        os.link(temp, path)  # Fails if `path` exists, whoever made it.
      except FileExistsError:
        raise AlreadyExists(f'{path!r} already exists.') from None
      return path
    finally:
      if os.path.exists(temp):
        os.remove(temp)

  def exists(self, path):
    return os.path.exists(paths.local(path))

  def list_files(self, directory):
    root = paths.local(directory)
    found = []
    for parent, _, files in os.walk(root):
      relative = os.path.relpath(parent, root)
      found += [f if relative == '.' else os.path.join(relative, f)
                for f in files]
    return sorted(found)

  def list_names(self, directory):
    try:
      return sorted(os.listdir(paths.local(directory)))
    except (FileNotFoundError, NotADirectoryError):
      return []

  def delete(self, files):
    for path in files:
      try:
        os.remove(paths.local(path))
      except FileNotFoundError:
        pass

  def delete_tree(self, directory):
    shutil.rmtree(paths.local(directory), ignore_errors=True)

  def makedirs(self, directory):
    os.makedirs(paths.local(directory), exist_ok=True)

  def delete_empty_directory(self, directory):
    try:
      os.rmdir(paths.local(directory))
    except OSError:
      pass  # Not empty (others' files stay), or gone.

  def check_writable(self, path, what='path'):
    existing = os.path.abspath(paths.local(path))
    while not os.path.exists(existing):
      existing = os.path.dirname(existing)
    if not os.path.isdir(existing) or not os.access(existing,
                                                    os.W_OK | os.X_OK):
      raise StorageError(f'{what} {path!r}: cannot create files '
                         f'there ({existing!r} is not a writable directory).')

  def is_abandoned_temporary(self, path, min_age):
    if not paths.is_temporary(paths.basename(path)):
      return False
    try:
      return time.time() - os.stat(paths.local(path)).st_mtime >= min_age
    except FileNotFoundError:
      return False
