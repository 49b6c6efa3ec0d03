"""`FormSource`: how a Beam worker gets its canonical form, once per process.

A form travels to workers as a small token, never as pickled pieces: the
absolute path or URL of a saved form (loaded with `canonical.load`), or, for
forms built in the driver and run on the in-process runner, a key into this
process's registry.
Workers share one loaded form per process through `apache_beam.utils.shared`.
"""

import os
import uuid
import weakref

from apache_beam.utils import shared

from beam_runner.worker_io import loaded_forms
from beam_runner.worker_io import sandbox
from canonical import errors
from canonical import io as storage_lib

# In-memory forms by key; only the driver's own process can see them.
_REGISTRY = weakref.WeakValueDictionary()
class FormSource:
  """A picklable handle to a form: `get()` returns it, loaded once per process."""

  def __init__(self, path=None, key=None, description='', isolation=None,
               storage=None):
    self.path = path
    self.key = key
    self.description = description
    self.isolation = isolation  # sandbox.Isolation: pieces run in a child.
    self.storage = storage or storage_lib.default()  # Reads a saved form.
    self._shared = shared.Shared()
    self._form = None

  @classmethod
  def of(cls, form_or_path, isolation=None, storage=None):
    """A source for a `CanonicalForm` (held in memory) or a saved form's path
    (read through `storage`; with `isolation`, a path: its pieces run in a
    sandbox)."""
    if isinstance(form_or_path, FormSource):
      if isolation is None or form_or_path.isolation == isolation:
        return form_or_path
      form_or_path = form_or_path.path
    if isinstance(form_or_path, (str, os.PathLike)):
      storage = storage or storage_lib.default()
      path = storage.absolute(form_or_path)  # Workers may run elsewhere.
      return cls(path=path, description=path, isolation=isolation,
                 storage=storage)
    if isolation is not None:
      raise errors.InvalidValueError(
          'A sandboxed form is loaded from a file: save it.')
    from canonical import form as form_lib  # pylint: disable=g-import-not-at-top
    if not isinstance(form_or_path, form_lib.CanonicalForm):
      raise errors.InvalidTypeError(
          'beam_runner: expected a CanonicalForm or the path of a '
          f'saved form, got {type(form_or_path).__name__}.')
    key = str(uuid.uuid4())
    _REGISTRY[key] = form_or_path
    source = cls(key=key, description=f'in-memory form {form_or_path.name!r}')
    source._form = form_or_path  # Keeps the registry entry alive.
    return source

  def __getstate__(self):
    state = dict(self.__dict__)
    state['_form'] = None
    return state

  def get(self):
    """The form, loaded at most once per process (shared by all threads)."""
    return self._shared.acquire(
        self._load, tag=f'{self.path or self.key}|{self.isolation}')

  def _load(self):
    if self.path is not None and self.isolation is not None:
      return sandbox.sandboxed(
          loaded_forms.load(self.path, self.storage),
          sandbox.Sandbox(self.path, self.isolation, self.storage))
    if self.path is not None:
      return loaded_forms.load(self.path, self.storage)
    form = _REGISTRY.get(self.key)
    if form is None:
      from beam_runner import engines  # pylint: disable=g-import-not-at-top
      raise engines.EngineError(
          f'The {self.description} lives in the driver process and cannot '
          'reach this worker process: save the form and pass its path, or '
          'use the in-process runner (the default).')
    return form
