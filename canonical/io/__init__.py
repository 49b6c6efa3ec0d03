"""Storage: one layer for every file the project reads and writes.

A path is a local path or a URL whose scheme Apache Beam's FileSystems reach
(s3://, gs://, hdfs://, ...). One protocol (`FileStore`), one back end per
scheme (`local`, `s3`, `gcs`, and `beam` for the rest), chosen by the path
(`schemes`). How to reach remote filesystems (S3 endpoint, credentials, ...)
is an explicit value, `Settings`, taken from Beam's pipeline options; a
`Storage` does every operation with one `Settings`, and travels to workers
inside the steps that use it.

    storage = io.storage_for(pipeline_options)   # the driver
    storage.write_bytes('s3://bucket/run/x', data)
    storage.create_only('s3://bucket/run/commits/3.json', data)  # commits

Writes are whole or nothing; `create_only` writes only where no file exists,
so of racing writers exactly one wins, on local disk (a hard link) and on
object stores (S3's `If-None-Match: *`, GCS's `ifGenerationMatch=0`) alike.

The functions of this module do the same with the process's default storage:
settings from nothing but the environment, unless `configure` was called
(tests and interactive use; the runner and the pipelines pass their
`Storage` down instead).
"""

from canonical.io.errors import AlreadyExists
from canonical.io.errors import NotFound
from canonical.io.errors import StorageError
from canonical.io.filestore import FileStore
from canonical.io import paths
from canonical.io.paths import basename
from canonical.io.paths import dirname
from canonical.io.paths import is_local
from canonical.io.paths import is_temporary
from canonical.io.paths import is_within
from canonical.io.paths import join
from canonical.io.paths import scheme
from canonical.io.schemes import register
from canonical.io.settings import pipeline_options
from canonical.io.settings import Settings
from canonical.io.storage import ABANDONED_AFTER_SECONDS
from canonical.io.storage import for_settings
from canonical.io.storage import Storage

_default = [for_settings(Settings())]


def configure(options=None) -> Storage:
  """Makes the process's default storage the one of `options` (Settings,
  PipelineOptions, a dict, flags or None) and returns it."""
  _default[0] = for_settings(Settings.of(options))
  return _default[0]


def default() -> Storage:
  """The process's default storage (see `configure`)."""
  return _default[0]


def storage_for(options=None) -> Storage:
  """The storage of `options`' filesystem settings; options without any
  (None, or only a runner's flags) keep the process's default."""
  settings = Settings.of(options)
  return for_settings(settings) if settings else default()


def options_of(options) -> dict:
  """The filesystem settings `options` carry, as a dict."""
  return Settings.of(options).as_dict()


def worker_options() -> dict:
  """The default storage's settings, as a dict."""
  return default().settings.as_dict()


def absolute(path) -> str:
  return default().absolute(path)


def read_bytes(path) -> bytes:
  return default().read_bytes(path)


def write_bytes(path, data: bytes, sync: bool = False) -> str:
  return default().write_bytes(path, data, sync)


def create_only(path, data: bytes) -> str:
  return default().create_only(path, data)


def exists(path) -> bool:
  return default().exists(path)


def list_files(directory) -> list[str]:
  return default().list_files(directory)


def list_names(directory) -> list[str]:
  return default().list_names(directory)


def delete(files) -> None:
  default().delete(files)


def delete_tree(directory) -> None:
  default().delete_tree(directory)


def makedirs(directory) -> None:
  default().makedirs(directory)


def delete_empty_directory(directory) -> None:
  default().delete_empty_directory(directory)


def check_writable(path, what: str = 'path') -> None:
  default().check_writable(path, what)


def is_abandoned_temporary(path,
                           min_age: float = ABANDONED_AFTER_SECONDS) -> bool:
  return default().is_abandoned_temporary(path, min_age)
