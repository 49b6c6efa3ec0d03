"""The output directory of a run: committed rounds, staging, client states.

    run.json                  what the run is (form, seed, clients per round)
    rounds/000000/            the initial state (round 0)
    rounds/<r>/state.tensors  the state after round r
    rounds/<r>/outcome.json   its metrics, client counts and bits
    rounds/<r>/clients.json   the clients sampled in round r
    staging/                  rounds being written (never read as results)
    client_states/            per-client states, versioned per round
    metrics.jsonl             one line per committed round, rebuilt on resume
    tensorboard/              the same as TensorBoard scalars, rebuilt on resume

A round is committed by renaming its staging directory into rounds/: the
state, outcome and sampled clients appear together or not at all, and client
state versions count only up to the last committed round.
"""

import json
import os
import shutil
import uuid

from beam_runner import round_pipeline
from beam_runner import tensor_io

RUN_FILE = 'run.json'
CLIENTS_FILE = 'clients.json'
METRICS_FILE = 'metrics.jsonl'


class RunDirError(ValueError):
  """An output directory that belongs to a different run."""


def record_or_compare(path, description):
  """Records the JSON dict `description` at `path` if nothing is there;
  otherwise returns the sorted keys where the recorded one differs."""
  if not os.path.exists(path):
    tensor_io.write_atomic(path, json.dumps(description, indent=1).encode())
    return []
  with open(path) as f:
    existing = json.load(f)
  return sorted(k for k in set(existing) | set(description)
                if existing.get(k) != description.get(k))


class RunDir:

  def __init__(self, directory):
    self.directory = os.fspath(directory)
    self.rounds_dir = os.path.join(self.directory, 'rounds')
    self.staging_dir = os.path.join(self.directory, 'staging')
    self.client_states_dir = os.path.join(self.directory, 'client_states')
    self.metrics_path = os.path.join(self.directory, METRICS_FILE)
    self.tensorboard_dir = os.path.join(self.directory, 'tensorboard')

  def claim(self, description):
    """Records what the run is; refuses a directory holding a different run."""
    os.makedirs(self.rounds_dir, exist_ok=True)
    changed = record_or_compare(os.path.join(self.directory, RUN_FILE),
                                description)
    if changed:
      raise RunDirError(
          f'{self.directory!r} holds a different run (it differs in '
          f'{", ".join(changed)}); use a new output directory.')
    shutil.rmtree(self.staging_dir, ignore_errors=True)  # Unfinished rounds.

  def committed_rounds(self):
    names = os.listdir(self.rounds_dir) if os.path.isdir(self.rounds_dir) \
        else []
    return sorted(int(n) for n in names if n.isdigit())

  def last_committed(self):
    rounds = self.committed_rounds()
    return rounds[-1] if rounds else None

  def round_dir(self, round_number):
    return os.path.join(self.rounds_dir, f'{round_number:06d}')

  def state_path(self, round_number):
    return os.path.join(self.round_dir(round_number),
                        round_pipeline.STATE_FILE)

  def new_stage(self, round_number):
    stage = os.path.join(self.staging_dir,
                         f'{round_number:06d}-{uuid.uuid4().hex[:8]}')
    os.makedirs(stage)
    return stage

  def commit(self, stage, round_number):
    """Makes the staged round visible, atomically; drops its broadcast file."""
    broadcast = os.path.join(stage, round_pipeline.BROADCAST_FILE)
    if os.path.exists(broadcast):
      os.remove(broadcast)
    os.rename(stage, self.round_dir(round_number))

  def outcome(self, round_number):
    path = os.path.join(self.round_dir(round_number),
                        round_pipeline.OUTCOME_FILE)
    with open(path) as f:
      return json.load(f)

  def clients(self, round_number):
    with open(os.path.join(self.round_dir(round_number), CLIENTS_FILE)) as f:
      return json.load(f)

  def rebuild_metrics_log(self):
    """metrics.jsonl from the committed rounds (drops lines of lost rounds)."""
    lines = [json.dumps(self.outcome(r)) for r in self.committed_rounds()
             if r > 0]
    tensor_io.write_atomic(self.metrics_path,
                           ''.join(line + '\n' for line in lines).encode())

  def append_metrics(self, outcome):
    with open(self.metrics_path, 'a') as f:
      f.write(json.dumps(outcome) + '\n')
