"""`TensorBoardReleaseManager`: released values as TensorBoard summaries
(`tf.summary` event files), as in TFF: each leaf under its path's name
('loss', 'model_metrics/accuracy'), a scalar with `tf.summary.scalar`, an
array with `tf.summary.histogram`, at step `key`; leaves that are not
booleans or numbers (strings, say) are skipped, as TFF skips them.

A local `summary_dir` gets TensorFlow's own event file, appended to as
values are released. Any other path `canonical.io` reaches (s3://, gs://)
gets the same file through the storage layer: it is written in a local
staging directory and, after each release, copied whole to `summary_dir`
(one atomic write), so a reader never sees a half-written event.
"""

import asyncio
import os
import shutil
import tempfile
import threading
import weakref

import numpy as np
import tensorflow as tf

from canonical import errors
from canonical import io as storage_lib
from canonical.program import file_program_state_manager
from canonical.program import release_manager
from canonical.program import structure
from canonical.program import value_reference


class TensorBoardReleaseManager(release_manager.ReleaseManager):
  """Releases values keyed by an int (a step) to event files in
  `summary_dir` (created if missing), through `storage` (a
  `canonical.io.Storage`; the process's default if None)."""

  def __init__(self, summary_dir, *, storage=None):
    if not isinstance(summary_dir, (str, os.PathLike)):
      raise errors.InvalidTypeError(
          f'TensorBoardReleaseManager: summary_dir must be a path (str), got '
          f'{type(summary_dir).__name__}.')
    summary_dir = os.fspath(summary_dir)
    if not summary_dir:
      raise errors.InvalidValueError(
          'TensorBoardReleaseManager: summary_dir is empty; name a '
          'directory.')
    self._storage = storage or storage_lib.default()
    self._summary_dir = self._storage.absolute(summary_dir)
    self._storage.makedirs(self._summary_dir)
    if storage_lib.is_local(self._summary_dir):
      self._staging = None
      writer_dir = self._summary_dir
    else:
      self._staging = tempfile.mkdtemp(prefix='tensorboard_release_')
      weakref.finalize(self, shutil.rmtree, self._staging, True)
      writer_dir = self._staging
    self._writer = tf.summary.create_file_writer(writer_dir)
    self._lock = threading.Lock()

  @property
  def summary_dir(self) -> str:
    return self._summary_dir

  async def release(self, value, key: int) -> None:
    """Writes `value`'s numeric leaves as summaries at step `key`."""
    key = file_program_state_manager.check_int(
        key, 'TensorBoardReleaseManager.release', 'key')
    value = await value_reference.materialize_value(value)
    await asyncio.to_thread(self._release, value, key)

  def _release(self, value, key):
    with self._lock:
      with self._writer.as_default():
        for path, leaf in structure.flatten_with_path(value):
          if isinstance(leaf, tf.data.Dataset):
            leaf = list(leaf)
          array = np.array(leaf)
          if array.dtype.kind not in 'biuf':
            continue  # Summaries hold booleans and numbers only.
          name = structure.path_name(path)
          if array.shape:
            tf.summary.histogram(name, array, step=key)
          else:
            tf.summary.scalar(name, array, step=key)
      self._writer.flush()
      if self._staging is not None:
        for name in os.listdir(self._staging):
          with open(os.path.join(self._staging, name), 'rb') as f:
            self._storage.write_bytes(
                storage_lib.join(self._summary_dir, name), f.read())
