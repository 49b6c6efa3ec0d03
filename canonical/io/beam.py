"""Any scheme Apache Beam's `FileSystems` reaches (hdfs://, ...): the store a
scheme gets when no store of its own is registered.

Beam's FileSystems read their settings from one process-wide place
(`FileSystems.set_options`); a store sets its own before each use, so stores
of different settings in one process do not see each other's. Beam offers no
create-only write, so no run directory can live on such a scheme.
"""

import threading

from canonical.io import errors
from canonical.io.errors import NotFound
from canonical.io.errors import StorageError
from canonical.io import filestore
from canonical.io import paths

_lock = threading.Lock()
_options_set = [None]  # The Settings Beam's FileSystems hold now.


def filesystems(settings):
  """Beam's `FileSystems`, holding `settings`."""
  from apache_beam.io import filesystems as beam_filesystems  # pylint: disable=g-import-not-at-top
  with _lock:
    if _options_set[0] != settings:
      beam_filesystems.FileSystems.set_options(settings.pipeline_options())
      _options_set[0] = settings
  return beam_filesystems.FileSystems


class BeamStore(filestore.FileStore):
  """Files through Beam's FileSystems."""

  def _fs(self):
    return filesystems(self.settings)

  def check_scheme(self, path):
    """StorageError unless Beam has a filesystem for `path`'s scheme."""
    try:
      self._fs().get_filesystem(path)
    except ValueError:
      raise StorageError(
          f'No filesystem for scheme {paths.scheme(path)!r} in {path!r}: '
          'Beam reaches local paths, s3:// (apache-beam[aws]), gs:// '
          '(apache-beam[gcp]) and hdfs:// (apache-beam[hadoop]).') from None

  def absolute(self, path):
    self.check_scheme(path)
    return super().absolute(path)

  def read_bytes(self, path):
    try:
      with self._fs().open(path, compression_type='uncompressed') as f:
        return f.read()
    except FileNotFoundError:
      raise NotFound(f'No such file: {path!r}') from None
    except StorageError:
      raise
    except Exception as e:  # pylint: disable=broad-except
      raise errors.read_error(path, e) from None

  def write_bytes(self, path, data, sync=False):
    del sync  # An object appears whole when its upload completes.
    try:
      with self._fs().create(path, compression_type='uncompressed') as f:
        f.write(data)
    except Exception as e:  # pylint: disable=broad-except
      raise errors.remote_error('write', path, e) from None
    return path

  def create_only(self, path, data):
    raise filestore.no_create_only(path, path.partition('://')[0])

  def exists(self, path):
    try:
      return self._fs().exists(path) or bool(self.list_files(path))
    except StorageError:
      raise
    except Exception as e:  # pylint: disable=broad-except
      raise errors.remote_error('look for', path, e) from None

  def list_files(self, directory):
    prefix = directory.rstrip('/') + '/'
    try:
      matched = self._fs().match([prefix + '**'])[0]
    except Exception as e:  # pylint: disable=broad-except
      if isinstance(e, FileNotFoundError) or errors.error_code(e) in (
          '404', 'NoSuchKey'):
        return []
      raise errors.remote_error('list', directory, e) from None
    return sorted(m.path[len(prefix):] for m in matched.metadata_list
                  if m.path.startswith(prefix))

  def delete(self, files):
    try:
      present = [p for p in files if self._fs().exists(p)]
      if present:
        self._fs().delete(present)
    except Exception as e:  # pylint: disable=broad-except
      raise errors.remote_error('delete', files[0], e) from None

  def check_writable(self, path, what='path'):
    self.check_scheme(path)
    try:
      self.list_files(path)
    except StorageError as e:
      raise StorageError(f'{what} {path!r}: {e}') from None
