"""One storage layer for every file the project reads and writes.

A path is a local path or a URL that Apache Beam's FileSystems reach (s3://,
gs://, hdfs://, ...). Local paths go straight to the OS, as fast as plain
files. Other schemes go through Beam's `FileSystems`, except s3://: there
the process keeps the boto3 client Beam's S3 options configure (its
`boto3_client.Client`) and calls S3 directly. Beam's S3FileSystem builds a new
client (~0.2 s) for every call, writes every file in a three-request
multipart upload that fails on an empty file, and retries errors that cannot
pass (missing credentials) for minutes.

Writes are whole or nothing: a local file is written beside its target and
renamed; an object appears whole when its upload completes. `create_only` is
what a commit needs: it writes a file only where none exists (local: a hard
link; S3: `If-None-Match: *`; GCS: `ifGenerationMatch=0`), so of two writers
exactly one wins, on local disk and on object stores alike.

Filesystem settings (S3 endpoint and credentials, ...) are Beam's pipeline
options: `configure(options)` in the driver, and `configure(worker_options())`
on each worker (the DoFns carry that small dict and call it in `setup`).
"""

import os
import posixpath
import shutil
import tempfile
import threading
import time

from canonical import errors

_LOCAL_MODE = None  # A new file's mode under this process's umask.
_options = None     # The PipelineOptions set by `configure`.
_configured = None  # Their filesystem values, as `worker_options` gives them.
_s3_client = None  # One per process: boto3's low-level clients are thread-safe.
_s3_lock = threading.Lock()
_S3_PUT_LIMIT = 5 * 2**30  # The largest object one PutObject may write.


class StorageError(errors.Error, OSError):
  """A path that cannot be reached, read or written; the message says why."""


class NotFound(StorageError, FileNotFoundError):
  """No file at the path."""


class AlreadyExists(StorageError, FileExistsError):
  """`create_only` found a file already there."""


# ---------------------------------------------------------------------------
# Options


def configure(options):
  """Sets the filesystem options (PipelineOptions, a dict, flags or None).

  Cheap when they are the ones already set (workers call it per bundle).
  """
  global _options, _configured, _s3_client
  if isinstance(options, dict) and _options is not None and \
      options == _configured:
    return
  from apache_beam.io import filesystems  # pylint: disable=g-import-not-at-top
  options = pipeline_options(options)
  values = _option_values(options)
  if _options is not None and values == _configured:
    return
  _options, _configured, _s3_client = options, values, None
  filesystems.FileSystems.set_options(options)


def worker_options():
  """The filesystem options as a small dict to hand to workers."""
  return dict(_configured or {})


def options_of(options):
  """The filesystem settings (S3, HDFS, GCS) the given options carry."""
  return _option_values(pipeline_options(options))


def pipeline_options(options):
  """`PipelineOptions` from None, a dict, a list of flags, or options."""
  from apache_beam.options import pipeline_options as beam_options  # pylint: disable=g-import-not-at-top
  if options is None:  # Not PipelineOptions(): that would parse sys.argv.
    return beam_options.PipelineOptions([])
  if isinstance(options, dict):
    return beam_options.PipelineOptions.from_dictionary(options)
  if isinstance(options, (list, tuple)):
    return beam_options.PipelineOptions(list(options))
  return options


def _option_values(options):
  from apache_beam.options import pipeline_options  # pylint: disable=g-import-not-at-top
  values = {}
  for view in (pipeline_options.S3Options,
               pipeline_options.HadoopFileSystemOptions,
               pipeline_options.GoogleCloudOptions):
    values.update(options.view_as(view).get_all_options(
        drop_default=True, current_only=True))
  return {k: v for k, v in values.items() if v is not None}


# ---------------------------------------------------------------------------
# Paths


def scheme(path):
  """'s3', 'gs', ... for a URL; None for a local path."""
  path = os.fspath(path)
  head, sep, _ = path.partition('://')
  if not sep or not head or not head.replace('+', '').replace(
      '-', '').replace('.', '').isalnum():
    return None
  return None if head == 'file' else head


def is_local(path):
  return scheme(path) is None


def _local(path):
  path = os.fspath(path)
  return path[len('file://'):] if path.startswith('file://') else path


def absolute(path):
  """A local path made absolute (workers may run elsewhere); a URL checked
  to have a filesystem. Raises StorageError for an unknown scheme."""
  path = os.fspath(path)
  if is_local(path):
    return os.path.abspath(_local(path))
  _filesystem(path)
  return path.rstrip('/') if not path.endswith('://') else path


def join(base, *names):
  base = os.fspath(base)
  if is_local(base):
    return os.path.join(base, *names)
  return posixpath.join(base, *names)


def dirname(path):
  path = os.fspath(path)
  return os.path.dirname(path) if is_local(path) else posixpath.dirname(path)


def basename(path):
  path = os.fspath(path).rstrip('/')
  return os.path.basename(path) if is_local(path) else posixpath.basename(path)


def _filesystem(path):
  from apache_beam.io import filesystems  # pylint: disable=g-import-not-at-top
  try:
    return filesystems.FileSystems.get_filesystem(path)
  except ValueError:
    raise StorageError(
        f'No filesystem for scheme {scheme(path)!r} in {path!r}: Beam '
        'reaches local paths, s3:// (apache-beam[aws]), gs:// '
        '(apache-beam[gcp]) and hdfs:// (apache-beam[hadoop]).') from None


def _s3():
  """The process's boto3 S3 client, configured by Beam's S3 options
  (building one costs ~0.2 s of CPU)."""
  global _s3_client
  with _s3_lock:
    if _s3_client is None:
      from apache_beam.io.aws.clients.s3 import boto3_client  # pylint: disable=g-import-not-at-top
      from apache_beam.options import pipeline_options  # pylint: disable=g-import-not-at-top
      options = _options or pipeline_options.PipelineOptions([])
      _s3_client = boto3_client.Client(options).client
    return _s3_client


def _s3_key(path):
  bucket, _, key = path[len('s3://'):].partition('/')
  return bucket, key


# ---------------------------------------------------------------------------
# Reading and writing


def read_bytes(path):
  """The whole file; NotFound if there is none."""
  path = os.fspath(path)
  try:
    if is_local(path):
      with open(_local(path), 'rb') as f:
        return f.read()
    if scheme(path) == 's3':
      bucket, key = _s3_key(path)
      return _s3().get_object(Bucket=bucket, Key=key)['Body'].read()
    from apache_beam.io import filesystems  # pylint: disable=g-import-not-at-top
    with filesystems.FileSystems.open(
        path, compression_type='uncompressed') as f:
      return f.read()
  except FileNotFoundError:
    raise NotFound(f'No such file: {path!r}') from None
  except (StorageError, IsADirectoryError):
    raise
  except OSError as e:
    raise StorageError(f'Cannot read {path!r}: {_reason(e)}') from None
  except Exception as e:  # Remote clients raise their own kinds.
    if _error_code(e) in ('NoSuchKey', '404'):
      raise NotFound(f'No such file: {path!r}') from None
    raise _remote_error('read', path, e) from None


def write_bytes(path, data, sync=False):
  """Writes the file whole or not at all; returns the path.

  Locally: a temporary file beside the target, renamed over it (with `sync`,
  flushed to disk first); the file gets the mode a plain open() would give.
  """
  path = os.fspath(path)
  if is_local(path):
    return _write_local(_local(path), data, sync)
  try:
    if scheme(path) == 's3' and len(data) < _S3_PUT_LIMIT:
      bucket, key = _s3_key(path)
      _s3().put_object(Bucket=bucket, Key=key, Body=data)
    elif scheme(path) == 's3':  # Too large for one PUT: Beam's multipart.
      from apache_beam.io.aws import s3io  # pylint: disable=g-import-not-at-top
      with s3io.S3IO(options=_options).open(path, 'w') as f:
        f.write(data)
    else:
      from apache_beam.io import filesystems  # pylint: disable=g-import-not-at-top
      with filesystems.FileSystems.create(
          path, compression_type='uncompressed') as f:
        f.write(data)
  except StorageError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    raise _remote_error('write', path, e) from None
  return path


def is_temporary(name):
  """Whether a file name is one of `_write_local`'s temporary files (a write
  in flight, or left behind by a killed writer)."""
  return name.startswith('.') and name.endswith(_TEMPORARY_SUFFIX)


_TEMPORARY_SUFFIX = '.tmp'
ABANDONED_AFTER_SECONDS = 3600


def is_abandoned_temporary(path, min_age=ABANDONED_AFTER_SECONDS):
  """Whether `path` is a temporary file no writer will rename any more: not
  written for `min_age` seconds. A younger one may be another process's write
  in flight (a second driver's), which deleting would make fail. Only local
  writes use temporary files; one gone already is not abandoned."""
  if not is_temporary(basename(path)) or not is_local(path):
    return False
  try:
    return time.time() - os.stat(_local(path)).st_mtime >= min_age
  except FileNotFoundError:
    return False


def _write_local(path, data, sync, exclusive=False):
  """A temporary file beside `path`, then renamed over it; or, `exclusive`,
  hard-linked to it, which fails if any file is there (AlreadyExists)."""
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, temp = tempfile.mkstemp(prefix='.' + os.path.basename(path) + '.',
                              suffix=_TEMPORARY_SUFFIX, dir=directory)
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


def _local_mode():
  global _LOCAL_MODE
  if _LOCAL_MODE is None:
    mask = os.umask(0)  # The only way to read it; set back at once.
    os.umask(mask)
    _LOCAL_MODE = 0o666 & ~mask
  return _LOCAL_MODE


def create_only(path, data):
  """Writes the file only if none exists at `path`; else AlreadyExists.

  Atomic against concurrent writers: exactly one of them succeeds, and
  readers see the whole file or none.
  """
  path = os.fspath(path)
  kind = scheme(path)
  if kind is None:
    return _write_local(_local(path), data, sync=True, exclusive=True)
  if kind == 's3':
    return _create_only_s3(path, data)
  if kind == 'gs':
    return _create_only_gcs(path, data)
  raise StorageError(
      f'{path!r}: {kind}:// offers no create-only write, so a commit there '
      'could not be atomic; keep run directories on local or shared disk, '
      's3:// or gs://.')


def _create_only_s3(path, data):
  bucket, key = _s3_key(path)
  client = _s3()
  for attempt in range(5):
    try:
      client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch='*')
      return path
    except Exception as e:  # pylint: disable=broad-except
      code = _error_code(e)
      if code in ('PreconditionFailed', '412'):
        raise AlreadyExists(f'{path!r} already exists.') from None
      if code in ('ConditionalRequestConflict', '409') and attempt < 4:
        time.sleep(0.05 * 2**attempt)  # A concurrent conditional write.
        continue
      raise _remote_error('create', path, e) from None
  raise AssertionError('unreachable')


def _create_only_gcs(path, data):
  """GCS's documented create-only upload (not tested here: no GCS server)."""
  from apache_beam.io.gcp import gcsio  # pylint: disable=g-import-not-at-top
  from google.api_core import exceptions  # pylint: disable=g-import-not-at-top
  bucket, _, name = path[len('gs://'):].partition('/')
  blob = gcsio.GcsIO(pipeline_options=_options).client.bucket(bucket).blob(
      name)
  try:
    blob.upload_from_string(data, if_generation_match=0)
  except exceptions.PreconditionFailed:
    raise AlreadyExists(f'{path!r} already exists.') from None
  return path


# ---------------------------------------------------------------------------
# Directories


def exists(path):
  path = os.fspath(path)
  if is_local(path):
    return os.path.exists(_local(path))
  if scheme(path) == 's3':
    bucket, key = _s3_key(path.rstrip('/'))
    try:
      found = _s3().list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1)
    except Exception as e:  # pylint: disable=broad-except
      raise _remote_error('look for', path, e) from None
    return any(item['Key'] == key or item['Key'].startswith(key + '/')
               for item in found.get('Contents', ())) or bool(
                   list_files(path))
  from apache_beam.io import filesystems  # pylint: disable=g-import-not-at-top
  return filesystems.FileSystems.exists(path) or bool(list_files(path))


def makedirs(path):
  """Creates a local directory; object stores have none to create."""
  if is_local(path):
    os.makedirs(_local(path), exist_ok=True)


def list_files(directory):
  """Paths relative to `directory` of every file below it, recursively."""
  directory = os.fspath(directory)
  if is_local(directory):
    root = _local(directory)
    found = []
    for parent, _, files in os.walk(root):
      relative = os.path.relpath(parent, root)
      found += [f if relative == '.' else os.path.join(relative, f)
                for f in files]
    return sorted(found)
  prefix = directory.rstrip('/') + '/'
  try:
    if scheme(directory) == 's3':
      bucket, key = _s3_key(prefix)
      pages = _s3().get_paginator('list_objects_v2').paginate(Bucket=bucket,
                                                              Prefix=key)
      paths = [f's3://{bucket}/{item["Key"]}' for page in pages
               for item in page.get('Contents', ())]
    else:
      from apache_beam.io import filesystems  # pylint: disable=g-import-not-at-top
      matched = filesystems.FileSystems.match([prefix + '**'])[0]
      paths = [m.path for m in matched.metadata_list]
  except Exception as e:  # pylint: disable=broad-except
    if isinstance(e, FileNotFoundError) or _error_code(e) in ('404',
                                                              'NoSuchKey'):
      return []
    raise _remote_error('list', directory, e) from None
  return sorted(p[len(prefix):] for p in paths if p.startswith(prefix))


def list_names(directory):
  """Names of the files and directories directly in `directory` ([] if none)."""
  directory = os.fspath(directory)
  if is_local(directory):
    try:
      return sorted(os.listdir(_local(directory)))
    except (FileNotFoundError, NotADirectoryError):
      return []
  return sorted({p.split('/', 1)[0] for p in list_files(directory)})


def delete(paths):
  """Deletes files; missing ones are fine."""
  paths = [os.fspath(p) for p in paths]
  local = [p for p in paths if is_local(p)]
  remote = [p for p in paths if not is_local(p)]
  for path in local:
    try:
      os.remove(_local(path))
    except FileNotFoundError:
      pass
  if not remote:
    return
  s3 = [p for p in remote if scheme(p) == 's3']
  others = [p for p in remote if scheme(p) != 's3']
  try:
    by_bucket = {}
    for path in s3:
      bucket, key = _s3_key(path)
      by_bucket.setdefault(bucket, []).append(key)
    for bucket, keys in by_bucket.items():
      for start in range(0, len(keys), 1000):  # S3's limit per request.
        result = _s3().delete_objects(Bucket=bucket, Delete={
            'Objects': [{'Key': k} for k in keys[start:start + 1000]],
            'Quiet': True})
        errors = [e for e in result.get('Errors', ())
                  if e.get('Code') != 'NoSuchKey']
        if errors:
          raise RuntimeError(f'{errors[0].get("Key")}: '
                             f'{errors[0].get("Message")}')
    if others:
      from apache_beam.io import filesystems  # pylint: disable=g-import-not-at-top
      filesystems.FileSystems.delete([p for p in others if exists(p)])
  except Exception as e:  # pylint: disable=broad-except
    raise _remote_error('delete', (s3 or others)[0], e) from None


def delete_empty_directory(directory):
  """Deletes a local directory if it is empty (others' files stay); object
  stores have no directories, so there it does nothing."""
  directory = os.fspath(directory)
  if is_local(directory):
    try:
      os.rmdir(_local(directory))
    except OSError:
      pass


def delete_tree(directory):
  """Deletes a directory and everything below it; missing is fine."""
  directory = os.fspath(directory)
  if is_local(directory):
    shutil.rmtree(_local(directory), ignore_errors=True)
    return
  delete([join(directory, p) for p in list_files(directory)])


# ---------------------------------------------------------------------------
# Checks before a run


def check_writable(path, what='path'):
  """Raises StorageError, in one line, if files cannot be created at `path`
  (no filesystem for its scheme, a missing bucket, bad credentials, a local
  directory that cannot be made); writes nothing."""
  path = os.fspath(path)
  if is_local(path):
    existing = os.path.abspath(_local(path))
    while not os.path.exists(existing):
      existing = os.path.dirname(existing)
    if not os.path.isdir(existing) or not os.access(existing,
                                                    os.W_OK | os.X_OK):
      raise StorageError(f'{what} {path!r}: cannot create files '
                         f'there ({existing!r} is not a writable directory).')
    return
  _filesystem(path)
  if scheme(path) == 's3':
    bucket, _ = _s3_key(path)
    try:
      _s3().head_bucket(Bucket=bucket)
    except Exception as e:  # pylint: disable=broad-except
      if _error_code(e) in ('404', 'NoSuchBucket'):
        raise StorageError(f'{what} {path!r}: the bucket {bucket!r} does '
                           'not exist.') from None
      raise _remote_error('reach', path, e, what) from None
  else:
    try:
      list_files(path)
    except StorageError as e:
      raise StorageError(f'{what} {path!r}: {e}') from None


def _error_code(error):
  response = getattr(error, 'response', None)
  if isinstance(response, dict):
    code = response.get('Error', {}).get('Code')
    if code:
      return str(code)
  code = getattr(error, 'code', None)
  return None if code is None else str(code)


def _reason(error):
  text = str(getattr(error, 'strerror', None) or error).strip()
  return text.splitlines()[0] if text else type(error).__name__


_REMOTE_HINTS = {
    'NoSuchBucket': 'the bucket does not exist',
    '404': 'not found (is the bucket there?)',
    'InvalidAccessKeyId': 'the access key is not known (check '
                          '--s3_access_key_id or AWS credentials)',
    'SignatureDoesNotMatch': 'the secret key does not match (check '
                             '--s3_secret_access_key)',
    'AccessDenied': 'access denied', '403': 'access denied (check the '
                                           'credentials and permissions)',
}


def _remote_error(action, path, error, what=None):
  code = _error_code(error)
  name = type(error).__name__
  if 'Credentials' in name:
    reason = ('no credentials: pass --s3_access_key_id and '
              '--s3_secret_access_key, or set AWS credentials')
  elif 'EndpointConnection' in name or 'ConnectionError' in name or \
      'Could not connect' in str(error):
    reason = f'cannot connect to the endpoint ({_reason(error)})'
  else:
    reason = _REMOTE_HINTS.get(code) or f'{name}: {_reason(error)}'
  prefix = f'{what} {path!r}' if what else f'Cannot {action} {path!r}'
  return StorageError(f'{prefix}: {reason}.')
