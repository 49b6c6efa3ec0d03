"""What goes wrong with files: every storage operation raises these."""

import urllib.parse

from canonical import errors


class StorageError(errors.Error, OSError):
  """A path that cannot be reached, read or written; the message says why."""


class NotFound(StorageError, FileNotFoundError):
  """No file at the path."""


class AlreadyExists(StorageError, FileExistsError):
  """`create_only` found a file already there."""


def error_code(error):
  """The error code a remote client's exception carries (S3's 'NoSuchKey',
  an HTTP status), or None."""
  response = getattr(error, 'response', None)
  if isinstance(response, dict):
    code = response.get('Error', {}).get('Code')
    if code:
      return str(code)
  code = getattr(error, 'code', None)
  return None if code is None else str(code)


def reason(error):
  """The first line of what an exception says."""
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


def read_error(path, error):
  """The error a remote read raised, as NotFound or a one-line StorageError."""
  if error_code(error) in ('NoSuchKey', '404'):
    return NotFound(f'No such file: {path!r}')
  return remote_error('read', path, error)


def remote_error(action, path, error, what=None):
  """A one-line StorageError for a remote client's exception: what was being
  done to which path, and the likely cause in the user's terms."""
  code = error_code(error)
  name = type(error).__name__
  if 'EndpointConnection' in name or 'ConnectionError' in name or \
      'Could not connect' in str(error):
    # The cause leads: the path is only what was being done when it struck.
    doing = f'for the {what} {path!r}' if what else f'to {action} {path!r}'
    return StorageError(f'Cannot connect to the object store at '
                        f'{_endpoint(error)} (needed {doing}): is it '
                        'running, and is --s3_endpoint_url right?')
  if 'Credentials' in name:
    cause = ('no credentials: pass --s3_access_key_id and '
             '--s3_secret_access_key, or set AWS credentials')
  else:
    cause = _REMOTE_HINTS.get(code) or f'{name}: {reason(error)}'
  prefix = f'{what} {path!r}' if what else f'Cannot {action} {path!r}'
  return StorageError(f'{prefix}: {cause}.')


def _endpoint(error):
  """The scheme, host and port a connection error names, or what it says."""
  url = (getattr(error, 'kwargs', None) or {}).get('endpoint_url')
  if url:
    parts = urllib.parse.urlsplit(url)
    if parts.netloc:
      return f'{parts.scheme}://{parts.netloc}'
  return f'its endpoint ({reason(error)})'
