"""`Storage`: every file operation, on any path, with one `Settings`.

Each operation goes to the `FileStore` of its path's scheme (`schemes`), made
once per scheme with this storage's settings. A `Storage` pickles as its
settings and unpickles to its process's own one (`for_settings`), so a driver
hands its storage to its workers by putting it in its Beam steps: each worker
reaches the same files with the same settings, with one S3 client per
process.
"""

import functools
import threading

from canonical.io import paths
from canonical.io import schemes
from canonical.io import settings as settings_lib

ABANDONED_AFTER_SECONDS = 3600


class Storage:
  """Files at local paths and URLs, reached with `settings`."""

  def __init__(self, settings: settings_lib.Settings | None = None):
    self.settings = settings or settings_lib.Settings()
    self._stores = {}
    self._lock = threading.Lock()

  def __reduce__(self):
    return for_settings, (self.settings,)

  def __repr__(self):
    return f'Storage({dict(self.settings.values)!r})'

  def store(self, path):
    """The `FileStore` of `path`'s scheme."""
    scheme = paths.scheme(path)
    with self._lock:
      if scheme not in self._stores:
        self._stores[scheme] = schemes.store_class(scheme)(self.settings)
      return self._stores[scheme]

  def absolute(self, path) -> str:
    """A local path made absolute (workers may run elsewhere); a URL checked
    to have a filesystem (StorageError for an unknown scheme)."""
    path = str(path)
    return self.store(path).absolute(path)

  def read_bytes(self, path) -> bytes:
    """The whole file; NotFound if there is none."""
    path = str(path)
    return self.store(path).read_bytes(path)

  def write_bytes(self, path, data: bytes, sync: bool = False) -> str:
    """Writes the file whole or not at all; returns the path."""
    path = str(path)
    return self.store(path).write_bytes(path, data, sync)

  def create_only(self, path, data: bytes) -> str:
    """Writes the file only where none exists (AlreadyExists otherwise):
    of racing writers exactly one wins. What commits are made of."""
    path = str(path)
    return self.store(path).create_only(path, data)

  def exists(self, path) -> bool:
    path = str(path)
    return self.store(path).exists(path)

  def list_files(self, directory) -> list[str]:
    """Paths relative to `directory` of every file below it, recursively."""
    directory = str(directory)
    return self.store(directory).list_files(directory)

  def list_names(self, directory) -> list[str]:
    """Names of the files and directories directly in `directory` ([] if
    none)."""
    directory = str(directory)
    return self.store(directory).list_names(directory)

  def delete(self, files) -> None:
    """Deletes files; missing ones are fine."""
    by_scheme = {}
    for path in map(str, files):
      by_scheme.setdefault(paths.scheme(path), []).append(path)
    for group in by_scheme.values():
      self.store(group[0]).delete(group)

  def delete_tree(self, directory) -> None:
    """Deletes a directory and everything below it; missing is fine."""
    directory = str(directory)
    self.store(directory).delete_tree(directory)

  def makedirs(self, directory) -> None:
    """Creates a local directory; object stores have none to create."""
    directory = str(directory)
    self.store(directory).makedirs(directory)

  def delete_empty_directory(self, directory) -> None:
    """Deletes a local directory if it is empty (others' files stay)."""
    directory = str(directory)
    self.store(directory).delete_empty_directory(directory)

  def check_writable(self, path, what: str = 'path') -> None:
    """Raises StorageError, in one line, if files cannot be created at
    `path`; writes nothing."""
    path = str(path)
    self.store(path).check_writable(path, what)

  def is_abandoned_temporary(self, path,
                             min_age: float = ABANDONED_AFTER_SECONDS) -> bool:
    """Whether `path` is a temporary file no writer will rename any more: not
    written for `min_age` seconds. A younger one may be another process's
    write in flight (a second driver's), which deleting would make fail."""
    path = str(path)
    return self.store(path).is_abandoned_temporary(path, min_age)


@functools.lru_cache(maxsize=16)
def for_settings(settings: settings_lib.Settings) -> Storage:
  """This process's `Storage` for `settings` (one per settings, so each S3
  client is made once)."""
  return Storage(settings)
