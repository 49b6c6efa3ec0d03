"""s3://: S3 itself, through one boto3 client per store.

The client is the one Beam's S3 options configure (`boto3_client.Client`),
made once (~0.2 s of CPU) and kept: Beam's own S3FileSystem builds one for
every call, writes every file in a three-request multipart upload that fails
on an empty file, and retries errors that cannot pass (missing credentials)
for minutes. Commits use S3's conditional write (`If-None-Match: *`).
"""

import threading
import time

from canonical.io import errors
from canonical.io.errors import AlreadyExists
from canonical.io.errors import StorageError
from canonical.io import filestore

_PUT_LIMIT = 5 * 2**30  # The largest object one PutObject may write.
_DELETE_LIMIT = 1000    # Keys one DeleteObjects request may name.


def _bucket_and_key(path):
  bucket, _, key = path[len('s3://'):].partition('/')
  return bucket, key


class S3Store(filestore.FileStore):
  """Amazon S3, or any S3-compatible server (`--s3_endpoint_url`)."""

  def __init__(self, settings):
    super().__init__(settings)
    self._client = None
    self._lock = threading.Lock()

  def _s3(self):
    """The store's boto3 client (thread-safe, as boto3's low-level ones are)."""
    with self._lock:
      if self._client is None:
        from apache_beam.io.aws.clients.s3 import boto3_client  # pylint: disable=g-import-not-at-top
        self._client = boto3_client.Client(
            self.settings.pipeline_options()).client
      return self._client

  def read_bytes(self, path):
    bucket, key = _bucket_and_key(path)
    try:
      return self._s3().get_object(Bucket=bucket, Key=key)['Body'].read()
    except Exception as e:  # pylint: disable=broad-except
      raise errors.read_error(path, e) from None

  def write_bytes(self, path, data, sync=False):
    del sync  # An object appears whole when its upload completes.
    try:
      if len(data) < _PUT_LIMIT:
        bucket, key = _bucket_and_key(path)
        self._s3().put_object(Bucket=bucket, Key=key, Body=data)
      else:  # Too large for one PUT: Beam's multipart upload.
        from apache_beam.io.aws import s3io  # pylint: disable=g-import-not-at-top
        with s3io.S3IO(options=self.settings.pipeline_options()).open(
            path, 'w') as f:
          f.write(data)
    except Exception as e:  # pylint: disable=broad-except
      raise errors.remote_error('write', path, e) from None
    return path

  def create_only(self, path, data):
    bucket, key = _bucket_and_key(path)
    client = self._s3()
    for attempt in range(5):
      try:
        client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch='*')
        return path
      except Exception as e:  # pylint: disable=broad-except
        code = errors.error_code(e)
        if code in ('PreconditionFailed', '412'):
          raise AlreadyExists(f'{path!r} already exists.') from None
        if code in ('ConditionalRequestConflict', '409') and attempt < 4:
          time.sleep(0.05 * 2**attempt)  # A concurrent conditional write.
          continue
        raise errors.remote_error('create', path, e) from None
    raise AssertionError('unreachable')

  def exists(self, path):
    bucket, key = _bucket_and_key(path.rstrip('/'))
    try:
      found = self._s3().list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1)
    except Exception as e:  # pylint: disable=broad-except
      raise errors.remote_error('look for', path, e) from None
    return any(item['Key'] == key or item['Key'].startswith(key + '/')
               for item in found.get('Contents', ())) or bool(
                   self.list_files(path))

  def list_files(self, directory):
    prefix = directory.rstrip('/') + '/'
    bucket, key = _bucket_and_key(prefix)
    try:
      pages = self._s3().get_paginator('list_objects_v2').paginate(
          Bucket=bucket, Prefix=key)
      found = [f's3://{bucket}/{item["Key"]}' for page in pages
               for item in page.get('Contents', ())]
    except Exception as e:  # pylint: disable=broad-except
      if errors.error_code(e) in ('404', 'NoSuchKey'):
        return []
      raise errors.remote_error('list', directory, e) from None
    return sorted(p[len(prefix):] for p in found if p.startswith(prefix))

  def delete(self, files):
    by_bucket = {}
    for path in files:
      bucket, key = _bucket_and_key(path)
      by_bucket.setdefault(bucket, []).append(key)
    try:
      for bucket, keys in by_bucket.items():
        for start in range(0, len(keys), _DELETE_LIMIT):
          result = self._s3().delete_objects(Bucket=bucket, Delete={
              'Objects': [{'Key': k}
                          for k in keys[start:start + _DELETE_LIMIT]],
              'Quiet': True})
          failed = [e for e in result.get('Errors', ())
                    if e.get('Code') != 'NoSuchKey']
          if failed:
            raise StorageError(f'Cannot delete s3://{bucket}/'
                               f'{failed[0].get("Key")}: '
                               f'{failed[0].get("Message")}.')
    except StorageError:
      raise
    except Exception as e:  # pylint: disable=broad-except
      raise errors.remote_error('delete', files[0], e) from None

  def check_writable(self, path, what='path'):
    bucket, _ = _bucket_and_key(path)
    try:
      self._s3().head_bucket(Bucket=bucket)
    except Exception as e:  # pylint: disable=broad-except
      if errors.error_code(e) in ('404', 'NoSuchBucket'):
        raise StorageError(f'{what} {path!r}: the bucket {bucket!r} does '
                           'not exist.') from None
      raise errors.remote_error('reach', path, e, what) from None
