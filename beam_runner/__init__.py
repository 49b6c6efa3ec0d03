"""Runs a canonical form's rounds as Apache Beam batch pipelines.

`driver/` runs and resumes rounds and commits them (`run`, the run directory,
its lock, the TensorBoard log); `pipeline/` is a round's Beam pipeline and its
steps; `engines/` where they run (in process, DirectRunner, Dask); `worker_io/`
what workers read and write (forms, client data, tensors, per-client
outputs, the sandbox); `secure/` a round's secure sums; `options` the command
lines' flags.
"""

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
from beam_runner import testing
from beam_runner.worker_io.client_data import ClientDataError
from beam_runner.worker_io.client_data import InMemoryClientData
from beam_runner.worker_io.client_data import TFRecordClientData
from beam_runner.worker_io.client_data import write_client_data
from beam_runner.worker_io.client_outputs import ClientOutputs
from beam_runner.worker_io.client_outputs import RoundOutputs
from beam_runner.worker_io.form_source import FormSource
from beam_runner.worker_io.sandbox import Isolation
from canonical import _moved

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


def __getattr__(name):
  return _moved.attribute(__name__, name)
