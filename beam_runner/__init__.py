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

from canonical import _lazy
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
    'beam_runner.secure_round': [
        'beam_runner.secure.round', 'beam_runner.secure.protocol_steps',
        'beam_runner.secure.clients', 'beam_runner.secure.kept',
        'beam_runner.secure.messages'],
    'beam_runner.steps': ['beam_runner.pipeline.steps'],
    'beam_runner.tensor_io': ['beam_runner.worker_io.tensor_io'],
    'beam_runner.tensorboard_log': ['beam_runner.driver.tensorboard_log'],
    'beam_runner.tfrecords': ['beam_runner.worker_io.tfrecords'],
})


__getattr__, __dir__ = _lazy.module_getattr(
    globals(), _HOMES, after=('beam_runner.testing',), fallback=_moved.attribute)
