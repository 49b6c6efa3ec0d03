"""Saved forms loaded in this process, kept by the SHA-256 of their file: a
warm worker, a sandbox or a driver running again loads a form once (~40 ms
small, ~0.3 s for the tutorial CNN), and a changed file is a new key."""

import collections
import hashlib
import threading

from canonical.saving import form_file

_LOADED = collections.OrderedDict()
_LOADED_MAX = 4
_LOADED_LOCK = threading.Lock()


def load(path, storage=None):
  """The form saved at `path` (read through `storage`, the default if None),
  loaded at most once per content."""
  data = form_file.read_bytes(path, storage)
  key = hashlib.sha256(data).digest()
  with _LOADED_LOCK:
    if key in _LOADED:
      _LOADED.move_to_end(key)
      return _LOADED[key]
  form = form_file.from_bytes(data, path)
  with _LOADED_LOCK:
    _LOADED[key] = form
    while len(_LOADED) > _LOADED_MAX:
      _LOADED.popitem(last=False)
  return form
