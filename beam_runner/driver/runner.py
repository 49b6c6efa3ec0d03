"""`run`: a canonical form's rounds as Beam batch pipelines.

The driver samples each round's clients, plans the round (where its files
go, where each client's state comes from), runs one pipeline for one or
several rounds, then checks, evaluates and commits each round in order. A
run that stops or is killed resumes from its last committed round with the
same sampled clients and results.

How many rounds share a pipeline is decided by measurement: as many as fit
in about `TARGET_PIPELINE_SECONDS` at the pace observed (at most
`MAX_ROUNDS_PER_PIPELINE`). The pace is that of this run's last pipeline, or
of the rounds already committed on the same engine; with neither, the first
pipeline runs one round. Every round is still committed on its own.

A form whose `next` returns per-client outputs has them written by the
clients' workers and committed with their round (`worker_io/client_outputs.
py`); `RunResult.client_outputs` and `read_client_outputs` read them back
lazily, round -> client id -> value.
"""

import dataclasses
import json
import math
import sys
import time
from typing import Any, Callable

from beam_runner.driver import run_dir
from beam_runner.driver import run_lock
from beam_runner.driver import tensorboard_log
from beam_runner import engines
from beam_runner.pipeline import round as round_pipeline
from beam_runner.secure import round as secure_round
from beam_runner.worker_io import client_data as client_data_lib
from beam_runner.worker_io import client_outputs as client_outputs_lib
from beam_runner.worker_io import form_source
from beam_runner.worker_io import sandbox
from beam_runner.worker_io import tensor_io
import canonical
from canonical import errors
from canonical import form as form_lib
from canonical import io as storage_lib
from canonical.privacy import spending as privacy_spending
from canonical.secagg import graph as secagg_graph
from canonical.simulation.sampling import sample_clients
from canonical.simulation.sampling import SAMPLINGS

FORM_FILE = 'form.pb'
TARGET_PIPELINE_SECONDS = 10.0
MAX_ROUNDS_PER_PIPELINE = 20


class RoundError(errors.Error, RuntimeError):
  """A round that could not complete; the state stays as it was."""


@dataclasses.dataclass
class RunResult:
  state: object          # The server state after the last committed round.
  rounds: int            # The number of that round (0: only initialized).
  outcomes: list         # One dict per committed round 1..rounds.
  output_dir: str
  # With per-client outputs: round -> {client id: outputs}, read lazily
  # (`client_outputs_lib.ClientOutputs`); None for a form without them.
  client_outputs: 'client_outputs_lib.ClientOutputs | None' = None


# Least values of run's integer arguments (None: the default, for _OPTIONAL).
_AT_LEAST = {'rounds': 0, 'clients_per_round': 1, 'seed': 0, 'min_clients': 1,
             'rounds_per_pipeline': 1, 'clients_per_element': 1,
             'secure_threshold': 1}
_OPTIONAL = ('rounds_per_pipeline', 'clients_per_element', 'secure_threshold')


def _check_arguments(non_finite, **integers):
  """ValueError before anything is written, naming the argument."""
  for name, value in integers.items():
    if value is None and name in _OPTIONAL:
      continue
    if isinstance(value, bool) or not isinstance(value, int) or \
        value < _AT_LEAST[name]:
      raise errors.InvalidValueError(
          f'{name} must be an integer of at least '
          f'{_AT_LEAST[name]}, got {value!r}.')
  if non_finite not in round_pipeline.NON_FINITE_POLICIES:
    raise errors.InvalidValueError(
        f'non_finite must be one of '
        f'{", ".join(round_pipeline.NON_FINITE_POLICIES)}, got '
        f'{non_finite!r}.')


SECURE_SERVERS = ('malicious', 'honest')


def _check_secure_server(secure_server, threshold, neighbors, clients):
  """Against a malicious server t must be more than half the clients that
  hold each client's shares (clients refuse less: see canonical.secagg's
  client), so such a run is refused before it starts."""
  if secure_server not in SECURE_SERVERS:
    raise errors.InvalidValueError(
        f'secure_server must be one of {", ".join(SECURE_SERVERS)}, got '
        f'{secure_server!r}.')
  if secure_server != 'malicious' or threshold is None:
    return
  holders = secagg_graph.holders(clients,
                                 secagg_graph.resolve(neighbors, clients))
  if 2 * threshold <= holders:
    raise errors.InvalidValueError(
        f'secure_threshold {threshold} is not more than half of the '
        f'{holders} clients holding each client\'s shares: against a '
        'malicious server, two disjoint sets of survivors could each unmask '
        'a sum. Use a larger threshold, or secure_server=\'honest\' for a '
        'server you trust.')


def _check_output_outside(out, data):
  """A run directory inside the client data directory would put the run's
  files among the clients' (and a rewrite of the data would delete them)."""
  directory = getattr(data, 'directory', None)
  if directory is not None and storage_lib.is_within(out.directory,
                                                     directory):
    raise run_dir.RunDirError(
        f'The output directory {out.directory!r} is inside the client data '
        f'directory {directory!r}; choose one outside it.')


def run(form_or_path: 'form_lib.CanonicalForm | str',
        client_data: 'dict | str | client_data_lib.TFRecordClientData',
        rounds: int, clients_per_round: int, output_dir: str,
        pipeline_options=None, seed: int = 0, min_clients: int = 1,
        progress: Callable[[str], None] | None = None,
        evaluate: Callable[[Any], dict] | None = None,
        on_round: Callable[[dict], None] | None = None,
        rounds_per_pipeline: int | None = None,
        clients_per_element: int | None = None, non_finite: str = 'drop',
        isolation: 'sandbox.Isolation | None' = None,
        secure_threshold: int | None = None, sampling: str = 'fixed',
        secure_neighbors: 'int | str | None' = None,
        privacy_delta: float = 1e-5,
        privacy_accountant: str = 'rdp',
        secure_server: str = 'malicious') -> 'RunResult':
  """Runs rounds 1..`rounds` of a form on Beam; returns a `RunResult`.

  Args:
    form_or_path: a `CanonicalForm` or the path (or URL) of a saved form. On
      the in-process runner a form stays in memory; on any other runner it is
      saved to `output_dir/form.pb` and workers load it from there.
    client_data: a dict client id -> data (Dataset or tensors; in-process
      runner only), a directory written by `write_client_data` (local or a
      URL such as s3://bucket/clients), or a client data source.
    rounds: the total number of rounds; committed rounds are not run again.
    clients_per_round: clients sampled per round (without replacement); with
      `sampling='poisson'`, the expected number: each client independently
      with probability clients_per_round / clients, as DP-FedAvg's privacy
      accounting (`canonical.privacy`) assumes; with `sampling='cyclic'`,
      the clients are cut once into clients // clients_per_round groups
      taken in turn (DP-FTRL's epochs: each client once a cycle, which
      bounds what its correlated noise costs).
    output_dir: where states, metrics and client states are kept: a local
      directory, or a URL on an object store (s3://, gs://).
    pipeline_options: Beam `PipelineOptions` (or flags, or a dict), or an
      engine already open (`engines.open_engine`). Without a runner, rounds
      run on the in-process `FnApiRunner`; `DaskRunner` runs them on a Dask
      cluster (see `engines`). Filesystem options (S3 endpoint and
      credentials) reach every worker, inside the steps' `Storage`; without
      any, the process's default storage (`canonical.io.configure`) is
      used.
    seed: the sampling seed.
    min_clients: a client whose work fails (unreadable data, an error, a NaN
      or Inf in its update or new state) is dropped and counted; a round
      with fewer than `min_clients` successes raises `RoundError`, commits
      nothing and leaves the state as it was.
    non_finite: which values drop a client: 'drop' (NaN or +-Inf, the
      default), 'drop_nan' (NaN only: a process whose U may rightly hold
      +-Inf, such as the identity of a min), 'keep' (none: the process's
      own meaning).
    isolation: a `beam_runner.Isolation(seconds, memory_mb)` to run every
      piece of the form in a sandbox process with those limits per call
      (for forms you do not trust: see `sandbox`); a client whose work
      crashes, hangs or runs out of memory is dropped with that reason.
      Needs client data on files. Default: pieces run in the worker.
    progress: called with one line per round (default: printed to stderr).
    evaluate: optional `evaluate(state) -> {name: number}`, called in the
      driver with each round's new server state before the round commits;
      its result is committed as the outcome's 'evaluation'; an error in it
      fails the round like any other.
    on_round: optional, called with each round's outcome once committed.
    rounds_per_pipeline: rounds chained in one pipeline (default: decided
      by measurement, see the module's docstring).
    clients_per_element: clients one pipeline element runs in sequence
      (default: enough elements to keep every worker busy).
    secure_threshold: for a form with secure sums, how many of a round's
      sampled clients must send masked inputs and unmask them (default: a
      majority); fewer fail the round (see beam_runner/secure/round.py).
    secure_neighbors: None (each client masks with every other: O(n) work
      per client) or an even k: each masks with and shares among k ring
      neighbors (SecAgg+, `canonical.secagg.graph`: O(k)); the threshold
      then counts among a client's k neighbors and itself. 'auto': the
      smallest k for the round's clients that fails below 1e-6 at 5%
      dropouts (`graph.neighbors_for`).
    secure_server: for a form with secure sums, what its clients assume of
      the server: 'malicious' (the default: the protocol's active version,
      Bonawitz et al.'s: signed key advertisements checked against a trust
      store of enrolled identity keys, a record of the round ids each client
      served, a threshold of more than half the clients holding each
      client's shares, and a consistency check in which each contributor
      signs one contributor list a round), or 'honest' (honest but curious:
      the semi-honest protocol, three steps fewer).
    privacy_delta, privacy_accountant: for a form whose aggregation is
      differentially private (its `privacy_releases`), each outcome's
      `privacy` is the (epsilon, delta) of the rounds so far, from
      dp-accounting ('rdp' or 'pld') with this run's sampling and
      population (`canonical.privacy.spending`).

  Each committed round's outcome (metrics, clients ok and dropped with
  reasons, bits broadcast and aggregated, clients per worker, seconds per
  stage) becomes a line of `output_dir/metrics.jsonl` and TensorBoard
  scalars in `output_dir/tensorboard`. A form whose `next` returns
  per-client outputs keeps each round's in that round's attempt (committed
  with it); `RunResult.client_outputs[round][client id]` reads them.
  """
  _check_arguments(non_finite, rounds=rounds,
                   clients_per_round=clients_per_round, seed=seed,
                   min_clients=min_clients,
                   rounds_per_pipeline=rounds_per_pipeline,
                   clients_per_element=clients_per_element,
                   secure_threshold=secure_threshold)
  if sampling not in SAMPLINGS:
    raise errors.InvalidValueError(
        f'sampling must be one of {", ".join(SAMPLINGS)}, got '
        f'{sampling!r}.')
  _check_secure_server(secure_server, secure_threshold, secure_neighbors,
                       clients_per_round)
  if secure_threshold is not None and secure_threshold > clients_per_round:
    raise errors.InvalidValueError(
        f'secure_threshold {secure_threshold} is more than the '
        f'{clients_per_round} clients sampled per round: no '
        'round could unmask its secure sums.')
  if secure_neighbors is not None:
    try:  # 'auto' by the sampled count: Poisson rounds resolve their own.
      secagg_graph.check_threshold(
          secure_threshold or 1,
          secagg_graph.resolve(secure_neighbors, clients_per_round))
    except ValueError as e:
      raise errors.InvalidValueError(f'secure_{e}') from None
  storage = storage_lib.storage_for(
      engines.pipeline_options_of(pipeline_options))
  try:
    out = run_dir.RunDir(output_dir, storage)
  except storage_lib.StorageError as e:
    raise run_dir.RunDirError(str(e)) from None
  source = form_source.FormSource.of(form_or_path, storage=storage)
  form = source.get()
  if form.has_client_outputs:
    client_outputs_lib.check_spec(form)
  for name, value in (('secure_threshold', secure_threshold),
                      ('secure_neighbors', secure_neighbors),
                      ('secure_server', None if secure_server == 'malicious'
                       else secure_server)):
    if value is not None and not form.has_secure_sums:
      raise form_lib.FormError(f'Form {form.name!r} has no secure sums, so '
                               f'a {name} means nothing for it.')
  data = client_data_lib.source_of(client_data, storage)
  _check_output_outside(out, data)
  if progress is None:
    progress = lambda line: print(line, file=sys.stderr, flush=True)
  with engines.open_engine(pipeline_options) as engine:
    in_process = isinstance(engine, engines.InProcessEngine)
    if (isolation or not in_process) and isinstance(
        data, client_data_lib.InMemoryClientData):
      raise client_data_lib.ClientDataError(
          'In-memory client data reaches only the in-process runner without '
          'isolation; write it with beam_runner.write_client_data and pass '
          'the directory.')
    data.check(form.client_data_spec)
    client_ids = data.client_ids()
    if not client_ids:
      raise client_data_lib.ClientDataError(
          f'The {data.describe()} has no clients.')
    if clients_per_round > len(client_ids):
      raise errors.InvalidValueError(
          f'clients_per_round is {clients_per_round}, but the '
          f'{data.describe()} has {len(client_ids)} clients: no round can '
          f'sample {clients_per_round}.')
    privacy = _PrivacyReport(
        form.privacy_releases, sampling, clients_per_round, len(client_ids),
        privacy_delta, privacy_accountant) if form.privacy_releases else None
    try:
      description = {'form': form.summary(print_fn=None),
                     'form_fingerprint': canonical.fingerprint(form),
                     'seed': seed, 'clients_per_round': clients_per_round}
      if sampling != 'fixed':  # (Runs before it existed were all fixed.)
        description['sampling'] = sampling
      if privacy:
        description.update(privacy_delta=privacy_delta,
                           privacy_accountant=privacy_accountant)
      out.claim(description)
    except storage_lib.StorageError as e:
      raise run_dir.RunDirError(str(e)) from None
    with run_lock.RunLock(out.directory, storage) as lock:
      if (isolation or not in_process) and source.path is None:
        source = form_source.FormSource.of(  # Workers load it.
            canonical.save(form, storage_lib.join(out.directory, FORM_FILE),
                           storage), storage=storage)
      if isolation is not None:
        source = form_source.FormSource.of(source, isolation, storage)
        form = source.get()
      loop = _RoundLoop(engine, source, form, data, out, min_clients,
                        evaluate, progress, on_round, clients_per_element,
                        non_finite, lock, secure_threshold, sampling,
                        secure_neighbors, privacy, secure_server)
      loop.start()
      loop.run(client_ids, clients_per_round, seed, rounds,
               _PipelineSizer(rounds_per_pipeline))
  last = out.last_committed()
  return RunResult(
      state=tensor_io.read_tensors(out.state_path(last), form.state_spec,
                                   'server state', storage),
      rounds=last, outcomes=loop.outcomes, output_dir=out.directory,
      client_outputs=client_outputs_lib.ClientOutputs(
          out, form.client_output_spec) if form.has_client_outputs else None)


def read_client_outputs(output_dir: str, pipeline_options=None
                        ) -> 'client_outputs_lib.ClientOutputs':
  """The per-client outputs of a run's committed rounds: round -> {client
  id: outputs}, read lazily (as `RunResult.client_outputs`; no form
  needed: each round recorded their structure). `pipeline_options` reach
  the storage (an S3 endpoint, say).
  """
  storage = storage_lib.storage_for(
      engines.pipeline_options_of(pipeline_options))
  out = run_dir.RunDir(output_dir, storage)
  if not storage.exists(storage_lib.join(out.directory, run_dir.RUN_FILE)):
    raise run_dir.RunDirError(f'{out.directory!r} holds no run (no '
                              f'{run_dir.RUN_FILE}).')
  if not out.has_client_outputs():
    raise run_dir.RunDirError(
        f'The run in {out.directory!r} has no per-client outputs: its form '
        'returns none, or no round is committed yet.')
  return client_outputs_lib.ClientOutputs(out)


class _PipelineSizer:
  """How many rounds the next pipeline runs."""

  def __init__(self, fixed=None):
    self._fixed = fixed
    self._seconds_per_round = None

  def next(self, remaining):
    if self._fixed is not None:
      return min(self._fixed, remaining)
    if self._seconds_per_round is None:
      return 1
    fit = math.floor(TARGET_PIPELINE_SECONDS / self._seconds_per_round)
    return max(1, min(fit, MAX_ROUNDS_PER_PIPELINE, remaining))

  def observe(self, rounds, seconds):
    self._seconds_per_round = max(seconds, 1e-3) / rounds

  def recall(self, outcomes, engine_name, last=5):
    """The pace of committed rounds that ran on this engine, if any."""
    paced = [o['seconds'] for o in outcomes if o.get('engine') ==
             engine_name and 'seconds' in o][-last:]
    if paced and self._seconds_per_round is None:
      self.observe(len(paced), sum(paced))


class _PrivacyReport:
  """What a run of a differentially private form has spent after a round."""

  def __init__(self, releases, sampling, clients_per_round, population,
               delta, accountant):
    self._releases = releases
    self._run = dict(sampling=sampling, clients_per_round=clients_per_round,
                     population=population, accountant=accountant)
    self._delta = privacy_spending.check_run(releases, delta=delta,
                                             **self._run)

  def after(self, rounds):
    return privacy_spending.spent(self._releases, rounds=rounds,
                                  delta=self._delta, **self._run)


class _RoundLoop:
  """The driver's side of a run: plans, pipelines, commits."""

  def __init__(self, engine, source, form, data, out, min_clients, evaluate,
               progress, on_round, clients_per_element, non_finite, lock,
               secure_threshold=None, sampling='fixed', secure_neighbors=None,
               privacy=None, secure_server='malicious'):
    self.engine = engine
    self.source = source
    self.form = form
    self.data = data
    self.out = out
    self.min_clients = min_clients
    self.evaluate = evaluate
    self.progress = progress
    self.on_round = on_round
    self.clients_per_element = clients_per_element
    self.non_finite = non_finite
    self.lock = lock
    self.secure_threshold = secure_threshold
    self.secure_neighbors = secure_neighbors
    self.secure_server = secure_server
    self.sampling = sampling
    self.privacy = privacy
    self.client_states = {}
    self.outcomes = []
    self.rounds = None
    self.storage = out.storage
    self.board = tensorboard_log.TensorBoardLog(out.tensorboard_dir,
                                                out.storage)

  def start(self):
    """Cleans leftovers; commits the initial state if there is none;
    rebuilds the views of the committed rounds."""
    out, form = self.out, self.form
    for line in out.restore_missing_commits():
      self.progress(line)
    if out.last_committed() is not None:
      # Damaged files are named now, before anything changes, not as a
      # failed round (JSON files are checked as they are read).
      self.outcomes = [out.outcome(r) for r in out.committed_rounds()
                       if r > 0]
      for number in out.committed_rounds():
        out.clients(number)  # Read to be checked.
      state_path = out.state_path(out.last_committed())
      try:
        tensor_io.read_tensors(state_path, form.state_spec,
                               storage=self.storage)
      except ValueError as e:
        raise run_dir.damaged(state_path, str(e).split(': ', 1)[-1]) from None
    if form.has_client_state:
      self.client_states = out.client_state_paths()
    out.clean(self.client_states if form.has_client_state else None)
    if out.last_committed() is None:
      attempt = out.new_attempt(0)
      tensor_io.write_tensors(attempt.state_path, form.initialize(),
                              storage=self.storage)
      self.storage.write_bytes(attempt.outcome_path, b'{}')
      self.storage.write_bytes(attempt.clients_path, json.dumps(
          {'sampled': [], 'dropped': []}).encode())
      out.commit(attempt)
    out.write_metrics(self.outcomes)
    self.board.rebuild(self.outcomes)

  def run(self, client_ids, clients_per_round, seed, rounds, sizer):
    self.rounds = rounds
    sizer.recall(self.outcomes, self.engine.name)
    while self.out.last_committed() < rounds:
      first = self.out.last_committed() + 1
      count = sizer.next(rounds - first + 1)
      samples = [sample_clients(client_ids, clients_per_round, seed, r,
                                self.sampling)
                 for r in range(first, first + count)]
      for number, sampled in zip(range(first, first + count), samples):
        if len(sampled) < self.min_clients:
          raise RoundError(
              f'Round {number}: {len(sampled)} clients sampled, fewer than '
              f'min_clients={self.min_clients}; nothing committed.')
      plans = self.plan(first, samples)
      start = time.perf_counter()
      self.run_pipeline(plans)
      sizer.observe(count, time.perf_counter() - start)
      for i, plan in enumerate(plans):
        try:
          self.finish(plan)
        except BaseException:
          for later in plans[i:]:
            self.out.discard(later.attempt)
          raise

  def plan(self, first, samples):
    """The rounds' attempts, and each client's task in them."""
    plans = []
    for offset, sampled in enumerate(samples):
      attempt = self.out.new_attempt(first + offset)
      tasks = []
      for client in sampled:
        pending = tuple(p.attempt.client_state_path(client)
                        for p in reversed(plans) if client in p.sampled)
        tasks.append(round_pipeline.ClientTask(
            client, pending if self.form.has_client_state else (),
            self.client_states.get(client)))
      state_path = plans[-1].attempt.state_path if plans else \
          self.out.state_path(first - 1)
      elements = self.clients_per_element and math.ceil(
          len(tasks) / self.clients_per_element)
      secure = self.form.has_secure_sums and secure_round.SecureRound(
          attempt, self.out.directory,
          malicious_server=self.secure_server == 'malicious')
      plans.append(round_pipeline.RoundPlan(
          attempt, state_path, sampled,
          _split(tasks, elements or self.engine.elements_for(len(tasks))),
          secure or None, self.secure_threshold, self.secure_neighbors))
    return plans

  def run_pipeline(self, plans):
    """Prepares the first round's C and runs the plan's pipeline."""
    first = plans[0]
    try:
      state = tensor_io.read_tensors(first.state_path, self.form.state_spec,
                                     'server state', self.storage)
      if round_pipeline.prepare(self.form, first, state):
        pipeline = self.engine.pipeline(len(first.batches))
        round_pipeline.build(pipeline, self.engine, self.source, self.data,
                             plans, self.min_clients, self.non_finite)
        self.engine.run(pipeline)
    except BaseException as e:
      for plan in plans:
        self.out.check_not_taken(plan.attempt)  # Gone as another's leftover?
        self.out.discard(plan.attempt)
      if not isinstance(e, Exception):
        raise
      rounds = f'Round {first.attempt.round}' if len(plans) == 1 else \
          f'Rounds {first.attempt.round}-{plans[-1].attempt.round}'
      raise RoundError(f'{rounds} failed on {self.engine.name}, nothing '
                       f'committed: {type(e).__name__}: {_first_line(e)}'
                       ) from e

  def finish(self, plan):
    """Checks, evaluates and commits one round of a finished pipeline."""
    attempt, number = plan.attempt, plan.attempt.round
    self.out.check_not_taken(attempt)
    try:
      raw = json.loads(self.storage.read_bytes(attempt.outcome_path))
    except storage_lib.NotFound:
      raw = {'failed': 'the round did not run'}
    if 'failed' in raw or 'metrics' not in raw or 'prepared_at' not in raw:
      raise RoundError(
          f'Round {number}: {raw.get("failed", "no update ran")}; nothing '
          f'committed. Dropped: {_dropped_summary(raw)}.')
    evaluate_start = time.perf_counter()
    try:
      evaluation = self._evaluate(attempt)
    except Exception as e:  # pylint: disable=broad-except
      raise RoundError(f'Round {number} failed, nothing committed: '
                       f'{type(e).__name__}: {e}') from e
    evaluate_seconds = time.perf_counter() - evaluate_start
    commit_start = time.perf_counter()
    outcome = _outcome(number, raw, len(plan.sampled), self.engine.name)
    if evaluation is not None:
      outcome['evaluation'] = evaluation
    if self.privacy is not None:
      outcome['privacy'] = self.privacy.after(number)
    dropped = set(raw['dropped_ids'])
    self.storage.write_bytes(attempt.clients_path, json.dumps(
        {'sampled': plan.sampled, 'dropped': sorted(dropped)}).encode())
    if self.form.has_client_outputs:
      self.storage.write_bytes(attempt.client_outputs_path, json.dumps(
          client_outputs_lib.index(self.form.client_output_spec,
                                   raw['client_output_parts'], plan.sampled,
                                   dropped)).encode())
    stages = outcome['stage_seconds']
    if evaluation is not None:
      stages['evaluate'] = round(evaluate_seconds, 4)
    # The commit's time: the outcome checked and written; the create-only
    # marker that follows is one request and not counted.
    stages['commit'] = round(time.perf_counter() - commit_start, 4)
    outcome['seconds'] = round(sum(stages.values()), 4)
    self.storage.write_bytes(attempt.outcome_path,
                             json.dumps(outcome).encode())
    self.lock.check()
    self.out.commit(attempt, self.form.has_client_outputs)
    self._replace_client_states(plan, dropped)
    self.outcomes.append(outcome)
    self.out.write_metrics(self.outcomes)
    self.board.write(outcome)
    self.progress(progress_line(outcome, self.rounds))
    if self.on_round is not None:
      self.on_round(outcome)

  def _evaluate(self, attempt):
    """`evaluate(new state)` as {name: float}, or None without `evaluate`."""
    if self.evaluate is None:
      return None
    state = tensor_io.read_tensors(attempt.state_path, self.form.state_spec,
                                   'server state', self.storage)
    result = self.evaluate(state)
    if not isinstance(result, dict):
      raise errors.InvalidTypeError(
          'evaluate must return a dict name -> number, got '
          f'{type(result).__name__}.')
    return {str(name): float(value) for name, value in result.items()}

  def _replace_client_states(self, plan, dropped):
    """The round's new client states replace the ones they supersede."""
    if not self.form.has_client_state:
      return
    superseded = []
    for client in plan.sampled:
      if client in dropped:
        continue
      old = self.client_states.get(client)
      if old is not None:
        superseded.append(old)
      self.client_states[client] = plan.attempt.client_state_path(client)
    self.storage.delete(superseded)


def _split(items, parts):
  """`items` in `parts` contiguous, nearly equal, non-empty lists."""
  parts = max(1, min(parts, len(items)))
  size, extra = divmod(len(items), parts)
  result, start = [], 0
  for i in range(parts):
    end = start + size + (1 if i < extra else 0)
    result.append(items[start:end])
    start = end
  return result


def _outcome(number, raw, sampled, engine_name):
  """A committed round's outcome, from what its pipeline recorded."""
  work_aggregate = max(0.0, raw['update_started_at'] - raw['prepared_at'])
  secure = ({'secure_aggregation': raw['secure_aggregation']}
            if 'secure_aggregation' in raw else {})
  return dict(
      round=number, clients_ok=raw['clients_ok'],
      clients_dropped=raw['clients_dropped'],
      dropped_reasons=raw['dropped_reasons'],
      dropped_clients=raw['dropped_clients'],
      bits_broadcast=raw['bits_broadcast_each'] * sampled,
      bits_aggregated=raw['bits_aggregated'],
      client_work_seconds=round(raw['client_work_seconds'], 4),
      clients_per_worker=raw['clients_per_worker'], engine=engine_name,
      metrics=raw['metrics'],
      stage_seconds={'prepare': round(raw['prepare_seconds'], 4),
                     'work_aggregate': round(work_aggregate, 4),
                     'update': round(raw['update_seconds'], 4)}, **secure)


def _dropped_summary(outcome):
  reasons = outcome.get('dropped_reasons') or {}
  if not reasons:
    return 'none'
  named = outcome.get('dropped_clients') or {}
  text = ', '.join(f'{count} {reason}' for reason, count in reasons.items())
  if named:
    client, message = next(iter(named.items()))
    text += f' (e.g. client {client!r}: {message})'
  return text


def _first_line(error):
  text = str(error).strip()
  return text.splitlines()[0] if text else ''


def progress_line(outcome, rounds):
  metrics = ', '.join(f'{k}={_short(v)}' for k, v in
                      outcome['metrics'].items())
  reasons = outcome.get('dropped_reasons') or {}
  why = ' (' + ', '.join(f'{n} {r}' for r, n in reasons.items()) + ')' \
      if reasons else ''
  evaluation = outcome.get('evaluation') or {}
  if evaluation:
    metrics += ('; ' if metrics else '') + 'evaluation ' + ', '.join(
        f'{k}={_short(v)}' for k, v in evaluation.items())
  stages = outcome.get('stage_seconds') or {}
  stage_text = ' (' + ', '.join(f'{k} {v:.2f}' for k, v in stages.items()) + \
      ')' if stages else ''
  of = f'/{rounds}' if rounds else ''
  spent = outcome.get('privacy')
  spent_text = (f'; epsilon {spent["epsilon"]:.4g} at delta '
                f'{spent["delta"]:g}' if spent else '')
  return (f'round {outcome["round"]}{of}: clients ok '
          f'{outcome["clients_ok"]}, dropped {outcome["clients_dropped"]}{why}'
          f'{"; " + metrics if metrics else ""}{spent_text}; bits broadcast '
          f'{outcome["bits_broadcast"]}, aggregated '
          f'{outcome["bits_aggregated"]}; {outcome["seconds"]:.2f} s'
          f'{stage_text}')


def _short(value):
  if isinstance(value, float):
    return f'{value:.4g}'
  if isinstance(value, list) and len(value) > 4:
    return f'[{len(value)} values]'
  return str(value)
