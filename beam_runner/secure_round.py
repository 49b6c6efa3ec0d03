"""A round with secure sums as Beam stages: the masking protocol of
`canonical.secagg` between the clients (their batches, on any worker) and the
server (single steps after each combine).

    batches -> Work (round_pipeline.WorkFn): each client's U; the plain part
         into the accumulator, the secure part kept at the client (checked
         against its range) and the client's public keys advertised
      -> Aggregate (CombineFn): the form's merge
      -> Roster (server): keeps the plain aggregate, publishes the roster
      -> ShareKeys: each client's Shamir shares, encrypted for each peer
      -> Collect -> Relay (server): writes each batch's inbox
      -> Mask: each client's kept input plus its masks
      -> MaskedSum (CombineFn): modular addition of masked inputs only
      -> Unmask request (server): keeps the masked total (or fails the
         round below the threshold)
      -> Unmask: each contributor's shares -> Collect
      -> Update (round_pipeline.UpdateFn): unmasks the sums, then report and
         update as in any round

A client's work, the round's heavy part, runs where `Create` put its batch
(every engine spreads those); the protocol's steps after it spread at a
Reshuffle where the engine does (Dask keeps them where the combine put them).
A round whose clients are one element runs the same steps in one Beam step
(`steps.InOneStep`): its protocol then costs what its cryptography and files
cost, not fifteen Beam steps and four barriers. The aggregation tier and every worker that is not the client itself only
ever handle public keys, ciphertexts, masked inputs and sums of them. A
client draws its keys and masks from its own secret (one 32-byte file per
client in the run directory, `client_secrets/`, made on first use) and the
round's attempt, so each step recomputes its earlier draws on whatever worker
runs it (a worker keeps the clients it has drawn, `client_of`); its secure
input, and after masking the shares it decrypted, wait like its state in the
run directory: in this simulation that directory is the clients' devices'
storage, and no server step reads a secret, an input or a held share.
Messages (the server's, and the clients' n*k shares: k = n - 1 unless the
round's `secure_neighbors` makes the mask graph a sparse ring) travel as files of the attempt (`secure/`), deleted when the round commits; the
pipeline carries only their paths.
"""

import functools
import json
import os
import threading

import apache_beam as beam
import numpy as np
import tensorflow as tf

from beam_runner import client_data
from beam_runner import round_pipeline
from beam_runner import steps
from beam_runner import tensor_io
from canonical import secagg
from canonical import secure_sums
from canonical import storage

SECRET_BYTES = 32
SECRETS_DIR = 'client_secrets'
# A batch's clients that failed a step they may skip: {client: why}.
SILENT_SUFFIX = '.silent.json'


class SecureRound:
  """One attempt's protocol: where its files are (small; pickled to
  workers), and the steps the round pipeline hands to it."""

  def __init__(self, attempt, run_directory):
    self.directory = attempt.secure_directory
    self.round_path = storage.join(self.directory, 'round.json')
    self.roster_path = storage.join(self.directory, 'roster.jsonl')
    self.aggregate_path = storage.join(self.directory, 'aggregate.tensors')
    self.stats_path = storage.join(self.directory, 'aggregate.json')
    self.masked_path = storage.join(self.directory, 'masked_total.tensors')
    self.contributors_path = storage.join(self.directory,
                                          'contributors.json')
    self.secrets_directory = storage.join(run_directory, SECRETS_DIR)
    self.round_id = f'{attempt.round}/{attempt.id}'

  def inbox_path(self, client_id):
    return storage.join(self.directory, 'inbox',
                        client_data.file_name(client_id) + '.jsonl')

  def input_path(self, client_id):
    """Where a client keeps its secure input between its steps."""
    return storage.join(self.directory, 'inputs',
                        client_data.file_name(client_id) + '.tensors')

  def held_path(self, client_id):
    """Where a client keeps the shares it decrypted (step 3 for step 4)."""
    return storage.join(self.directory, 'held',
                        client_data.file_name(client_id) + '.json')

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
    storage.write_bytes(self.round_path, json.dumps({
        'parameters': parameters, 'threshold': threshold,
        'neighbors': neighbors,
        'moduli': [tf.nest.flatten(m) for m in moduli]}).encode())

  def keep_input(self, form, client_id, secure_part):
    """At the client, after its work: checks and keeps its secure input;
    returns its key advertisement (wire text). ClientDropped if the input
    is out of range."""
    the_round = round_of(form, self)
    try:
      value = secure_sums.client_inputs(
          form.secure_sums, the_round.parameters, secure_part,
          f'client {client_id!r}')
    except secure_sums.SecureSumError as e:
      raise round_pipeline.ClientDropped(round_pipeline.SECURE_INPUT,
                                         str(e)) from e
    tensor_io.write_tensors(self.input_path(client_id), value)
    return secagg.wire.to_bytes(client_of(the_round, client_id).advertisement
                                ).decode()

  def masked_bits(self, form):
    """Bits of one client's masked input: each value at its modulus's
    width (a secure part is counted like any other U, as it travels)."""
    return secagg.masked_input_bits(round_of(form, self).config)

  def read_aggregate(self):
    """(the plain aggregate's arrays, the round's stats) the Roster kept."""
    stats = json.loads(storage.read_bytes(self.stats_path))
    return tensor_io.decode(storage.read_bytes(self.aggregate_path)), stats

  def unmask(self, form, response_files):
    """The secure sums, in their dtypes, from the masked total and the
    files of the contributors' unmasking shares (RoundFailedError if too
    few of a client's holders answered)."""
    the_round = round_of(form, self)
    the_roster = roster(self)
    contributors = contributors_of(self)
    values = tensor_io.decode(storage.read_bytes(self.masked_path))
    total = secagg.MaskedSum(tuple(np.asarray(v, np.uint64) for v in values),
                             frozenset(contributors))
    flat = secagg.unmask(the_round.config, the_roster,
                         sorted(a.sender for a in the_roster), total,
                         [m for path in response_files
                          if not path.endswith(SILENT_SUFFIX)
                          for m in _read_messages(path)])
    return secure_sums.as_results(form.secure_sums, flat,
                                  form.secure_update_spec)

  def summary(self, form, response_files):
    """The round's protocol for its outcome: the mask graph ('all' pairs,
    or each client's ring neighbors), the threshold, the contributors, and
    the contributors that went silent before unmasking (and why)."""
    config = round_of(form, self).config
    contributors = contributors_of(self)
    silent = {}
    for path in response_files:
      if path.endswith(SILENT_SUFFIX):
        silent.update(json.loads(storage.read_bytes(path)))
    return {'neighbors': config.neighbors or 'all',
            'threshold': config.threshold,
            'contributors': len(contributors),
            'responders': len(contributors) - len(silent),
            'silent': dict(sorted(silent.items()))}

  def round_steps(self, source, options, plan, work, update):
    """The round's steps (see the module docstring)."""
    return [
        steps.Each('Work', work),
        steps.Combine('Aggregate', round_pipeline.AggregateFn(source,
                                                              options)),
        steps.Each('Roster', RosterFn(options, plan)),
        steps.Spread('ShareSpread'),
        steps.Each('ShareKeys', ShareKeysFn(source, options, self)),
        steps.Collect('Shares'),
        steps.Each('Relay', RelayFn(options, plan)),
        steps.Spread('MaskSpread'),
        steps.Each('Mask', MaskFn(source, options, self)),
        steps.Combine('MaskedSum', MaskedSumFn(source, options, self)),
        steps.Each('UnmaskRequest', UnmaskRequestFn(options, plan)),
        steps.Spread('UnmaskSpread'),
        steps.Each('Unmask', UnmaskFn(source, options, self)),
        steps.Collect('Responses'),
        steps.Each('Update', update),
    ]


# ---------------------------------------------------------------------------
# What every party reads: the round's parameters and the roster.


def _read_messages(path):
  data = storage.read_bytes(path)
  return [secagg.wire.from_bytes(line) for line in data.split(b'\n') if line]


def _write_messages(path, messages):
  storage.write_bytes(path, b'\n'.join(secagg.wire.to_bytes(m)
                                       for m in messages))


class _Cache:
  """`load(key)`, once per process and key: runners may make new DoFns for
  every element. Emptied when it holds more than `most`."""

  def __init__(self, most):
    self._most = most
    self._values = {}
    self._lock = threading.Lock()

  def get(self, key, load):
    with self._lock:
      if key not in self._values:
        if len(self._values) >= self._most:
          self._values.clear()
        self._values[key] = load(key)
      return self._values[key]


_FILES = _Cache(16)  # The round's parameters, roster, contributors.
_CLIENTS = _Cache(1 << 14)  # Clients' keys: each worker's share of a round.


class Round:
  """What every party of the round knows: its config and parameters."""

  def __init__(self, form, secure_round):
    fields = json.loads(storage.read_bytes(secure_round.round_path))
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
  return tuple(_FILES.get(secure_round.roster_path, _read_messages))


def contributors_of(secure_round):
  """Whose masked inputs the sum holds, as the Unmask request published."""
  return _FILES.get(secure_round.contributors_path,
                    lambda path: json.loads(storage.read_bytes(path)))


# ---------------------------------------------------------------------------
# The clients' steps.


def _secret(secure_round, client_id):
  """The client's own secret: read, or made once (create-only)."""
  path = storage.join(secure_round.secrets_directory,
                      client_data.file_name(client_id) + '.key')
  try:
    return storage.read_bytes(path)
  except storage.NotFound:
    pass
  try:
    storage.create_only(path, os.urandom(SECRET_BYTES))
  except storage.AlreadyExists:
    pass  # Another worker made it first: use theirs.
  return storage.read_bytes(path)


def client_of(the_round, client_id):
  """The client's draws in this round: made once per process (its keys
  are the costly part), the same on every worker."""
  return _CLIENTS.get((the_round.paths.round_path, client_id),
                     lambda _: Client(the_round, client_id))


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

  def share_keys(self):
    return secagg.share_keys(self.keys, roster(self.round.paths),
                             self._rng.child('share'))

  @functools.cached_property
  def sharing_state(self):
    """Its state after step 2, redrawn without encrypting."""
    return secagg.sharing_state(self.keys, roster(self.round.paths),
                                self._rng.child('share'))

  def inbox(self):
    """The shares others sent it, as the server relayed them."""
    return _read_messages(self.round.paths.inbox_path(self.id))

  def keep(self, masking):
    """Keeps its step-3 state (the shares it holds) for step 4."""
    storage.write_bytes(self.round.paths.held_path(self.id), json.dumps({
        'share_senders': list(masking.share_senders),
        'held': [[u, hex(seed), hex(key)]
                 for u, (seed, key) in masking.held_shares.items()]}).encode())

  def kept(self):
    """Its step-3 state, as `keep` left it."""
    fields = json.loads(storage.read_bytes(
        self.round.paths.held_path(self.id)))
    held = {u: (int(seed, 16), int(key, 16)) for u, seed, key in
            fields['held']}
    return secagg.MaskingState(self.sharing_state,
                               tuple(fields['share_senders']), held)


class _ClientStepFn(round_pipeline._FormFn, beam.DoFn):  # pylint: disable=protected-access
  """A client step over a batch: writes the batch's messages to one file of
  the attempt and yields its path (a round of n clients sends n*k shares:
  they travel as files, not as pipeline values)."""

  STEP = None  # The messages' directory under the attempt's secure/.
  # Whether a client may fail this step and the round go on without it (it
  # goes silent, as a device that drops out does).
  MAY_GO_SILENT = False

  def __init__(self, source, storage_options, secure_round):
    self._source = source
    self._storage_options = storage_options
    self._secure_round = secure_round

  def process(self, tasks):
    the_round = round_of(self.form(), self._secure_round)
    messages, silent = [], {}
    for task in tasks:
      try:
        messages.extend(self.step(client_of(the_round, task.client_id)))
      except Exception as e:  # pylint: disable=broad-except
        if not self.MAY_GO_SILENT:
          raise
        silent[task.client_id] = round_pipeline._message(e)  # pylint: disable=protected-access
    path = storage.join(self._secure_round.directory, self.STEP,
                        client_data.file_name(tasks[0].client_id) + '.jsonl')
    _write_messages(path, messages)
    paths = [path]
    if silent:
      paths.append(path[:-len('.jsonl')] + SILENT_SUFFIX)
      storage.write_bytes(paths[-1], json.dumps(silent).encode())
    yield paths

  def step(self, client):
    raise NotImplementedError


class ShareKeysFn(_ClientStepFn):

  STEP = 'shares'

  def step(self, client):
    return client.share_keys()[1]


class UnmaskFn(_ClientStepFn):
  """Each contributor's shares for the contributor list; a contributor
  whose step fails goes silent (its input stays in the sum; the others'
  shares unmask it if t of its holders answer)."""

  STEP = 'responses'
  MAY_GO_SILENT = True

  def step(self, client):
    return [secagg.unmasking_shares(client.kept(),
                                    contributors_of(self._secure_round))]


class MaskFn(_ClientStepFn):
  """Each client's kept secure input plus its masks: a partial masked sum
  (flat uint64 arrays, and whose inputs it holds)."""

  def process(self, tasks):
    form = self.form()
    the_round = round_of(form, self._secure_round)
    total = secagg.aggregation.zero(the_round.config)
    for task in tasks:
      value = tf.nest.pack_sequence_as(
          form.secure_update_spec, tensor_io.read_arrays(
              self._secure_round.input_path(task.client_id), 'secure input'))
      client = client_of(the_round, task.client_id)
      masking, masked = secagg.masked_input(client.sharing_state, value,
                                            client.inbox())
      client.keep(masking)
      total = secagg.aggregation.accumulate(the_round.config, total, masked)
    yield [list(total.values), sorted(total.contributors)]


class MaskedSumFn(round_pipeline._FormFn, beam.CombineFn):  # pylint: disable=protected-access
  """The aggregation tier's part: adds masked inputs modulo m; it never
  sees an input."""

  def __init__(self, source, storage_options, secure_round):
    self._source = source
    self._storage_options = storage_options
    self._secure_round = secure_round

  def create_accumulator(self):
    return None

  def add_input(self, accumulator, partial):
    return self.merge_accumulators([accumulator, partial])

  def merge_accumulators(self, accumulators):
    config = round_of(self.form(), self._secure_round).config
    total = None
    for partial in accumulators:
      if partial is None:
        continue
      more = secagg.MaskedSum(tuple(partial[0]), frozenset(partial[1]))
      total = more if total is None else secagg.aggregation.merge(
          config, total, more)
    return None if total is None else [list(total.values),
                                       sorted(total.contributors)]

  def extract_output(self, accumulator):
    return accumulator


# ---------------------------------------------------------------------------
# The server's steps after each combine.


class _ServerStepFn(steps.AnyOutput, beam.DoFn):

  def __init__(self, storage_options, plan):
    self._storage_options = storage_options
    self._plan = plan

  def _fail(self, stats, message):
    """Ends the round here: records why (no stage after this one runs)."""
    outcome = round_pipeline.round_stats(stats, len(self._plan.sampled))
    outcome['failed'] = f'secure aggregation: {message}'
    round_pipeline.write_outcome(self._plan.attempt, outcome)

  def _threshold(self):
    """The round's threshold, as `SecureRound.start` published it."""
    return json.loads(storage.read_bytes(
        self._plan.secure.round_path))['threshold']

  def _batches(self, clients):
    """The round's batches, each with only `clients`."""
    for tasks in self._plan.batches:
      tasks = [t for t in tasks if t.client_id in clients]
      if tasks:
        yield tasks


class RosterFn(_ServerStepFn):
  """Keeps the plain aggregate; publishes the advertisements of the clients
  whose work succeeded; sends their batches on to share keys."""

  def process(self, aggregate):
    storage.configure(self._storage_options)
    arrays, stats = aggregate
    secure = self._plan.secure
    advertisements = stats.pop('advertisements')
    storage.write_bytes(secure.aggregate_path, tensor_io.encode(arrays or []))
    storage.write_bytes(secure.stats_path, json.dumps(stats).encode())
    threshold = self._threshold()
    if len(advertisements) < threshold:
      self._fail(stats, f'{len(advertisements)} clients advertised keys, '
                        f'fewer than the threshold {threshold}')
      return
    storage.write_bytes(secure.roster_path,
                        '\n'.join(advertisements).encode())
    clients = {secagg.wire.from_bytes(a).sender for a in advertisements}
    yield from self._batches(clients)


class RelayFn(_ServerStepFn):
  """Writes each client's inbox (the shares addressed to it)."""

  def process(self, share_files):
    storage.configure(self._storage_options)
    secure = self._plan.secure
    shares = [m for path in share_files for m in _read_messages(path)]
    # Every client of the roster shared its keys (a failed step fails the
    # round), even one with no peer to send shares to.
    senders = sorted(a.sender for a in roster(secure))
    inbox = secagg.relay_shares(shares, senders)
    for client, messages in inbox.items():
      _write_messages(secure.inbox_path(client), messages)
    yield from self._batches(set(senders))


class UnmaskRequestFn(_ServerStepFn):
  """Keeps the masked total for the Update and asks the contributors to
  unmask it."""

  def process(self, total):
    storage.configure(self._storage_options)
    values, contributors = total
    secure = self._plan.secure
    storage.write_bytes(secure.masked_path, tensor_io.encode(values))
    storage.write_bytes(secure.contributors_path,
                        json.dumps(contributors).encode())
    threshold = self._threshold()
    if len(contributors) < threshold:
      stats = json.loads(storage.read_bytes(secure.stats_path))
      self._fail(stats, f'{len(contributors)} clients sent masked inputs, '
                        f'fewer than the threshold {threshold}')
      return
    yield from self._batches(set(contributors))
