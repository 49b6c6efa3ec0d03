"""Rounds of a canonical form as one Beam batch pipeline: a straight chain.

    Create(batches of round a's client ids)
      -> Work: each element runs its clients' work and accumulates their U
         into one partial accumulator (zero, then accumulate per client)
      -> Aggregate: a CombineFn merging the partials
      -> Update: report, then <S, R> -> <S', X>; writes S' and the round's
         outcome; if the plan has a next round, prepares its C and emits its
         batches
      -> [Reshuffle] -> Work of round a+1 -> ...

A round of one element has nothing to merge: its steps run as one Beam step
(`steps.InOneStep`), since each step costs a runner ~10 ms to build,
translate and start, as much as 20 small clients' work.

No side inputs and no multi-output ParDos: runners do not implement those
alike (Dask recomputes a side input's producer in every consumer and drops
output tags), and every client's work must run exactly once. Only paths,
client ids and encoded accumulators move through the pipeline; the form
reaches workers as a `FormSource`, loaded once per process, and every file
goes through `canonical.io`, so a run directory may be on s3://.

A client whose work fails (its data or state cannot be read, its work raises,
or its U or new state holds a NaN or Inf, under the default `non_finite`
policy) is dropped: it adds nothing, keeps its old state and is counted with
its reason. A round whose update cannot
run (too few clients, an error) records why and ends the chain there; the
driver commits the rounds before it.
"""

import collections
import concurrent.futures
import dataclasses
import itertools
import json
import os
import socket
import struct
import threading
import time

import apache_beam as beam
from apache_beam import coders
import numpy as np
import tensorflow as tf

from beam_runner.pipeline import steps
from beam_runner.worker_io import client_data as client_data_lib
from beam_runner.worker_io import client_outputs as client_outputs_lib
from beam_runner.worker_io import sandbox
from beam_runner.worker_io import tensor_io
from canonical import errors
from canonical.executors import batched_work
from canonical import io as storage_lib

UNREADABLE = 'unreadable data'
UNREADABLE_STATE = 'unreadable client state'
NON_FINITE_UPDATE = 'non-finite update'
NON_FINITE_STATE = 'non-finite client state'
WORK_FAILED = 'work failed'
SECURE_INPUT = 'secure input out of range'
SECURE_SHARING = 'secure protocol: sharing keys failed'
SECURE_MASKING = 'secure protocol: masking failed'
SECURE_REPLAYED = 'secure protocol: round id served before'

# What a client's U or new state may hold (`run(..., non_finite=...)`).
NON_FINITE_POLICIES = {
    'drop': 'drop a client whose update or new state holds NaN or +-Inf',
    'drop_nan': 'drop a client whose update or new state holds NaN; keep '
                '+-Inf (the identity of a min or max, say)',
    'keep': 'keep every value: the process\'s own meaning, NaN included',
}

# Clients named with their error in a round's outcome (the rest are counted).
MAX_DROPPED_NAMED = 10
# Reads of remote client data and states an element keeps in flight.
REMOTE_READS = 8
# Client data (bytes) one call of batched work takes at most, about.
BATCHED_BYTES = 64 << 20


@dataclasses.dataclass
class ClientTask:
  """One client's work in one round, and where its state comes from."""
  client_id: str
  # States this plan's earlier rounds may have written, newest first; a
  # missing one means the client was dropped there.
  pending_states: tuple = ()
  committed_state: str = None  # Its last committed state, if any.

  def __dask_tokenize__(self):
    """Dask names graph inputs by a hash of them; this one is cheap."""
    return (self.client_id, self.pending_states, self.committed_state)


@dataclasses.dataclass
class RoundPlan:
  attempt: object            # run_dir.Attempt: where the round's files go.
  state_path: str            # The server state the round starts from.
  sampled: list              # Client ids.
  batches: list              # Lists of ClientTask: one pipeline element each.
  secure: object = None      # A secure_round.SecureRound: secure sums.
  secure_threshold: int = None  # Survivors needed to unmask (None: most).
  secure_neighbors: int = None  # Each client's mask peers (None: all).


class ClientDropped(errors.Error):
  """One client's work failed; `reason` is one of the reasons above."""

  def __init__(self, reason, message):
    super().__init__(f'{reason}: {message}')
    self.reason = reason


def worker_id():
  return f'{socket.gethostname()}:{os.getpid()}'


class FormFn(steps.AnyOutput):
  """Mixin of every step that runs a form's piece (here, and the secure
  round's in `beam_runner.secure.round`): the form, obtained once per worker
  process from its source, never pickled with the step."""

  _TRANSIENT = ('_form',)

  def __getstate__(self):
    return {k: (None if k in self._TRANSIENT else v)
            for k, v in self.__dict__.items()}

  def setup(self):
    self._form = self._source.get()

  def form(self):
    """The form (a method, not a property: Beam probes a DoFn's attributes
    with getattr while it builds a pipeline)."""
    if getattr(self, '_form', None) is None:
      self.setup()
    return self._form


# ---------------------------------------------------------------------------
# Partial aggregates: an accumulator (or None: no client yet) and counts.


def empty_stats():
  return {'ok': 0, 'bits': 0, 'seconds': 0.0, 'dropped': [], 'workers': {},
          'advertisements': [], 'outputs': []}


def merge_stats(stats, more):
  stats['ok'] += more['ok']
  stats['bits'] += more['bits']
  stats['seconds'] += more['seconds']
  stats['dropped'] += more['dropped']
  stats['advertisements'] += more['advertisements']
  stats['outputs'] += more.get('outputs', [])
  for worker, count in more['workers'].items():
    stats['workers'][worker] = stats['workers'].get(worker, 0) + count
  return stats


class PartialCoder(coders.Coder):
  """`[arrays or None, stats]` as bytes: JSON counts, raw tensors (no pickle)."""

  _LENGTH = struct.Struct('<Q')

  def encode(self, value):
    arrays, stats = value
    head = json.dumps(stats).encode()
    body = b'' if arrays is None else tensor_io.encode(arrays)
    return self._LENGTH.pack(len(head)) + head + body

  def decode(self, encoded):
    (length,) = self._LENGTH.unpack_from(encoded)
    stats = json.loads(encoded[8:8 + length])
    body = encoded[8 + length:]
    return [tensor_io.decode(body) if body else None, stats]

  def is_deterministic(self):
    return True

  def to_type_hint(self):
    return list


_BROADCAST = {}  # The last round's C in this process: path and tensors.
_BROADCAST_LOCK = threading.Lock()


class WorkFn(FormFn, beam.DoFn):
  """A batch of clients: <D, C> -> <U, Y> each; yields one partial
  aggregate. Y's client state and per-client outputs are written to the
  attempt (the outputs in part files: `worker_io/client_outputs.py`)."""

  def __init__(self, source, data_source, attempt, non_finite='drop',
               secure=None):
    self._source = source
    self._data = data_source
    self._attempt = attempt  # Its storage reaches the round's files.
    self._non_finite = non_finite
    # With secure sums, a secure_round.SecureRound: it keeps U's secure part
    # at the client, which then advertises its keys.
    self._secure = secure

  def _load_broadcast(self):
    """C, read once per process and round (runners may make a new WorkFn
    for every element, and C weighs what a model weighs)."""
    path = self._attempt.broadcast_path
    with _BROADCAST_LOCK:
      if _BROADCAST.get('path') != path:
        _BROADCAST.clear()
        _BROADCAST.update(path=path, value=tensor_io.read_tensors(
            path, self.form().broadcast_spec, what='broadcast',
            storage=self._attempt.storage))
      return _BROADCAST['value']

  def process(self, tasks):
    form = self.form()
    c = self._load_broadcast()  # Not one client's: fails the round.
    stats = empty_stats()
    remote = getattr(self._data, 'remote', False) or not storage_lib.is_local(
        self._attempt.directory)
    inputs = _in_order(self._inputs, tasks, REMOTE_READS if remote else 0)
    batched = None
    if (self._secure is None and not sandbox.is_sandboxed(form) and
        client_data_lib.takes_elements(form, self._data)):
      batched = batched_work.BatchedWork.of(form, self._non_finite)
    if batched is None:
      accumulator, worked = self._work_each(tasks, inputs, c, stats)
    else:
      accumulator, worked = self._work_batched(batched, tasks, inputs, c,
                                               stats)
    if worked:
      stats['workers'][worker_id()] = worked
    yield [None if accumulator is None else tensor_io.flatten(accumulator),
           stats]

  def _work_batched(self, batched, tasks, inputs, c, stats):
    """The clients' work and accumulate in calls of `BatchedWork`, each
    over clients holding up to BATCHED_BYTES of data, so that an element
    holds no more than that in memory; a call that fails runs its clients
    one by one, to drop only the clients that fail."""
    accumulator, worked, ready, size = None, 0, [], 0
    for task, (read, seconds) in zip(tasks, inputs):
      if isinstance(read, ClientDropped):
        stats['dropped'].append([task.client_id, read.reason, str(read)])
        continue
      ready.append((task, read, seconds))
      size += sum(a.nbytes for a in tf.nest.flatten(read))
      if size >= BATCHED_BYTES:
        accumulator, more = self._run_batch(batched, ready, accumulator, c,
                                            stats)
        worked, ready, size = worked + more, [], 0
    if ready:
      accumulator, more = self._run_batch(batched, ready, accumulator, c,
                                          stats)
      worked += more
    return accumulator, worked

  def _run_batch(self, batched, ready, accumulator, c, stats):
    start = time.perf_counter()
    try:
      new, passed = batched(accumulator, c, [read for _, read, _ in ready])
    except Exception:  # pylint: disable=broad-except
      return self._work_each(
          [task for task, _, _ in ready],
          [(read, seconds) for _, read, seconds in ready], c, stats,
          accumulator)
    stats['seconds'] += (sum(seconds for _, _, seconds in ready) +
                         time.perf_counter() - start)
    values = 'NaN' if self._non_finite == 'drop_nan' else 'NaN or Inf'
    for (task, _, _), ok in zip(ready, passed):
      if ok:
        stats['ok'] += 1
        stats['bits'] += batched.bits_per_client
      else:
        stats['dropped'].append([task.client_id, NON_FINITE_UPDATE,
                                 f'{NON_FINITE_UPDATE}: its update holds '
                                 f'{values}'])
    return new, int(passed.sum())

  def _work_each(self, tasks, inputs, c, stats, accumulator=None):
    """Each client's work, then accumulate of its U into `accumulator`
    (None: none yet), one call each."""
    form = self.form()
    worked = 0
    keeper = None if self._secure is None else self._secure.keeper(form,
                                                                   tasks)
    writer = form.has_client_outputs and client_outputs_lib.Writer(
        self._attempt, client_data_lib.file_name(tasks[0].client_id))
    for task, (read, seconds) in zip(tasks, inputs):
      start = time.perf_counter()
      try:
        if isinstance(read, ClientDropped):
          raise read
        update, bits, outputs = self._work(task, read, c)
        if self._secure is not None:
          # It keeps its U and advertises its keys; its U goes with its
          # masked input (protocol_steps.MaskFn), if it gets that far.
          stats['advertisements'].append(keeper.keep(task.client_id,
                                                     update))
      except ClientDropped as e:
        stats['dropped'].append([task.client_id, e.reason, str(e)])
        continue
      if writer:
        writer.add(task.client_id, outputs)
      worked += 1
      stats['seconds'] += seconds + time.perf_counter() - start
      if self._secure is None:
        if accumulator is None:
          accumulator = form.zero()
        accumulator = form.accumulate(accumulator, update)
        stats['ok'] += 1
        stats['bits'] += bits
    if keeper is not None:
      keeper.close()
    if writer:
      stats['outputs'] = writer.close()
    return accumulator, worked

  def _inputs(self, task):
    """The client's D (with its state, for a form with client state), or
    the ClientDropped that reading it raised; and the seconds it took."""
    start = time.perf_counter()
    form = self.form()
    try:
      try:
        if sandbox.is_sandboxed(form):  # It reads the data itself.
          data = sandbox.ClientDataRef(self._data, task.client_id)
        elif client_data_lib.takes_elements(form, self._data):
          data = self._data.read_elements(task.client_id,
                                          form.client_data_spec)
        else:
          data = self._data.read(task.client_id, form.client_data_spec)
      except Exception as e:  # pylint: disable=broad-except
        raise ClientDropped(UNREADABLE, error_message(e)) from e
      if form.has_client_state:
        data = (data, self._client_state(task))
    except ClientDropped as e:
      data = e
    if self._secure is not None:
      self._secure.draw_client_ahead(form, task.client_id)
    return data, time.perf_counter() - start

  def _work(self, task, data, c):
    """The client's U, its bits and its per-client outputs (None without
    them; its new state written); raises ClientDropped."""
    form = self.form()
    try:
      update, y = form.work(data, c)
    except (tf.errors.DataLossError, tf.errors.NotFoundError,
            client_data_lib.ClientDataError) as e:  # Datasets read lazily.
      raise ClientDropped(UNREADABLE, error_message(e)) from e
    except sandbox.SandboxFailure as e:
      raise ClientDropped(e.reason, e.detail) from e
    except Exception as e:  # pylint: disable=broad-except
      raise ClientDropped(WORK_FAILED, error_message(e)) from e
    new_client_state, outputs = form.split_client_result(y)
    arrays = tensor_io.flatten(update)
    values = 'NaN' if self._non_finite == 'drop_nan' else 'NaN or Inf'
    if not acceptable(arrays, self._non_finite):
      raise ClientDropped(NON_FINITE_UPDATE, f'its update holds {values}')
    if form.has_client_state:
      if not acceptable(tensor_io.flatten(new_client_state),
                        self._non_finite):
        raise ClientDropped(NON_FINITE_STATE,
                            f'its new client state holds {values}')
      tensor_io.write_tensors(
          self._attempt.client_state_path(task.client_id), new_client_state,
          storage=self._attempt.storage)
    return update, tensor_io.bits(arrays), outputs

  def _client_state(self, task):
    form = self.form()
    what = f'state of client {task.client_id!r}'
    storage = self._attempt.storage
    try:
      for path in task.pending_states:
        try:
          return tensor_io.read_tensors(path, form.client_state_spec, what,
                                        storage)
        except storage_lib.NotFound:
          continue  # Dropped in that round: its older state stands.
      if task.committed_state is None:
        return form.client_state_init()
      return tensor_io.read_tensors(task.committed_state,
                                    form.client_state_spec, what, storage)
    except (OSError, ValueError) as e:
      raise ClientDropped(UNREADABLE_STATE, error_message(e)) from e


_NONE = object()  # No item left.


def _in_order(function, items, threads):
  """`function(item)` for each item, in order; with `threads`, up to that
  many run ahead in a thread pool (remote reads wait on the network)."""
  if not threads:
    yield from map(function, items)
    return
  with concurrent.futures.ThreadPoolExecutor(threads) as pool:
    pending = collections.deque()
    items = iter(items)
    for item in itertools.islice(items, threads):
      pending.append(pool.submit(function, item))
    while pending:
      result = pending.popleft().result()
      following = next(items, _NONE)
      if following is not _NONE:
        pending.append(pool.submit(function, following))
      yield result


def acceptable(arrays, non_finite):
  """Whether `arrays` pass the NON_FINITE_POLICIES entry `non_finite`."""
  if non_finite == 'keep':
    return True
  check = np.isfinite if non_finite == 'drop' else lambda a: ~np.isnan(a)
  return all(check(a).all() for a in arrays if a.dtype.kind in 'fc')


def error_message(error):
  """An error as one short line, for a dropped client's reason."""
  text = str(error).strip().splitlines()
  text = text[0] if text else ''
  return f'{type(error).__name__}: {text[:300]}'


class AggregateFn(FormFn, beam.CombineFn):
  """Merges partial aggregates (the form's merge) into one."""

  def __init__(self, source):
    self._source = source

  def _accumulator(self, arrays):
    return tensor_io.pack(self.form().accumulator_spec, arrays,
                          what='accumulator')

  def create_accumulator(self):
    return [None, empty_stats()]

  def add_input(self, accumulator, partial):
    return self.merge_accumulators([accumulator, partial])

  def merge_accumulators(self, accumulators):
    arrays, stats = None, empty_stats()
    for more_arrays, more_stats in accumulators:
      merge_stats(stats, more_stats)
      if more_arrays is None:
        continue
      if arrays is None:
        arrays = more_arrays
      else:
        arrays = tensor_io.flatten(self.form().merge(
            self._accumulator(arrays), self._accumulator(more_arrays)))
    return [arrays, stats]

  def extract_output(self, accumulator):
    return accumulator

  def get_accumulator_coder(self):
    return PartialCoder()


class UpdateFn(FormFn, beam.DoFn):
  """<S, R> -> <S', X>: writes S' and the round's outcome; then prepares the
  next round of the plan, if any, and emits its batches."""

  def __init__(self, source, plan, next_plan, min_clients):
    self._source = source
    self._plan = plan
    self._next = next_plan
    self._min_clients = min_clients

  def process(self, aggregate):
    """`aggregate`: the merged partial; with secure sums, the files of the
    unmasking responses (the partial waits in the round's files)."""
    started_at = time.time()
    start = time.perf_counter()
    form, attempt = self.form(), self._plan.attempt
    secure = self._plan.secure
    if secure is None:
      accumulator, stats = aggregate
    else:
      accumulator, stats = secure.read_aggregate()
    outcome = round_stats(stats, len(self._plan.sampled))
    outcome['update_started_at'] = started_at
    try:
      if stats['ok'] < self._min_clients:
        raise RoundFailed(
            f'{stats["ok"]} of {len(self._plan.sampled)} clients succeeded, '
            f'fewer than min_clients={self._min_clients}')
      state = tensor_io.read_tensors(self._plan.state_path, form.state_spec,
                                     'server state', attempt.storage)
      report = form.report(tensor_io.pack(form.accumulator_spec, accumulator,
                                          what='accumulator'))
      if secure is not None:
        outcome['secure_aggregation'] = secure.summary(form, aggregate)
      sums = () if secure is None else secure.unmask(form, aggregate)
      new_state, metrics = form.update(state,
                                       form.server_aggregate(report, sums))
      tensor_io.write_tensors(attempt.state_path, new_state,
                              storage=attempt.storage)
      outcome['metrics'] = metrics_to_json(metrics)
    except Exception as e:  # pylint: disable=broad-except
      outcome['failed'] = e.args[0] if isinstance(e, RoundFailed) else \
          f'update failed: {error_message(e)}'
      write_outcome(attempt, outcome)
      return
    outcome['update_seconds'] = time.perf_counter() - start
    write_outcome(attempt, outcome)
    if self._next is not None:
      if prepare(form, self._next, new_state):
        yield from self._next.batches


class RoundFailed(errors.Error):
  """The round cannot update; its outcome says why."""


def round_stats(stats, sampled):
  """The pipeline's part of a round's outcome, from the merged counts."""
  dropped = sorted(stats['dropped'])
  reasons = {}
  for _, reason, _ in dropped:
    reasons[reason] = reasons.get(reason, 0) + 1
  return {
      'clients_ok': stats['ok'], 'clients_dropped': sampled - stats['ok'],
      'dropped_reasons': dict(sorted(reasons.items())),
      'dropped_clients': {c: m for c, _, m in dropped[:MAX_DROPPED_NAMED]},
      'dropped_ids': [c for c, _, _ in dropped],
      'bits_aggregated': stats['bits'],
      'client_work_seconds': stats['seconds'],
      'clients_per_worker': dict(sorted(stats['workers'].items())),
      'client_output_parts': stats.get('outputs', []),
  }


def prepare(form, plan, state):
  """S -> C for a round: writes C into its attempt; False (with the failure
  recorded as the round's outcome) if prepare fails."""
  start = time.perf_counter()
  try:
    bits = tensor_io.write_tensors(plan.attempt.broadcast_path,
                                   form.prepare(state),
                                   storage=plan.attempt.storage)
    if plan.secure is not None:
      plan.secure.start(form, state, len(plan.sampled), plan.secure_threshold,
                        plan.secure_neighbors)
  except Exception as e:  # pylint: disable=broad-except
    write_outcome(plan.attempt, {'failed': f'prepare failed: {error_message(e)}'})
    return False
  write_outcome(plan.attempt, {
      'bits_broadcast_each': bits, 'prepared_at': time.time(),
      'prepare_seconds': time.perf_counter() - start})
  return True


def write_outcome(attempt, fields):
  """Adds fields to the attempt's outcome file (one writer at a time: the
  round's stages run in order)."""
  try:
    outcome = json.loads(attempt.storage.read_bytes(attempt.outcome_path))
  except storage_lib.NotFound:
    outcome = {}
  outcome.update(fields)
  attempt.storage.write_bytes(attempt.outcome_path,
                              json.dumps(outcome).encode())


def build(pipeline, engine, source, data_source, plans, min_clients,
          non_finite='drop'):
  """Adds the plan's rounds to `pipeline` as one chain; the first round's C
  must already be prepared."""
  elements = pipeline | 'Clients' >> beam.Create(plans[0].batches)
  for i, plan in enumerate(plans):
    name = f'Round{plan.attempt.round}'
    next_plan = plans[i + 1] if i + 1 < len(plans) else None
    if engine.spread is not None and (i or not engine.create_spreads):
      elements = elements | f'{name}Spread' >> engine.spread()
    work = WorkFn(source, data_source, plan.attempt, non_finite, plan.secure)
    update = UpdateFn(source, plan, next_plan, min_clients)
    if plan.secure is not None:
      round_steps = plan.secure.round_steps(source, plan, work, update)
    else:
      round_steps = [steps.Each('Work', work),
                     steps.Combine('Aggregate', AggregateFn(source)),
                     steps.Each('Update', update)]
    elements = steps.apply(elements, round_steps, engine, name,
                           len(plan.batches))
  return elements


def metrics_to_json(metrics):
  """The form's metrics X as a flat dict path -> number or list."""
  from encoders.core import structures  # pylint: disable=g-import-not-at-top
  result = {}
  for path, leaf in structures.flatten_with_paths(metrics):
    value = leaf.numpy() if hasattr(leaf, 'numpy') else leaf
    if hasattr(value, 'tolist'):
      value = value.tolist()
    result[path or 'value'] = _text(value)
  return result


def _text(value):
  """Strings (bytes, in lists too: heavy hitters) as text, for JSON."""
  if isinstance(value, bytes):
    return value.decode('utf-8', 'replace')
  if isinstance(value, list):
    return [_text(v) for v in value]
  return value
