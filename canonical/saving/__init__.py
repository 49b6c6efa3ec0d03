"""Saving and loading canonical forms: self-contained files, checked on load.

The names below are imported on first use, so that describing a form file
(`inspection`, `python -m canonical inspect`) imports no TensorFlow.
"""

import importlib
import importlib.machinery

_HOMES = {
    'from_bytes': 'canonical.saving.form_file',
    'load': 'canonical.saving.form_file',
    'save': 'canonical.saving.form_file',
    'to_bytes': 'canonical.saving.form_file',
    'fingerprint': 'canonical.saving.form_fingerprint',
    'GraphPiece': 'canonical.saving.graph_piece',
    'default_allowed_ops': 'canonical.saving.op_allowlist',
}


def __getattr__(name):
  if name in _HOMES:
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value
  if not name.startswith('_') and importlib.machinery.PathFinder.find_spec(
      f'{__name__}.{name}', __path__) is not None:
    return importlib.import_module(f'{__name__}.{name}')
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


def __dir__():
  return sorted(set(globals()) | set(_HOMES))
