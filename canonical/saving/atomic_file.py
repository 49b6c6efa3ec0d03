"""Writing a file whole or not at all: a temporary file beside it, then a rename."""

import os
import tempfile


def _process_umask():
  mask = os.umask(0)  # The only way to read it; set back at once.
  os.umask(mask)
  return mask


# Read once, at import, rather than toggled while worker threads may create files.
_MODE = 0o666 & ~_process_umask()


def write(path, data, sync=False):
  """Writes bytes so that readers see the whole file or none of it.

  The file gets the mode a plain `open()` would give it (mkstemp's own is
  0600). With `sync`, the data reaches the disk before the rename.
  """
  path = os.fspath(path)
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, temp = tempfile.mkstemp(prefix='.' + os.path.basename(path) + '.',
                              suffix='.tmp', dir=directory)
  try:
    with os.fdopen(fd, 'wb') as f:
      f.write(data)
      if sync:
        f.flush()
        os.fsync(f.fileno())
    os.chmod(temp, _MODE)
    os.replace(temp, path)
  except BaseException:
    if os.path.exists(temp):
      os.remove(temp)
    raise
  return path
