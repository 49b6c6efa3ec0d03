"""`FileStore`: the protocol every filesystem scheme implements.

One class per scheme (`local`, `s3`, `gcs`; `beam` for whatever else Beam's
FileSystems reaches), chosen by the path's scheme (`schemes`), each made with
the `Settings` of the `Storage` that uses it.

What the rest of the project relies on:

- `write_bytes` is whole or nothing: a reader sees the old file, the new one,
  or none, never part of one.
- `create_only` is what a commit needs (round commits, run locks, prepared
  data's manifest): it writes only where no file exists, atomically, so of
  racing writers exactly one wins and the others get `AlreadyExists`. A scheme
  that cannot do that raises `StorageError` from it, and a run directory
  cannot live there (HDFS through Beam).
- Errors are `StorageError`s (`NotFound` for a missing file) whose message
  names the path and why, in one line.
"""

import abc

from canonical.io.errors import StorageError
from canonical.io import settings as settings_lib


class FileStore(abc.ABC):
  """The files of one scheme, reached with `settings`."""

  def __init__(self, settings: settings_lib.Settings):
    self.settings = settings

  @abc.abstractmethod
  def read_bytes(self, path: str) -> bytes:
    """The whole file; NotFound if there is none."""

  @abc.abstractmethod
  def write_bytes(self, path: str, data: bytes, sync: bool = False) -> str:
    """Writes the file whole or not at all (`sync`: flushed to disk before
    it appears, where that means anything); returns the path."""

  @abc.abstractmethod
  def create_only(self, path: str, data: bytes) -> str:
    """Writes the file only if none exists; else AlreadyExists. Atomic
    against concurrent writers: exactly one of them succeeds."""

  @abc.abstractmethod
  def exists(self, path: str) -> bool:
    """Whether a file, or a directory holding files, is at `path`."""

  @abc.abstractmethod
  def list_files(self, directory: str) -> list[str]:
    """Paths relative to `directory` of every file below it, recursively
    ([] if there is none)."""

  @abc.abstractmethod
  def delete(self, files: list[str]) -> None:
    """Deletes files; missing ones are fine."""

  @abc.abstractmethod
  def check_writable(self, path: str, what: str = 'path') -> None:
    """Raises StorageError, in one line, if files cannot be created at
    `path` (a missing bucket, bad credentials, ...); writes nothing."""

  def absolute(self, path: str) -> str:
    """`path` as workers anywhere reach it."""
    return path.rstrip('/') if not path.endswith('://') else path

  def list_names(self, directory: str) -> list[str]:
    """Names of the files and directories directly in `directory`."""
    return sorted({p.split('/', 1)[0] for p in self.list_files(directory)})

  def delete_tree(self, directory: str) -> None:
    """Deletes a directory and everything below it; missing is fine."""
    prefix = directory.rstrip('/') + '/'
    self.delete([prefix + p for p in self.list_files(directory)])

  def makedirs(self, directory: str) -> None:
    """Creates a directory where the scheme has them (object stores don't)."""
    del directory

  def delete_empty_directory(self, directory: str) -> None:
    """Deletes an empty directory where the scheme has them."""
    del directory

  def is_abandoned_temporary(self, path: str, min_age: float) -> bool:
    """Whether `path` is a temporary file of a write no writer will finish
    (only local writes make temporary files)."""
    del path, min_age
    return False


def no_create_only(path, scheme):
  """The error of a scheme without create-only writes."""
  return StorageError(
      f'{path!r}: {scheme}:// offers no create-only write, so a commit there '
      'could not be atomic; keep run directories on local or shared disk, '
      's3:// or gs://.')
