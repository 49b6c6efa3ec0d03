"""`CSVFileReleaseManager`: released values as rows of one CSV file, on any
storage `canonical.io` reaches (a local path, s3://, gs://).

A row is the key, then each leaf of the value under its path's name
('loss', 'metrics/accuracy', 'weights/0'; '' for a lone value) as numpy's
`tolist()` of it (datasets as the list of their elements), as in TFF. A
release first drops the rows of its key and any later one, so a program
that restarts from an earlier round rewrites the rows after it. New names
become new columns; a row without a column leaves it empty.

Every release rewrites the whole file with one atomic write (a temporary
file renamed into place locally; one PUT on an object store), so a reader
never sees a half-written row. Object stores cannot append, so both save
modes do this and write the same bytes: APPEND is accepted for TFF's code
and differs from WRITE only in TFF, in how the file is updated.
"""

import asyncio
import collections
import csv
import enum
import io
import os
import threading

import numpy as np
import tensorflow as tf

from canonical import errors
from canonical import io as storage_lib
from canonical.program import file_program_state_manager
from canonical.program import release_manager
from canonical.program import structure
from canonical.program import value_reference


class CSVKeyFieldnameNotFoundError(errors.Error, ValueError):
  """An existing file without the key column (not written by a manager
  with this `key_fieldname`)."""

  def __init__(self, file_path, key_fieldname: str):
    super().__init__(
        f'{file_path!s} has no {key_fieldname!r} column: it was not written '
        'by a CSVFileReleaseManager, or by one with another key_fieldname. '
        'Give that key_fieldname, or another file.')


@enum.unique
class CSVSaveMode(enum.Enum):
  APPEND = 'append'
  WRITE = 'write'


def _cell(value):
  """A leaf as its CSV cell's value: numpy's nested lists of scalars."""
  if isinstance(value, tf.data.Dataset):
    value = list(value)
  return np.array(value).tolist()


class CSVFileReleaseManager(release_manager.ReleaseManager):
  """Releases values keyed by an int (a round) to the CSV file `file_path`
  (created, with only the key column, if missing), through `storage` (a
  `canonical.io.Storage`; the process's default if None)."""

  def __init__(self, file_path, save_mode: CSVSaveMode = CSVSaveMode.APPEND,
               key_fieldname: str = 'key', *, storage=None):
    if not isinstance(file_path, (str, bytes, os.PathLike)):
      raise errors.InvalidTypeError(
          f'CSVFileReleaseManager: file_path must be a path (str), got '
          f'{type(file_path).__name__}.')
    file_path = os.fsdecode(file_path)
    if not file_path:
      raise errors.InvalidValueError(
          'CSVFileReleaseManager: file_path is empty; name a file.')
    if not isinstance(save_mode, CSVSaveMode):
      raise errors.InvalidTypeError(
          f'CSVFileReleaseManager: save_mode must be a CSVSaveMode, got '
          f'{save_mode!r}.')
    if not isinstance(key_fieldname, str) or not key_fieldname:
      raise errors.InvalidValueError(
          f'CSVFileReleaseManager: key_fieldname must be a non-empty str, '
          f'got {key_fieldname!r}.')
    self._storage = storage or storage_lib.default()
    self._file_path = self._storage.absolute(file_path)
    self._save_mode = save_mode
    self._key_fieldname = key_fieldname
    self._lock = threading.Lock()  # Releases read and rewrite the file,
    self._last = None  # in the order they start (the last one's future).
    self._storage.makedirs(storage_lib.dirname(self._file_path))
    try:
      fieldnames, _ = self._read()
    except storage_lib.NotFound:
      self._write([key_fieldname], [])
    else:
      if key_fieldname not in fieldnames:
        raise CSVKeyFieldnameNotFoundError(self._file_path, key_fieldname)

  @property
  def file_path(self) -> str:
    return self._file_path

  def _read(self):
    """`(fieldnames, rows)`; rows as dicts of the file's strings."""
    text = self._storage.read_bytes(self._file_path).decode('utf-8')
    reader = csv.DictReader(io.StringIO(text, newline=''))
    rows = list(reader)
    return list(reader.fieldnames or []), rows

  def _write(self, fieldnames, rows):
    buffer = io.StringIO(newline='')
    writer = csv.DictWriter(buffer, fieldnames=fieldnames)
    writer.writeheader()
    writer.writerows(rows)
    self._storage.write_bytes(self._file_path,
                              buffer.getvalue().encode('utf-8'))

  def _key_of(self, row):
    try:
      return int(row[self._key_fieldname])
    except (TypeError, ValueError):
      raise errors.InvalidValueError(
          f'{self._file_path}: a row has {self._key_fieldname} '
          f'{row[self._key_fieldname]!r}, not an int; was the file edited?'
      ) from None

  async def release(self, value, key: int) -> None:
    """Writes `value`'s row as `key` (an int: a step of the program), after
    dropping the rows of `key` and later keys. Releases running at once
    (`asyncio.gather`) write in the order they started, so each sees the
    rows of the ones before it."""
    previous = self._last
    self._last = done = asyncio.get_running_loop().create_future()
    try:
      key = file_program_state_manager.check_int(
          key, 'CSVFileReleaseManager.release', 'key')
      value = await value_reference.materialize_value(value)
      row = collections.OrderedDict([(self._key_fieldname, key)])
      for path, leaf in structure.flatten_with_path(value):
        row[structure.path_name(path)] = _cell(leaf)
      if previous is not None:  # The release before this one, done or not.
        await asyncio.shield(previous)
      await asyncio.to_thread(self._release, row, key)
    finally:
      if not done.done():
        done.set_result(None)

  def _release(self, row, key):
    with self._lock:
      fieldnames, rows = self._read()
      if self._key_fieldname not in fieldnames:
        raise CSVKeyFieldnameNotFoundError(self._file_path,
                                           self._key_fieldname)
      kept = [r for r in rows if self._key_of(r) < key]
      if len(kept) < len(rows) and not kept:
        fieldnames = [self._key_fieldname]  # As TFF: columns start afresh.
      fieldnames += [name for name in row if name not in fieldnames]
      self._write(fieldnames, kept + [row])
