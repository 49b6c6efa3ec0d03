"""A round with secure sums as Beam stages: the masking protocol of
`canonical.secagg` between the clients (their batches, on any worker) and the
server (single steps between combines).

    batches -> Advertise: each client's public keys for the round
      -> Collect -> Roster (server): writes the roster, re-emits the batches
      -> ShareKeys: each client's Shamir shares, encrypted for each peer
      -> Collect -> Relay (server): writes each batch's inbox, re-emits them
      -> Work (round_pipeline.WorkFn): U's plain part into the accumulator,
         its secure part masked and added modulo m
      -> Aggregate (CombineFn): the form's merge, and modular addition
      -> Unmask request (server): writes the masked total and whose inputs it
         holds, re-emits the batches (or fails the round below threshold)
      -> Unmask: each contributor's shares for that list
      -> Collect -> Update (round_pipeline.UpdateFn): unmasks the sums, then
         report and update as in any round

The aggregation tier, and every worker that is not the client itself, only
ever handles public keys, ciphertexts, masked inputs and their sums. A client
draws its keys and masks from its own secret (one 32-byte file per client in
the run directory, `client_secrets/`, created on first use) and the round,
so each step can recompute its earlier draws on whatever worker runs it. In
this simulation the run directory is where the clients' devices keep their
secrets; no server step reads them. Server messages travel as files of the
attempt (`secure/`), deleted when the round commits. Clients whose work
fails after sharing keys drop out as the protocol allows: the survivors
reveal their mask keys and the sums hold the others' inputs exactly.
"""

import json
import os
import threading

import apache_beam as beam
import numpy as np
import tensorflow as tf

from beam_runner import client_data
from beam_runner import tensor_io
from canonical import secagg
from canonical import secure_sums
from canonical import storage

SECRET_BYTES = 32
SECRETS_DIR = 'client_secrets'
SECURE_INPUT = 'secure input out of range'


class SecureRound:
  """Where one attempt's protocol files are (small; pickled to workers)."""

  def __init__(self, attempt, run_directory):
    self.directory = attempt.secure_directory
    self.round_path = storage.join(self.directory, 'round.json')
    self.roster_path = storage.join(self.directory, 'roster.jsonl')
    self.contributors_path = storage.join(self.directory,
                                          'contributors.json')
    self.total_path = storage.join(self.directory, 'masked_total.tensors')
    self.secrets_directory = storage.join(run_directory, SECRETS_DIR)
    self.round_id = f'{attempt.round}/{attempt.id}'

  def inbox_path(self, batch):
    return storage.join(self.directory, f'inbox-{batch:06d}.jsonl')


# ---------------------------------------------------------------------------
# The server's side: files every client step reads.


def start(form, secure_round, state, num_clients, threshold=None):
  """Writes the round's public parameters (parameters, moduli, threshold),
  from the server state S and the number of sampled clients."""
  parameters = secure_sums.flat_parameters(form.secure_parameters(state))
  moduli = secure_sums.round_moduli(form.secure_sums, parameters, num_clients,
                                    form.secure_update_spec)
  if threshold is None:
    threshold = secure_sums.default_threshold(num_clients)
  storage.write_bytes(secure_round.round_path, json.dumps({
      'parameters': parameters, 'threshold': threshold,
      'moduli': [tf.nest.flatten(m) for m in moduli]}).encode())


def _write_messages(path, messages):
  storage.write_bytes(path, b'\n'.join(secagg.wire.to_bytes(m)
                                       for m in messages))


def _read_messages(path):
  data = storage.read_bytes(path)
  return [secagg.wire.from_bytes(line) for line in data.split(b'\n') if line]


_CACHE = {}
_CACHE_LOCK = threading.Lock()


def _cached(path, load):
  """`load(path)`, once per process while the path stays the same: runners
  may make new DoFns for every element."""
  with _CACHE_LOCK:
    if path not in _CACHE:
      if len(_CACHE) > 16:
        _CACHE.clear()
      _CACHE[path] = load(path)
    return _CACHE[path]


class Round:
  """What every party of the round knows: its config and parameters."""

  def __init__(self, form, secure_round):
    fields = json.loads(storage.read_bytes(secure_round.round_path))
    self.parameters = fields['parameters']
    moduli = tuple(tf.nest.pack_sequence_as(spec, flat) for spec, flat in zip(
        form.secure_update_spec, fields['moduli']))
    self.config = secure_sums.round_config(
        form.secure_update_spec, moduli, fields['threshold'],
        secure_round.round_id)
    self.paths = secure_round


def round_of(form, secure_round):
  return _cached(secure_round.round_path,
                 lambda _: Round(form, secure_round))


def roster(secure_round):
  return tuple(_cached(secure_round.roster_path, _read_messages))


# ---------------------------------------------------------------------------
# The clients' side.


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


class Client:
  """One client's draws in one round, recomputed by each step from its
  secret: the same keys and shares on every worker."""

  def __init__(self, the_round, client_id):
    paths = the_round.paths
    self._rng = secagg.SeededRandom(_secret(paths, client_id)).child(
        'round', paths.round_id)
    self.round = the_round
    self.id = client_id
    self.keys, self.advertisement = secagg.advertise_keys(
        client_id, the_round.config, self._rng.child('advertise'))

  def share_keys(self, the_roster):
    return secagg.share_keys(self.keys, the_roster, self._rng.child('share'))

  def receive(self, the_roster, inbox):
    """(its step-2 state, redrawn without encrypting; the shares others
    sent it)."""
    sharing = secagg.sharing_state(self.keys, the_roster,
                                   self._rng.child('share'))
    return sharing, [m for m in inbox if m.recipient == self.id]


class _ClientStepFn(beam.DoFn):
  """A client step over a batch: yields the batch's messages as one list."""

  def __init__(self, source, storage_options, secure_round):
    self._source = source
    self._storage_options = storage_options
    self._secure_round = secure_round
    self._form = None

  def setup(self):
    storage.configure(self._storage_options)
    self._form = self._source.get()

  def infer_output_type(self, input_type):
    del input_type
    return beam.typehints.Any

  def process(self, element):
    if self._form is None:
      self.setup()
    batch, tasks = element
    the_round = round_of(self._form, self._secure_round)
    messages = []
    for task in tasks:
      messages.extend(self.step(the_round, batch, Client(the_round,
                                                         task.client_id)))
    yield [secagg.wire.to_bytes(m) for m in messages]

  def step(self, the_round, batch, client):
    raise NotImplementedError


class AdvertiseFn(_ClientStepFn):

  def step(self, the_round, batch, client):
    return [client.advertisement]


class ShareKeysFn(_ClientStepFn):

  def step(self, the_round, batch, client):
    _, outgoing = client.share_keys(roster(self._secure_round))
    return outgoing


class UnmaskFn(_ClientStepFn):
  """Each contributor's shares for the contributor list."""

  def step(self, the_round, batch, client):
    contributors = _cached(self._secure_round.contributors_path,
                           lambda p: json.loads(storage.read_bytes(p)))
    if client.id not in contributors:
      return []
    sharing, mine = client.receive(
        roster(self._secure_round),
        _cached(self._secure_round.inbox_path(batch), _read_messages))
    masking = secagg.receive_shares(sharing, mine)
    return [secagg.unmasking_shares(masking, contributors)]


class Masker:
  """The Work step's part: a client's secure input, masked, into a sum."""

  def __init__(self, secure_round):
    self._secure_round = secure_round

  def zero(self, form):
    return secagg.aggregation.zero(round_of(form, self._secure_round).config)

  def add(self, form, total, batch, client_id, secure_part):
    """`total` plus the client's masked input; `secure_sums.SecureSumError`
    for an input out of range (the client drops out)."""
    the_round = round_of(form, self._secure_round)
    value = secure_sums.client_inputs(form.secure_sums, the_round.parameters,
                                      secure_part, f'client {client_id!r}')
    sharing, mine = Client(the_round, client_id).receive(
        roster(self._secure_round),
        _cached(self._secure_round.inbox_path(batch), _read_messages))
    _, masked = secagg.masked_input(sharing, value, mine)
    return secagg.aggregation.accumulate(the_round.config, total, masked)

  def merge(self, form, a, b):
    return secagg.aggregation.merge(
        round_of(form, self._secure_round).config, a, b)

  def unmask(self, form, total, responses):
    """The secure sums (in their dtypes) from the masked total."""
    the_round = round_of(form, self._secure_round)
    the_roster = roster(self._secure_round)
    sharers = sorted(a.sender for a in the_roster)
    flat = secagg.unmask(the_round.config, the_roster, sharers, total,
                         responses)
    return secure_sums.as_results(form.secure_sums, flat,
                                  form.secure_update_spec)


# ---------------------------------------------------------------------------
# The server's steps between combines.


class CollectFn(beam.CombineFn):
  """Concatenates lists of encoded messages."""

  def create_accumulator(self):
    return []

  def add_input(self, accumulator, messages):
    accumulator.extend(messages)
    return accumulator

  def merge_accumulators(self, accumulators):
    return [m for a in accumulators for m in a]

  def extract_output(self, accumulator):
    return accumulator


class RosterFn(beam.DoFn):
  """Writes the roster (every advertisement); re-emits the batches."""

  def __init__(self, storage_options, secure_round, batches):
    self._storage_options = storage_options
    self._secure_round = secure_round
    self._batches = batches

  def process(self, encoded):
    storage.configure(self._storage_options)
    storage.write_bytes(self._secure_round.roster_path, b'\n'.join(encoded))
    yield from enumerate(self._batches)


class RelayFn(RosterFn):
  """Writes each batch's inbox (the shares addressed to its clients)."""

  def process(self, encoded):
    storage.configure(self._storage_options)
    shares = [secagg.wire.from_bytes(m) for m in encoded]
    senders = sorted({m.sender for m in shares} | {
        t.client_id for b in self._batches for t in b})
    inbox = secagg.relay_shares(shares, senders)
    for batch, tasks in enumerate(self._batches):
      _write_messages(self._secure_round.inbox_path(batch), [
          m for t in tasks for m in inbox.get(t.client_id, ())])
    yield from enumerate(self._batches)


def write_total(secure_round, arrays, stats):
  """The Aggregate's result, for the Update after the unmasking step."""
  storage.write_bytes(secure_round.contributors_path,
                      json.dumps(stats['contributors']).encode())
  storage.write_bytes(secure_round.total_path, tensor_io.encode(arrays or []))
  storage.write_bytes(secure_round.total_path + '.json',
                      json.dumps(stats).encode())


def read_total(secure_round):
  """(arrays or None, stats) as `write_total` wrote them."""
  arrays = tensor_io.decode(storage.read_bytes(secure_round.total_path))
  stats = json.loads(storage.read_bytes(secure_round.total_path + '.json'))
  return arrays or None, stats


def masked_sum(values, contributors):
  return secagg.MaskedSum(tuple(np.asarray(v, np.uint64) for v in values),
                          frozenset(contributors))
