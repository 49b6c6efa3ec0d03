"""Runs a canonical form's rounds as Apache Beam batch pipelines.

`driver/` runs and resumes rounds and commits them (`run`, the run directory,
its lock, the TensorBoard log); `pipeline/` is a round's Beam pipeline and its
steps; `engines/` where they run (in process, DirectRunner, Dask); `worker_io/`
what workers read and write (forms, client data, tensors, per-client
outputs, the sandbox); `secure/` a round's secure sums; `options` the command
lines' flags.

The names below are imported on first use, so that `python -m beam_runner
--help` imports neither TensorFlow nor Beam.
"""

import importlib
import importlib.machinery

from canonical import _moved

_HOMES = {
    'beam_runner.driver.run_dir': ('CommitConflict', 'RunDir', 'RunDirError'),
    'beam_runner.driver.run_lock': ('RunLocked',),
    'beam_runner.driver.runner': ('RoundError', 'read_client_outputs', 'run',
                                  'RunResult', 'sample_clients'),
    'beam_runner.engines': ('EngineError',),
    'beam_runner.worker_io.client_data': (
        'ClientDataError', 'InMemoryClientData', 'TFRecordClientData',
        'write_client_data'),
    'beam_runner.worker_io.client_outputs': ('ClientOutputs', 'RoundOutputs'),
    'beam_runner.worker_io.form_source': ('FormSource',),
    'beam_runner.worker_io.sandbox': ('Isolation',),
}

_moved.register({
    'beam_runner.client_data': ['beam_runner.worker_io.client_data'],
    'beam_runner.dask_placement': ['beam_runner.engines.dask_placement'],
    'beam_runner.form_source': ['beam_runner.worker_io.form_source'],
    'beam_runner.round_pipeline': ['beam_runner.pipeline.round'],
    'beam_runner.run_dir': ['beam_runner.driver.run_dir'],
    'beam_runner.run_lock': ['beam_runner.driver.run_lock'],
    'beam_runner.runner': ['beam_runner.driver.runner'],
    'beam_runner.sandbox': ['beam_runner.worker_io.sandbox'],
    'beam_runner.secure_round': ['beam_runner.secure.round'],
    'beam_runner.steps': ['beam_runner.pipeline.steps'],
    'beam_runner.tensor_io': ['beam_runner.worker_io.tensor_io'],
    'beam_runner.tensorboard_log': ['beam_runner.driver.tensorboard_log'],
    'beam_runner.tfrecords': ['beam_runner.worker_io.tfrecords'],
})


_PUBLIC = frozenset(name for names in _HOMES.values() for name in names)


def _load():
  """Imports the runner and binds its public names here (once), in the order
  the package imported them when it imported them eagerly."""
  for home, names in _HOMES.items():
    module = importlib.import_module(home)
    for name in names:
      globals()[name] = getattr(module, name)
  importlib.import_module('beam_runner.testing')


def __getattr__(name):
  if name in _PUBLIC:
    _load()
    return globals()[name]
  if not name.startswith('_') and importlib.machinery.PathFinder.find_spec(
      f'{__name__}.{name}', __path__) is not None:
    return importlib.import_module(f'{__name__}.{name}')  # Only it.
  if name.startswith('_'):
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
  return _moved.attribute(__name__, name)


def __dir__():
  return sorted(set(globals()) | _PUBLIC)
