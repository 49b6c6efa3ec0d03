"""The directory of a run, and the commit protocol that keeps rounds atomic.

    run.json                         what the run is (form, seed, clients per round)
    rounds/<r>/<attempt>/            one attempt at round r (r = 000000: the start)
        state.tensors                the server state after round r
        outcome.json                 metrics, clients ok and dropped, bits, seconds
        clients.json                 the sampled clients, and which were dropped
        client_states/<client>.tensors   the state each successful client left
        client_outputs.json          with per-client outputs: their index
        client_outputs/<batch>-<part>.tfrecord   and the outputs, by client
        secure/                      a round's secure-sum messages (until commit)
    client_secrets/<client>.key      each client's own secret, with secure sums
    commits/<r>.json                 the commit of round r: names its attempt,
                                     with the SHA-256 of its JSON files
                                     (the outputs' index among them)
    lock.json                        the lease of the driver running (run_lock.py)
    metrics.jsonl, tensorboard/      views of the committed rounds, rebuilt on resume

An attempt writes only below its own directory, so attempts never collide,
whoever runs them. A round is committed by creating `commits/<r>.json`
create-only (a hard link locally, a conditional write on an object store):
of two drivers committing one round exactly one succeeds and the other gets
`CommitConflict`. Readers follow commits only, so a round is visible whole or
not at all on any storage, and a run resumes after its last commit. Attempts
that no commit names are leftovers of failed or lost runs: ignored, and
deleted once their round is committed.

A commit marker lost below the last commit (deleted by hand, missed in a
copy) is restored on resume from its round's only attempt, with a line
saying so; with no attempt or several, the resume is refused and nothing is
cleaned away (`restore_missing_commits`).

Every committed file is checked when read: tensor files end with a CRC-32
(worker_io/tensor_io.py), the JSON files against the digests their commit
recorded; a damaged one is an error naming it, never a silently different run.
Per-client outputs (worker_io/client_outputs.py) are checked as they are read.
"""

import hashlib
import json
import uuid

from beam_runner.worker_io import client_data
from beam_runner.worker_io import client_outputs
from canonical import errors
from canonical import io as storage_lib

LAYOUT = 3  # 3: forms bound by fingerprint, files checksummed.
RUN_FILE = 'run.json'
ROUNDS_DIR = 'rounds'
COMMITS_DIR = 'commits'
STATE_FILE = 'state.tensors'
OUTCOME_FILE = 'outcome.json'
CLIENTS_FILE = 'clients.json'
BROADCAST_FILE = 'broadcast.tensors'
CLIENT_STATES_DIR = 'client_states'
SECURE_DIR = 'secure'
METRICS_FILE = 'metrics.jsonl'
TENSORBOARD_DIR = 'tensorboard'
_TENSORS = '.tensors'


class RunDirError(errors.Error, ValueError):
  """An output directory that belongs to another run, or cannot be used."""


class CommitConflict(RunDirError):
  """Another driver committed the round first."""


def record_or_compare(storage, path, description):
  """Records the JSON dict `description` at `path` (create-only) if nothing
  is there; otherwise returns the sorted keys where the recorded one differs."""
  try:
    storage.create_only(path, json.dumps(description, indent=1).encode())
    return []
  except storage_lib.AlreadyExists:
    return compare_recorded(storage, path, description)


def compare_recorded(storage, path, description):
  """The sorted keys where the description recorded at `path` differs from
  `description` ([] if none is recorded); writes nothing."""
  try:
    existing = json.loads(storage.read_bytes(path))
  except storage_lib.NotFound:
    return []
  except ValueError as e:
    raise RunDirError(f'{path!r} is not a readable description: {e}') from None
  return sorted(k for k in set(existing) | set(description)
                if existing.get(k) != description.get(k))


def damaged(path, problem):
  return RunDirError(
      f'{path} is damaged: {problem}. Restore it (from a backup or the '
      'copy you made), or start a new output directory; this run changed '
      'nothing.')


def _round_name(round_number):
  return f'{round_number:06d}'


class Attempt:
  """The files of one attempt at one round, and the storage that reaches
  them (small; workers get it pickled)."""

  def __init__(self, run_directory, round_number, attempt_id, storage=None):
    self.round = round_number
    self.id = attempt_id
    self.storage = storage or storage_lib.default()
    self.directory = storage_lib.join(run_directory, ROUNDS_DIR,
                                  _round_name(round_number), attempt_id)
    self.state_path = storage_lib.join(self.directory, STATE_FILE)
    self.outcome_path = storage_lib.join(self.directory, OUTCOME_FILE)
    self.clients_path = storage_lib.join(self.directory, CLIENTS_FILE)
    self.broadcast_path = storage_lib.join(self.directory, BROADCAST_FILE)
    # A round with secure sums: the protocol's messages (secure/round.py).
    self.secure_directory = storage_lib.join(self.directory, SECURE_DIR)
    # A form with per-client outputs: their index and part files.
    self.client_outputs_path = storage_lib.join(self.directory,
                                                client_outputs.INDEX_FILE)

  def client_state_path(self, client_id):
    return storage_lib.join(self.directory, CLIENT_STATES_DIR,
                        client_data.file_name(client_id) + _TENSORS)

  def __repr__(self):
    return f'Attempt(round {self.round}, {self.id})'


class RunDir:
  """A run's directory on any storage `canonical.io` reaches, through
  `storage` (the process's default if None)."""

  def __init__(self, directory, storage=None):
    self.storage = storage or storage_lib.default()
    self.directory = self.storage.absolute(directory)
    self.rounds_dir = storage_lib.join(self.directory, ROUNDS_DIR)
    self.commits_dir = storage_lib.join(self.directory, COMMITS_DIR)
    self.metrics_path = storage_lib.join(self.directory, METRICS_FILE)
    self.tensorboard_dir = storage_lib.join(self.directory, TENSORBOARD_DIR)
    self._committed = None
    self._digests = {}
    self._checked = {}  # Path -> bytes of committed JSON files read.

  # -- What the run is --------------------------------------------------------

  def claim(self, description):
    """Records what the run is; refuses a directory holding another run."""
    self.storage.check_writable(self.directory, 'output directory')
    description = dict(description, layout=LAYOUT)
    changed = record_or_compare(self.storage,
                                storage_lib.join(self.directory, RUN_FILE),
                                description)
    if 'layout' in changed:
      raise RunDirError(
          f'{self.directory!r} holds a run written by an older beam_runner '
          '(before checksums), which this one cannot resume; use a new '
          'output directory.')
    if changed == ['form_fingerprint']:
      raise RunDirError(
          f'{self.directory!r} holds a run of another form (same pieces and '
          'types, but other constants or ops: a learning rate, initial '
          'weights, an encoder); use a new output directory.')
    if changed:
      raise RunDirError(
          f'{self.directory!r} holds a different run (it differs in '
          f'{", ".join(changed)}); use a new output directory.')
    self.refresh()

  # -- Committed rounds -------------------------------------------------------

  def refresh(self):
    """Re-reads the commits (another driver may have made some)."""
    committed, digests = {}, {}
    for name in self.storage.list_names(self.commits_dir):
      stem = name[:-len('.json')]
      if not name.endswith('.json') or not stem.isdigit():
        continue
      path = storage_lib.join(self.commits_dir, name)
      try:
        record = json.loads(self.storage.read_bytes(path))
        committed[int(stem)] = str(record['attempt'])
        digests[int(stem)] = dict(record.get('sha256', {}))
      except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise damaged(path, f'not a commit record ({type(e).__name__})'
                      ) from None
    self._committed, self._digests = committed, digests
    return committed

  def _commits(self):
    return self.refresh() if self._committed is None else self._committed

  def committed_rounds(self):
    return sorted(self._commits())

  def last_committed(self):
    rounds = self.committed_rounds()
    return rounds[-1] if rounds else None

  def attempt(self, round_number):
    """The committed attempt of a round."""
    commits = self._commits()
    if round_number not in commits:
      raise RunDirError(f'Round {round_number} is not committed in '
                        f'{self.directory!r}.')
    return Attempt(self.directory, round_number, commits[round_number],
                   self.storage)

  def state_path(self, round_number):
    return self.attempt(round_number).state_path

  def outcome(self, round_number):
    return self._committed_json(round_number, OUTCOME_FILE)

  def _clients_record(self, round_number):
    return self._committed_json(round_number, CLIENTS_FILE)

  def _committed_json(self, round_number, name):
    """A committed round's JSON file, checked against the digest its
    commit recorded (read once: committed files do not change); RunDirError
    naming the file if it is damaged."""
    path = storage_lib.join(self.attempt(round_number).directory, name)
    data = self._checked.get(path)
    if data is None:
      try:
        data = self.storage.read_bytes(path)
      except storage_lib.NotFound:
        raise damaged(path, f'missing, though round {round_number} is '
                      'committed') from None
      expected = self._digests.get(round_number, {}).get(name)
      if expected is not None and \
          hashlib.sha256(data).hexdigest() != expected:
        raise damaged(path, 'its SHA-256 differs from the one committed '
                      f'with round {round_number}')
      self._checked[path] = data
    try:
      return json.loads(data)
    except ValueError as e:
      raise damaged(path, f'not JSON ({e})') from None

  def has_client_outputs(self):
    """Whether a committed round has per-client outputs (its commit
    recorded their index)."""
    self._commits()
    return any(client_outputs.INDEX_FILE in digests
               for digests in self._digests.values())

  def client_outputs_index(self, round_number):
    """The index of a committed round's per-client outputs, checked."""
    return self._committed_json(round_number, client_outputs.INDEX_FILE)

  def damaged_output(self, path, round_number, problem):
    """The error for a damaged part file of a round's outputs."""
    return RunDirError(
        f'{path} is damaged: {problem}. It holds per-client outputs of '
        f'round {round_number} of {self.directory!r}; restore it (from a '
        'backup or the copy you made) to read them.')

  def clients(self, round_number):
    """The clients sampled in a committed round."""
    return self._clients_record(round_number)['sampled']

  def dropped(self, round_number):
    """The clients of a committed round whose work failed."""
    return self._clients_record(round_number)['dropped']

  def client_state_paths(self):
    """client id -> the file of its newest committed state (for a form with
    client state: every client that succeeded in some round)."""
    paths = {}
    for round_number in self.committed_rounds():
      if round_number == 0:
        continue
      record = self._clients_record(round_number)
      attempt = self.attempt(round_number)
      dropped = set(record['dropped'])
      for client in record['sampled']:
        if client not in dropped:
          paths[client] = attempt.client_state_path(client)
    return paths

  def restore_missing_commits(self):
    """Re-creates the commit of each round below the last committed one
    whose marker is gone (deleted by hand, lost in a copy): a later commit
    shows the round was committed, and its committed attempt is the only
    one left in its directory. Returns a line per restored round.
    RunDirError if a round has no attempt or several, or its files are
    incomplete: then nothing is changed, and nothing is cleaned away."""
    commits = self._commits()
    missing = [r for r in range(max(commits, default=0)) if r not in commits]
    restorable = []
    for number in missing:
      round_dir = storage_lib.join(self.rounds_dir, _round_name(number))
      attempts = sorted(self.storage.list_names(round_dir))
      marker = self._marker(number)
      found = (f'{len(attempts)} attempts ({", ".join(attempts)})'
               if attempts else 'no attempt')
      if len(attempts) != 1:
        raise RunDirError(
            f'{marker} is missing, though round {max(commits)} is committed, '
            f'and {round_dir} holds {found}, so which was committed is '
            'unknown. Restore the marker (from a backup or the copy you '
            'made), or start a new output directory; this run changed '
            'nothing.')
      attempt = Attempt(self.directory, number, attempts[0], self.storage)
      absent = [name for name in (STATE_FILE, OUTCOME_FILE, CLIENTS_FILE)
                if not self.storage.exists(
                    storage_lib.join(attempt.directory, name))]
      if absent:
        raise RunDirError(
            f'{marker} is missing, though round {max(commits)} is committed, '
            f'and the round\'s only attempt, {attempt.directory}, lacks '
            f'{", ".join(absent)}. Restore them (from a backup or the copy '
            'you made), or start a new output directory; this run changed '
            'nothing.')
      restorable.append(attempt)
    lines = []
    for attempt in restorable:
      self.commit(attempt, with_client_outputs=self.storage.exists(
          attempt.client_outputs_path))
      lines.append(
          f'{self._marker(attempt.round)} was missing, though round '
          f'{max(commits)} is committed: restored it from the round\'s only '
          f'attempt, {attempt.id}.')
    return lines

  # -- Attempts and commits ---------------------------------------------------

  def new_attempt(self, round_number):
    return Attempt(self.directory, round_number, uuid.uuid4().hex[:12],
                   self.storage)

  def _marker(self, round_number):
    return storage_lib.join(self.commits_dir,
                            _round_name(round_number) + '.json')

  def check_not_taken(self, attempt):
    """CommitConflict (this attempt deleted) if another driver committed the
    attempt's round: its files may be gone, deleted as a leftover."""
    try:
      other = json.loads(self.storage.read_bytes(self._marker(attempt.round)))
    except storage_lib.NotFound:
      return
    if other.get('attempt') != attempt.id:
      self._conflict(attempt, other.get('attempt'))

  def _conflict(self, attempt, other):
    self.discard(attempt)
    raise CommitConflict(
        f'Round {attempt.round} of {self.directory!r} was committed by '
        f'another driver (attempt {other}) while this one ran it: two '
        'drivers must not run in one output directory. This one stops; '
        'nothing of its attempt is used.')

  def commit(self, attempt, with_client_outputs=False):
    """Makes the attempt the round's result, atomically, unless another
    driver committed the round first (CommitConflict; this attempt is then
    deleted). `with_client_outputs`: the attempt has an outputs index, whose
    digest the commit records too."""
    marker = self._marker(attempt.round)
    names = (OUTCOME_FILE, CLIENTS_FILE) + (
        (client_outputs.INDEX_FILE,) if with_client_outputs else ())
    try:
      digests = {name: hashlib.sha256(self.storage.read_bytes(
          storage_lib.join(attempt.directory, name))).hexdigest()
                 for name in names}
    except storage_lib.NotFound:
      self.check_not_taken(attempt)  # Deleted as another driver's leftover?
      raise
    record = {'round': attempt.round, 'attempt': attempt.id,
              'sha256': digests}
    try:
      self.storage.create_only(marker, json.dumps(record).encode())
    except storage_lib.AlreadyExists:
      other = json.loads(self.storage.read_bytes(marker)).get('attempt')
      self._conflict(attempt, other)
    self._commits()[attempt.round] = attempt.id
    self._digests[attempt.round] = digests
    self.storage.delete([attempt.broadcast_path])
    self.storage.delete_tree(attempt.secure_directory)
    self.discard_others(attempt.round)

  def discard_others(self, round_number):
    """Deletes the round's attempts that its commit does not name."""
    keep = self._commits().get(round_number)
    round_dir = storage_lib.join(self.rounds_dir, _round_name(round_number))
    for name in self.storage.list_names(round_dir):
      if name != keep:
        self.storage.delete_tree(storage_lib.join(round_dir, name))

  def discard(self, attempt):
    self.storage.delete_tree(attempt.directory)

  def clean(self, client_state_paths=None):
    """Deletes leftovers: temporary files of writes a killed driver left
    (an hour old: a younger one may be a live driver's write in flight),
    uncommitted attempts of committed rounds and, given the live client state
    files, superseded client states. Attempts of rounds after the last commit
    are left alone: they are deleted once their round is committed (a
    driver whose lease was taken over may still be running them).
    """
    last, commits = self.last_committed(), self._commits()
    live = None if client_state_paths is None else set(
        client_state_paths.values())
    leftovers, stale = set(), []
    for relative in self.storage.list_files(self.directory):
      parts = relative.replace('\\', '/').split('/')
      if storage_lib.is_temporary(parts[-1]):
        path = storage_lib.join(self.directory, *parts)
        if self.storage.is_abandoned_temporary(path):
          stale.append(path)
        continue
      if parts[0] != ROUNDS_DIR:
        continue
      parts = parts[1:]
      if len(parts) < 3 or not parts[0].isdigit() or last is None or \
          int(parts[0]) > last:
        continue
      if commits.get(int(parts[0])) != parts[1]:
        leftovers.add(storage_lib.join(self.rounds_dir, parts[0], parts[1]))
      elif live is not None and parts[2] == CLIENT_STATES_DIR:
        path = storage_lib.join(self.rounds_dir, *parts)
        if path not in live:
          stale.append(path)
    for directory in sorted(leftovers):
      self.storage.delete_tree(directory)
    self.storage.delete(stale)

  # -- Views of the committed rounds -----------------------------------------

  def write_metrics(self, outcomes):
    """metrics.jsonl: one line per committed round (rewritten whole)."""
    self.storage.write_bytes(self.metrics_path, ''.join(
        json.dumps(outcome) + '\n' for outcome in outcomes).encode())
