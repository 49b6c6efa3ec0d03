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

from typing import TYPE_CHECKING

from canonical import _lazy

if TYPE_CHECKING:  # Imported on first use (`_lazy.declared`), all together.
  from beam_runner.driver.run_dir import CommitConflict
  from beam_runner.driver.run_dir import RunDir
  from beam_runner.driver.run_dir import RunDirError
  from beam_runner.driver.run_lock import RunLocked
  from beam_runner.driver.runner import RoundError
  from beam_runner.driver.runner import read_client_outputs
  from beam_runner.driver.runner import run
  from beam_runner.driver.runner import RunResult
  from beam_runner.driver.runner import sample_clients
  from beam_runner.engines import EngineError
  from beam_runner.worker_io.client_data import ClientDataError
  from beam_runner.worker_io.client_data import InMemoryClientData
  from beam_runner.worker_io.client_data import TFRecordClientData
  from beam_runner.worker_io.client_data import write_client_data
  from beam_runner.worker_io.client_outputs import ClientOutputs
  from beam_runner.worker_io.client_outputs import RoundOutputs
  from beam_runner.worker_io.form_source import FormSource
  from beam_runner.worker_io.sandbox import Isolation
  from beam_runner import testing

_lazy.register_old_paths({  # Old import paths -> new homes.
    'beam_runner.client_data': ['beam_runner.worker_io.client_data'],
    'beam_runner.dask_placement': ['beam_runner.engines.dask_placement'],
    'beam_runner.form_source': ['beam_runner.worker_io.form_source'],
    'beam_runner.round_pipeline': ['beam_runner.pipeline.round'],
    'beam_runner.run_dir': ['beam_runner.driver.run_dir'],
    'beam_runner.run_lock': ['beam_runner.driver.run_lock'],
    'beam_runner.runner': ['beam_runner.driver.runner'],
    'beam_runner.sandbox': ['beam_runner.worker_io.sandbox'],
    'beam_runner.secure_round': [
        'beam_runner.secure.round', 'beam_runner.secure.protocol_steps',
        'beam_runner.secure.clients', 'beam_runner.secure.kept',
        'beam_runner.secure.messages'],
    'beam_runner.steps': ['beam_runner.pipeline.steps'],
    'beam_runner.tensor_io': ['beam_runner.worker_io.tensor_io'],
    'beam_runner.tensorboard_log': ['beam_runner.driver.tensorboard_log'],
    'beam_runner.tfrecords': ['beam_runner.worker_io.tfrecords'],
})


__getattr__, __dir__ = _lazy.declared(globals(), load_all=True,
                                      fallback=_lazy.old_path_attribute)
