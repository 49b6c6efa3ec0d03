"""A round with secure sums as Beam stages: the masking protocol of
`canonical.secagg` between the clients (their batches, on any worker) and the
server (single steps after each combine).

    batches -> Work (round_pipeline.WorkFn): each client's U, kept at the
         client (its secure part checked against its range), and the
         client's public keys advertised
      -> Aggregate (CombineFn): the work's counts and the advertisements
      -> Roster (server): publishes the roster
      -> ShareKeys: each client's Shamir shares, encrypted for each peer
      -> Collect -> Relay (server): writes each batch's inbox
      -> Mask: each client's kept input plus its masks, and the plain part
         of its U accumulated (the form's zero and accumulate)
      -> MaskedSum (CombineFn): the form's merge of the plain parts, and
         modular addition of masked inputs
      -> Unmask request (server): keeps the plain aggregate and the masked
         total (or fails the round below the threshold)
      -> Unmask: each contributor's shares -> Collect
      -> Update (round_pipeline.UpdateFn): unmasks the sums, then report and
         update as in any round

A client's work, the round's heavy part, runs where `Create` put its batch
(every engine spreads those); the protocol's steps after it spread at a
Reshuffle where the engine does (Dask keeps them where the combine put them).
A round whose clients are one element runs the same steps in one Beam step
(`steps.InOneStep`): its protocol then costs what its cryptography and files
cost, not fifteen Beam steps and four barriers.

The aggregation tier and every worker that is not the client itself only
ever handle public keys, ciphertexts, masked inputs, plain parts of U and
sums of them. A client draws its keys and masks from its own secret (one
32-byte file per client in the run directory, `client_secrets/`, made on
first use) and the round's attempt, so each step recomputes its earlier
draws on whatever worker runs it (a worker keeps the clients it has drawn,
`client_of`); its U, and after masking the shares it decrypted, wait like
its state in the run directory: in this simulation that directory is the
clients' devices' storage, and no server step reads a secret, an input or a
held share. Messages (the server's, and the clients' n*k shares: k = n - 1
unless the round's `secure_neighbors` makes the mask graph a sparse ring)
travel as files of the attempt (`secure/`), deleted when the round commits;
the pipeline carries only their paths.

Clients drop out at any step, as devices do (Bonawitz et al.): one whose
key sharing or masking fails is in no sum, plain or secure (its U travels
with its masked input, so both parts go in together or not at all), is
counted dropped with the step, and keeps its old state; the survivors'
shares remove the masks others added for it. One whose unmasking fails goes
silent: its input stays in the sums, unmasked from its holders' shares.
Below the threshold at any step, or with survivors not connected in a
sparse graph, the round fails and commits nothing.
"""

import collections
import functools
import itertools
import json
import os
import threading

import apache_beam as beam
import numpy as np
import tensorflow as tf

from beam_runner.pipeline import round as round_pipeline
from beam_runner.pipeline import steps
from beam_runner.worker_io import client_data
from beam_runner.worker_io import tensor_io
from canonical import io as storage_lib
from canonical import secagg
from canonical.secagg import sums as secure_sums

SECRET_BYTES = 32
SECRETS_DIR = 'client_secrets'
# A batch's clients that failed a step they may skip: {client: why}.
SILENT_SUFFIX = '.silent.json'


class SecureRound:
  """One attempt's protocol: where its files are (small; pickled to
  workers), and the steps the round pipeline hands to it."""

  def __init__(self, attempt, run_directory):
    self.storage = attempt.storage  # Reaches every file below.
    self.directory = attempt.secure_directory
    self.round_path = storage_lib.join(self.directory, 'round.json')
    self.roster_path = storage_lib.join(self.directory, 'roster.jsonl')
    self.aggregate_path = storage_lib.join(self.directory, 'aggregate.tensors')
    self.stats_path = storage_lib.join(self.directory, 'aggregate.json')
    self.work_stats_path = storage_lib.join(self.directory, 'work.json')
    self.masked_path = storage_lib.join(self.directory, 'masked_total.tensors')
    self.contributors_path = storage_lib.join(self.directory,
                                          'contributors.json')
    self.sharing_path = storage_lib.join(self.directory, 'sharing.json')
    self.secrets_directory = storage_lib.join(run_directory, SECRETS_DIR)
    self.round_id = f'{attempt.round}/{attempt.id}'

  def inbox_path(self, batch):
    """The shares the Relay addressed to a batch's clients."""
    return storage_lib.join(self.directory, 'inbox', batch + '.jsonl')

  def kept_path(self, batch, part):
    """Where a batch's clients keep their U until they mask (part `part`
    of the batch's; see `Keeper`)."""
    return storage_lib.join(self.directory, 'kept',
                            f'{batch}-{part:05d}.tensors')

  def held_path(self, batch):
    """Where a batch's clients keep the shares they decrypted (step 3, for
    step 4)."""
    return storage_lib.join(self.directory, 'held', batch + '.json')

  # -- The round pipeline's hooks --------------------------------------------

  def start(self, form, state, num_clients, threshold=None, neighbors=None):
    """Writes the round's public parameters (parameters, moduli, threshold,
    the mask graph's degree) from the server state S and the number of
    sampled clients."""
    parameters = secure_sums.flat_parameters(form.secure_parameters(state))
    moduli = secure_sums.round_moduli(form.secure_sums, parameters,
                                      num_clients, form.secure_update_spec)
    neighbors = secagg.graph.resolve(neighbors, num_clients)
    if threshold is None:
      threshold = secure_sums.default_threshold(num_clients, neighbors)
    self.storage.write_bytes(self.round_path, json.dumps({
        'parameters': parameters, 'threshold': threshold,
        'neighbors': neighbors,
        'moduli': [tf.nest.flatten(m) for m in moduli]}).encode())

  def keeper(self, form, tasks):
    """A `Keeper` for the batch of `tasks`, in its files' name (see
    `batch_key`)."""
    return Keeper(self, form, batch_key(tasks))

  def draw_client_ahead(self, form, client_id):
    """Draws the client's keys (reading its secret) before its turn, on the
    worker's reading threads when storage is remote; a failure here shows
    again at its turn, where it counts."""
    try:
      client_of(round_of(form, self), client_id)
    except Exception:  # pylint: disable=broad-except
      pass

  def kept_updates(self, form, batch):
    """(client id, U's plain part, the secure input) of each client whose
    U the batch's `Keeper` kept, in the order it kept them."""
    spec = form.client_update_spec
    plain_leaves = len(tf.nest.flatten(spec))
    secure_leaves = len(tf.nest.flatten(form.secure_update_spec))
    for part in itertools.count():
      path = self.kept_path(batch, part)
      arrays, fields = _KEPT_CODER.decode(self.storage.read_bytes(path))
      for i, client_id in enumerate(fields['clients']):
        start = i * (plain_leaves + secure_leaves)
        plain = arrays[start:start + plain_leaves]
        value = arrays[start + plain_leaves:
                       start + plain_leaves + secure_leaves]
        yield (client_id,
               tensor_io.pack(spec, plain, what=f'plain update in {path}'),
               tf.nest.pack_sequence_as(form.secure_update_spec, value))
      if not fields['more']:
        return

  def masked_bits(self, form):
    """Bits of one client's masked input: each value at its modulus's
    width (a secure part is counted like any other U, as it travels)."""
    return secagg.masked_input_bits(round_of(form, self).config)

  def read_aggregate(self):
    """(the plain aggregate's arrays, the round's stats) the Unmask request
    kept."""
    stats = json.loads(self.storage.read_bytes(self.stats_path))
    return tensor_io.decode(self.storage.read_bytes(self.aggregate_path)), stats

  def unmask(self, form, response_files):
    """The secure sums, in their dtypes, from the masked total and the
    files of the contributors' unmasking shares (RoundFailedError if too
    few of a client's holders answered)."""
    the_round = round_of(form, self)
    the_roster = roster(self)
    contributors = contributors_of(self)
    values = tensor_io.decode(self.storage.read_bytes(self.masked_path))
    total = secagg.MaskedSum(tuple(np.asarray(v, np.uint64) for v in values),
                             frozenset(contributors))
    flat = secagg.unmask(the_round.config, the_roster,
                         sharing_of(self)['senders'], total,
                         [m for path in response_files
                          if not path.endswith(SILENT_SUFFIX)
                          for m in _read_messages(self.storage, path)])
    return secure_sums.as_results(form.secure_sums, flat,
                                  form.secure_update_spec)

  def summary(self, form, response_files):
    """The round's protocol for its outcome: the mask graph ('all' pairs,
    or each client's ring neighbors), the threshold, the contributors, and
    the contributors that went silent before unmasking (and why)."""
    config = round_of(form, self).config
    contributors = contributors_of(self)
    silent = _silent(self.storage, response_files)
    return {'neighbors': config.neighbors or 'all',
            'threshold': config.threshold,
            'contributors': len(contributors),
            'responders': len(contributors) - len(silent),
            'silent': dict(sorted(silent.items()))}

  def round_steps(self, source, plan, work, update):
    """The round's steps (see the module docstring)."""
    return [
        steps.Each('Work', work),
        steps.Combine('Aggregate', round_pipeline.AggregateFn(source)),
        steps.Each('Roster', RosterFn(plan)),
        steps.Spread('ShareSpread'),
        steps.Each('ShareKeys', ShareKeysFn(source, self)),
        steps.Collect('Shares'),
        steps.Each('Relay', RelayFn(plan)),
        steps.Spread('MaskSpread'),
        steps.Each('Mask', MaskFn(source, self)),
        steps.Combine('MaskedSum', MaskedSumFn(source, self)),
        steps.Each('UnmaskRequest', UnmaskRequestFn(source, plan)),
        steps.Spread('UnmaskSpread'),
        steps.Each('Unmask', UnmaskFn(source, self)),
        steps.Collect('Responses'),
        steps.Each('Update', update),
    ]


_KEPT_CODER = round_pipeline.PartialCoder()  # [arrays, {clients, more}].
# Parts of 4 or 16 MiB measured slower than 1 MiB with model-sized updates.
KEPT_PART_BYTES = 1 << 20


class Keeper:
  """At a batch's clients, after their work: each one checks its secure
  input and keeps it with its U's plain part (both travel with its masked
  input) until it masks. The batch's clients share files, each closed once
  it holds KEPT_PART_BYTES (on object storage each file is a request; the
  batch is never held in memory whole)."""

  def __init__(self, secure_round, form, batch):
    self._secure_round = secure_round
    self._form = form
    self._batch = batch
    self._clients, self._arrays, self._bytes, self._parts = [], [], 0, 0

  def keep(self, client_id, update):
    """Keeps the client's U; returns its key advertisement (wire text).
    ClientDropped if its secure input is out of range."""
    form, secure_round = self._form, self._secure_round
    the_round = round_of(form, secure_round)
    plain, secure_part = form.split_update(update)
    try:
      value = secure_sums.client_inputs(
          form.secure_sums, the_round.parameters, secure_part,
          f'client {client_id!r}')
    except secure_sums.SecureSumError as e:
      raise round_pipeline.ClientDropped(round_pipeline.SECURE_INPUT,
                                         str(e)) from e
    advertisement = client_of(the_round, client_id).advertisement
    arrays = tensor_io.flatten(plain) + tensor_io.flatten(value)
    self._clients.append(client_id)
    self._arrays += arrays
    self._bytes += sum(a.nbytes for a in arrays)
    if self._bytes >= KEPT_PART_BYTES:
      self._write(more=True)
    return secagg.wire.to_bytes(advertisement).decode()

  def close(self):
    """Writes what is left (nothing if no client kept its U)."""
    if self._clients or self._parts:
      self._write(more=False)

  def _write(self, more):
    self._secure_round.storage.write_bytes(
        self._secure_round.kept_path(self._batch, self._parts),
        _KEPT_CODER.encode([self._arrays,
                            {'clients': self._clients, 'more': more}]))
    self._clients, self._arrays, self._bytes = [], [], 0
    self._parts += 1


# ---------------------------------------------------------------------------
# What every party reads: the round's parameters and the roster.


def batch_key(tasks):
  """A batch's name in the protocol's files: its first client's."""
  return client_data.file_name(tasks[0].client_id)


def _read_lines(storage, path):
  return [line for line in storage.read_bytes(path).split(b'\n') if line]


def _read_messages(storage, path):
  return [secagg.wire.from_bytes(line) for line in _read_lines(storage, path)]


def _write_messages(storage, path, messages):
  storage.write_bytes(path, b'\n'.join(secagg.wire.to_bytes(m)
                                        for m in messages))


class _Cache:
  """`load(key)`, kept per process and key: runners may make new DoFns for
  every element. Threads load in parallel (two asking for one key may both
  load it; all get the first result kept). Emptied when it holds more than
  `most`."""

  def __init__(self, most):
    self._most = most
    self._values = {}
    self._lock = threading.Lock()

  def get(self, key, load):
    with self._lock:
      if key in self._values:
        return self._values[key]
    value = load(key)  # Not under the lock: threads load in parallel.
    with self._lock:
      if len(self._values) >= self._most:
        self._values.clear()
      return self._values.setdefault(key, value)


_FILES = _Cache(16)  # The round's parameters, roster, contributors.
# Clients' keys, each worker's share of a round, by round: a round's
# clients go with the round (two kept, for rounds chained in one pipeline).
_CLIENTS_BY_ROUND = _Cache(2)


class Round:
  """What every party of the round knows: its config and parameters."""

  def __init__(self, form, secure_round):
    fields = json.loads(secure_round.storage.read_bytes(
        secure_round.round_path))
    self.parameters = fields['parameters']
    self.threshold = fields['threshold']
    moduli = tuple(tf.nest.pack_sequence_as(spec, flat) for spec, flat in zip(
        form.secure_update_spec, fields['moduli']))
    self.config = secure_sums.round_config(
        form.secure_update_spec, moduli, self.threshold,
        secure_round.round_id, fields.get('neighbors'))
    self.paths = secure_round


def round_of(form, secure_round):
  return _FILES.get(secure_round.round_path,
                    lambda _: Round(form, secure_round))


def roster(secure_round):
  """The round's roster: one tuple per process (secagg indexes it once)."""
  return _FILES.get(secure_round.roster_path, lambda path: tuple(
      _read_messages(secure_round.storage, path)))


def contributors_of(secure_round):
  """Whose masked inputs the sum holds, as the Unmask request published."""
  return _FILES.get(secure_round.contributors_path,
                    functools.partial(_read_json, secure_round.storage))


def sharing_of(secure_round):
  """{'senders': who shared keys (U2), 'silent': {client: why not}}, as
  the Relay published."""
  return _FILES.get(secure_round.sharing_path,
                    functools.partial(_read_json, secure_round.storage))


def _read_json(storage, path):
  return json.loads(storage.read_bytes(path))


def _silent(storage, paths):
  """{client: why} of the clients that went silent in a client step."""
  silent = {}
  for path in paths:
    if path.endswith(SILENT_SUFFIX):
      silent.update(_read_json(storage, path))
  return silent


# ---------------------------------------------------------------------------
# The clients' steps.


def _secret(secure_round, client_id):
  """The client's own secret: read, or made once (create-only)."""
  path = storage_lib.join(secure_round.secrets_directory,
                      client_data.file_name(client_id) + '.key')
  storage = secure_round.storage
  try:
    return storage.read_bytes(path)
  except storage_lib.NotFound:
    pass
  try:
    storage.create_only(path, os.urandom(SECRET_BYTES))
  except storage_lib.AlreadyExists:
    pass  # Another worker made it first: use theirs.
  return storage.read_bytes(path)


def client_of(the_round, client_id):
  """The client's draws in this round: made once per process (its keys
  are the costly part), the same on every worker."""
  clients = _CLIENTS_BY_ROUND.get(the_round.paths.round_path,
                                  lambda _: _Cache(1 << 14))
  return clients.get(client_id, lambda _: Client(the_round, client_id))


class Client:
  """One client's draws in one round, redrawn by each step from its secret:
  the same keys and shares on every worker."""

  def __init__(self, the_round, client_id):
    paths = the_round.paths
    self._rng = secagg.SeededRandom(_secret(paths, client_id)).child(
        'round', paths.round_id)
    self.round = the_round
    self.id = client_id
    self.keys, self.advertisement = secagg.advertise_keys(
        client_id, the_round.config, self._rng.child('advertise'))
    self._sharing_state = None

  @functools.cached_property
  def _roster(self):
    """The roster the server sends it: in a sparse round, its
    neighborhood's keys and the round's ids."""
    received = secagg.roster_for(self.round.config, roster(self.round.paths),
                                 self.id)
    return received.advertisements, received.client_ids or None

  def share_keys(self):
    advertisements, client_ids = self._roster
    self._sharing_state, outgoing = secagg.share_keys(
        self.keys, advertisements, self._rng.child('share'), client_ids)
    return self._sharing_state, outgoing

  @property
  def sharing_state(self):
    """Its state after step 2: kept by the worker that ran that step, or
    redrawn (the same) without encrypting on another."""
    if self._sharing_state is None:
      advertisements, client_ids = self._roster
      self._sharing_state = secagg.sharing_state(
          self.keys, advertisements, self._rng.child('share'), client_ids)
    return self._sharing_state

  def kept(self, fields):
    """Its step-3 state, from its entry in its batch's held file."""
    held = {u: (int(seed, 16), int(key, 16)) for u, seed, key in
            fields['held']}
    return secagg.MaskingState(self.sharing_state,
                               tuple(fields['share_senders']), held)


def _held_fields(masking):
  """A client's step-3 state (the shares it holds) as JSON fields."""
  return {'share_senders': list(masking.share_senders),
          'held': [[u, hex(seed), hex(key)]
                   for u, (seed, key) in masking.held_shares.items()]}


class _ClientStepFn(round_pipeline.FormFn, beam.DoFn):
  """A client step over a batch (its key, its tasks: see
  `_ServerStepFn._batches`): writes the batch's messages to one file of the
  attempt and yields its path (a round of n clients sends n*k shares: they
  travel as files, not as pipeline values). A client whose step fails goes
  silent, as a device that drops out does: the batch's silent file names it
  and why."""

  STEP = None  # The messages' directory under the attempt's secure/.

  def __init__(self, source, secure_round):
    self._source = source
    self._secure_round = secure_round

  def process(self, batch):
    key, tasks = batch
    the_round = round_of(self.form(), self._secure_round)
    kept = self.batch_state(key)
    messages, silent = [], {}
    for task in tasks:
      try:
        messages.extend(self.step(client_of(the_round, task.client_id),
                                  kept))
      except Exception as e:  # pylint: disable=broad-except
        silent[task.client_id] = round_pipeline._message(e)  # pylint: disable=protected-access
    path = storage_lib.join(self._secure_round.directory, self.STEP,
                        key + '.jsonl')
    storage = self._secure_round.storage
    _write_messages(storage, path, messages)
    paths = [path]
    if silent:
      paths.append(path[:-len('.jsonl')] + SILENT_SUFFIX)
      storage.write_bytes(paths[-1], json.dumps(silent).encode())
    yield paths

  def batch_state(self, key):
    """What the batch's clients kept from an earlier step."""
    del key

  def step(self, client, kept):
    raise NotImplementedError


class ShareKeysFn(_ClientStepFn):
  """Each client's encrypted shares; a client whose step fails goes silent
  (it drops out: no one masks with it)."""

  STEP = 'shares'

  def step(self, client, kept):
    del kept
    return client.share_keys()[1]


class UnmaskFn(_ClientStepFn):
  """Each contributor's shares for the contributor list; a contributor
  whose step fails goes silent (its input stays in the sum; the others'
  shares unmask it if t of its holders answer)."""

  STEP = 'responses'

  def batch_state(self, key):
    return _read_json(self._secure_round.storage,
                      self._secure_round.held_path(key))

  def step(self, client, kept):
    return [secagg.unmasking_shares(client.kept(kept[client.id]),
                                    contributors_of(self._secure_round))]


class MaskFn(_ClientStepFn):
  """Each client's kept secure input plus its masks, and the plain part of
  its U: a partial aggregate (round_pipeline.AggregateFn's) and a partial
  masked sum (flat uint64 arrays, and whose inputs it holds). A client
  whose step fails drops out: neither part of its U is in any sum."""

  def process(self, batch):
    key, tasks = batch
    form = self.form()
    the_round = round_of(form, self._secure_round)
    inbox = collections.defaultdict(list)
    for message in _read_messages(self._secure_round.storage,
                                  self._secure_round.inbox_path(key)):
      inbox[message.recipient].append(message)
    held = {}
    accumulator, stats = None, round_pipeline.empty_stats()
    total = secagg.aggregation.zero(the_round.config)
    masked_bits = self._secure_round.masked_bits(form)
    for client_id, plain, value in self._kept(form, key, tasks, stats):
      try:
        client = client_of(the_round, client_id)
        masking, masked = secagg.masked_input(client.sharing_state, value,
                                              inbox[client_id])
      except Exception as e:  # pylint: disable=broad-except
        _drop_masking(stats, client_id, e)
        continue
      held[client_id] = _held_fields(masking)
      total = secagg.aggregation.accumulate(the_round.config, total, masked)
      if accumulator is None:
        accumulator = form.zero()
      accumulator = form.accumulate(accumulator, plain)
      stats['ok'] += 1
      stats['bits'] += tensor_io.bits(tensor_io.flatten(plain)) + masked_bits
    self._secure_round.storage.write_bytes(self._secure_round.held_path(key),
                                           json.dumps(held).encode())
    yield [None if accumulator is None else tensor_io.flatten(accumulator),
           stats, list(total.values), sorted(total.contributors)]

  def _kept(self, form, key, tasks, stats):
    """(client id, plain part, secure input) of each of `tasks`' clients,
    as the batch kept them; if the batch's files cannot be read, its
    clients not yet read drop out."""
    left = {task.client_id for task in tasks}
    error = ValueError('its update was not kept')
    try:
      for kept in self._secure_round.kept_updates(form, key):
        if kept[0] in left:
          left.remove(kept[0])
          yield kept
    except Exception as e:  # pylint: disable=broad-except
      error = e
    for task in tasks:
      if task.client_id in left:
        _drop_masking(stats, task.client_id, error)


def _drop_masking(stats, client_id, error):
  stats['dropped'].append([client_id, round_pipeline.SECURE_MASKING,
                           round_pipeline._message(error)])  # pylint: disable=protected-access


class MaskedSumFn(round_pipeline.FormFn, beam.CombineFn):
  """The aggregation tier's part: the form's merge of plain partials, and
  masked inputs added modulo m; it never sees a secure input."""

  def __init__(self, source, secure_round):
    self._source = source
    self._secure_round = secure_round
    self._plain = round_pipeline.AggregateFn(source)

  def create_accumulator(self):
    return None

  def add_input(self, accumulator, partial):
    return self.merge_accumulators([accumulator, partial])

  def merge_accumulators(self, accumulators):
    config = round_of(self.form(), self._secure_round).config
    plain, total = [], None
    for partial in accumulators:
      if partial is None:
        continue
      plain.append(partial[:2])
      more = secagg.MaskedSum(tuple(partial[2]), frozenset(partial[3]))
      total = more if total is None else secagg.aggregation.merge(
          config, total, more)
    if total is None:
      return None
    return self._plain.merge_accumulators(plain) + [
        list(total.values), sorted(total.contributors)]

  def extract_output(self, accumulator):
    return accumulator


# ---------------------------------------------------------------------------
# The server's steps after each combine.


class _ServerStepFn(steps.AnyOutput, beam.DoFn):

  def __init__(self, plan):
    self._plan = plan
    self._storage = plan.secure.storage

  def _fail(self, stats, message):
    """Ends the round here: records why (no stage after this one runs)."""
    outcome = round_pipeline.round_stats(stats, len(self._plan.sampled))
    outcome['failed'] = f'secure aggregation: {message}'
    round_pipeline.write_outcome(self._plan.attempt, outcome)

  def _threshold(self):
    """The round's threshold, as `SecureRound.start` published it."""
    return json.loads(self._storage.read_bytes(
        self._plan.secure.round_path))['threshold']

  def _stats(self, masking=None):
    """The round's counts so far: its work's (as the Roster kept them),
    the clients that dropped out sharing keys, and the masking step's."""
    secure = self._plan.secure
    stats = _read_json(self._storage, secure.work_stats_path)
    for client, why in sorted(_read_json(self._storage, secure.sharing_path)
                              ['silent'].items()):
      stats['dropped'].append([client, round_pipeline.SECURE_SHARING, why])
    if masking is not None:
      round_pipeline.merge_stats(stats, masking)
    return stats

  def _batches(self, clients):
    """The round's batches, each with only `clients`, and named by its
    first client (its files keep that name as clients drop out)."""
    for tasks in self._plan.batches:
      key = batch_key(tasks)
      tasks = [t for t in tasks if t.client_id in clients]
      if tasks:
        yield key, tasks


class RosterFn(_ServerStepFn):
  """Keeps the work's counts; publishes the advertisements of the clients
  whose work succeeded; sends their batches on to share keys."""

  def process(self, aggregate):
    _, stats = aggregate  # No U yet: each client keeps its own.
    secure = self._plan.secure
    advertisements = stats['advertisements']
    stats['advertisements'] = []
    self._storage.write_bytes(secure.work_stats_path,
                              json.dumps(stats).encode())
    threshold = self._threshold()
    if len(advertisements) < threshold:
      self._fail(stats, f'{len(advertisements)} clients advertised keys, '
                        f'fewer than the threshold {threshold}')
      return
    self._storage.write_bytes(secure.roster_path,
                              '\n'.join(advertisements).encode())
    clients = {secagg.wire.from_bytes(a).sender for a in advertisements}
    yield from self._batches(clients)


class RelayFn(_ServerStepFn):
  """Publishes who shared keys (U2: the roster less the clients that went
  silent) and writes each one's inbox (the shares addressed to it)."""

  def process(self, share_files):
    secure = self._plan.secure
    silent = _silent(self._storage, share_files)
    # Each share as its sender wrote it: relayed as it came, not re-encoded
    # (an identical copy of a message is relayed once).
    line_of = {secagg.wire.from_bytes(line): line for path in share_files
               if not path.endswith(SILENT_SUFFIX)
               for line in _read_lines(self._storage, path)}
    # A client with no peer to send shares to shared its keys too.
    senders = sorted(a.sender for a in roster(secure)
                     if a.sender not in silent)
    self._storage.write_bytes(secure.sharing_path, json.dumps(
        {'senders': senders, 'silent': silent}).encode())
    threshold = self._threshold()
    if len(senders) < threshold:
      self._fail(self._stats(), f'{len(senders)} clients shared keys, fewer '
                                f'than the threshold {threshold}')
      return
    inbox = secagg.relay_shares(line_of.keys(), senders)
    for key, tasks in self._batches(set(senders)):
      self._storage.write_bytes(secure.inbox_path(key), b'\n'.join(
          line_of[m] for task in tasks for m in inbox[task.client_id]))
      yield key, tasks


class UnmaskRequestFn(round_pipeline.FormFn, _ServerStepFn):
  """Keeps the plain aggregate and the masked total for the Update and
  asks the contributors to unmask it, if they are enough and connected."""

  def __init__(self, source, plan):
    super().__init__(plan)
    self._source = source

  def process(self, total):
    arrays, masking, values, contributors = total
    secure, storage = self._plan.secure, self._storage
    stats = self._stats(masking)
    storage.write_bytes(secure.aggregate_path, tensor_io.encode(arrays or []))
    storage.write_bytes(secure.stats_path, json.dumps(stats).encode())
    storage.write_bytes(secure.masked_path, tensor_io.encode(values))
    storage.write_bytes(secure.contributors_path,
                        json.dumps(contributors).encode())
    threshold = self._threshold()
    if len(contributors) < threshold:
      self._fail(stats, f'{len(contributors)} clients sent masked inputs, '
                        f'fewer than the threshold {threshold}')
      return
    try:
      secagg.check_connected(round_of(self.form(), secure).config,
                             roster(secure), contributors)
    except secagg.RoundFailedError as e:
      self._fail(stats, str(e))
      return
    yield from self._batches(set(contributors))
