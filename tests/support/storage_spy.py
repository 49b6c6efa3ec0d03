"""Records the writes that reach local files, whichever `Storage` made them
(the runner and the pipelines pass their own down, so patching the module's
functions would see none)."""

from canonical.io import local


def record_local_writes(monkeypatch, names=('write_bytes', 'create_only')):
  """A list that gets `(operation, path)` for every local write from now on
  (in this process)."""
  writes = []
  for name in names:
    real = getattr(local.LocalStore, name)

    def record(self, path, data, *args, _real=real, _name=name, **kwargs):
      writes.append((_name, str(path)))
      return _real(self, path, data, *args, **kwargs)

    monkeypatch.setattr(local.LocalStore, name, record)
  return writes
