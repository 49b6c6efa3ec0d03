"""Runs a canonical form's rounds as Apache Beam batch pipelines."""

from beam_runner.client_data import ClientDataError
from beam_runner.client_data import InMemoryClientData
from beam_runner.client_data import TFRecordClientData
from beam_runner.client_data import write_client_data
from beam_runner.engines import EngineError
from beam_runner.form_source import FormSource
from beam_runner.run_dir import CommitConflict
from beam_runner.run_dir import RunDir
from beam_runner.run_dir import RunDirError
from beam_runner.run_lock import RunLocked
from beam_runner.runner import RoundError
from beam_runner.runner import run
from beam_runner.runner import RunResult
from beam_runner.runner import sample_clients
from beam_runner.sandbox import Isolation
from beam_runner import testing
