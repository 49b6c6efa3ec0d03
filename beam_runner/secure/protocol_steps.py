"""The protocol's parties as Beam transforms: the clients' steps (each over
a batch, on whatever worker the batch lands), the aggregation tier's
CombineFn, and the server's steps after each combine. Their messages go
through the round's files; the pipeline carries only paths and batches."""

import collections
import json

import apache_beam as beam

from beam_runner.pipeline import round as round_pipeline
from beam_runner.pipeline import steps
from beam_runner.secure import clients
from beam_runner.secure import messages
from beam_runner.worker_io import tensor_io
from canonical import io as storage_lib
from canonical import secagg


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
    the_round = messages.round_of(self.form(), self._secure_round)
    kept = self.batch_state(key)
    sent, silent = [], {}
    for task in tasks:
      try:
        sent.extend(self.step(clients.client_of(the_round, task.client_id),
                              kept))
      except Exception as e:  # pylint: disable=broad-except
        silent[task.client_id] = round_pipeline.error_message(e)
    path = storage_lib.join(self._secure_round.directory, self.STEP,
                        key + '.jsonl')
    storage = self._secure_round.storage
    messages.write_messages(storage, path, sent)
    paths = [path]
    if silent:
      paths.append(path[:-len('.jsonl')] + messages.SILENT_SUFFIX)
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


class _ContributorStepFn(_ClientStepFn):
  """A step of the contributors, from the shares each holds (its batch's
  held file, written when it masked)."""

  def batch_state(self, key):
    return messages.read_json(self._secure_round.storage,
                              self._secure_round.held_path(key))


class UnmaskFn(_ContributorStepFn):
  """Each contributor's shares for the contributor list (against a
  malicious server, only for the list it signed, carrying t signatures of
  its members); a contributor whose step fails goes silent (its input stays
  in the sum; the others' shares unmask it if t of its holders answer)."""

  STEP = 'responses'

  def step(self, client, kept):
    secure_round = self._secure_round
    signatures = messages.signatures_of(secure_round) if (
        secure_round.malicious_server) else None
    return [secagg.unmasking_shares(client.kept(kept[client.id]),
                                    messages.contributors_of(secure_round),
                                    signatures)]


class SignFn(_ContributorStepFn):
  """The consistency check: each contributor signs the contributor list,
  after the checks it makes before unmasking, and records it beside its
  secret (it signs one list a round)."""

  STEP = 'signatures'

  def step(self, client, kept):
    contributors = messages.contributors_of(self._secure_round)
    signed = secagg.sign_contributors(client.kept(kept[client.id]),
                                      contributors)
    clients.record_signed(self._secure_round, client.id, contributors)
    return [signed]


class MaskFn(_ClientStepFn):
  """Each client's kept secure input plus its masks, and the plain part of
  its U: a partial aggregate (round_pipeline.AggregateFn's) and a partial
  masked sum (flat uint64 arrays, and whose inputs it holds). A client
  whose step fails drops out: neither part of its U is in any sum."""

  def process(self, batch):
    key, tasks = batch
    form = self.form()
    the_round = messages.round_of(form, self._secure_round)
    inbox = collections.defaultdict(list)
    for message in messages.read_messages(
        self._secure_round.storage, self._secure_round.inbox_path(key)):
      inbox[message.recipient].append(message)
    held = {}
    accumulator, stats = None, round_pipeline.empty_stats()
    total = secagg.aggregation.zero(the_round.config)
    masked_bits = self._secure_round.masked_bits(form)
    for client_id, plain, value in self._kept(form, key, tasks, stats):
      try:
        client = clients.client_of(the_round, client_id)
        masking, masked = secagg.masked_input(client.sharing_state, value,
                                              inbox[client_id])
      except Exception as e:  # pylint: disable=broad-except
        _drop_masking(stats, client_id, e)
        continue
      held[client_id] = clients.held_fields(masking)
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
                           round_pipeline.error_message(error)])


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
    config = messages.round_of(self.form(), self._secure_round).config
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
    stats = messages.read_json(self._storage, secure.work_stats_path)
    for client, why in sorted(messages.read_json(
        self._storage, secure.sharing_path)['silent'].items()):
      stats['dropped'].append([client, round_pipeline.SECURE_SHARING, why])
    if masking is not None:
      round_pipeline.merge_stats(stats, masking)
    return stats

  def _batches(self, client_ids):
    """The round's batches, each with only `client_ids`, and named by its
    first client (its files keep that name as clients drop out)."""
    for tasks in self._plan.batches:
      key = messages.batch_key(tasks)
      tasks = [t for t in tasks if t.client_id in client_ids]
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
    advertised = {secagg.wire.from_bytes(a).sender for a in advertisements}
    yield from self._batches(advertised)


class RelayFn(_ServerStepFn):
  """Publishes who shared keys (U2: the roster less the clients that went
  silent) and writes each one's inbox (the shares addressed to it)."""

  def process(self, share_files):
    secure = self._plan.secure
    silent = messages.silent_clients(self._storage, share_files)
    # Each share as its sender wrote it: relayed as it came, not re-encoded
    # (an identical copy of a message is relayed once).
    line_of = {secagg.wire.from_bytes(line): line for path in share_files
               if not path.endswith(messages.SILENT_SUFFIX)
               for line in messages.read_lines(self._storage, path)}
    # A client with no peer to send shares to shared its keys too.
    senders = sorted(a.sender for a in messages.roster(secure)
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
      secagg.check_connected(messages.round_of(self.form(), secure).config,
                             messages.roster(secure), contributors)
    except secagg.RoundFailedError as e:
      self._fail(stats, str(e))
      return
    yield from self._batches(set(contributors))


class SignaturesFn(_ServerStepFn):
  """Publishes the contributors' signatures of their list, if t or more
  signed, and asks the signers to unmask."""

  def process(self, signature_files):
    secure = self._plan.secure
    signatures = [m for path in signature_files
                  if not path.endswith(messages.SILENT_SUFFIX)
                  for m in messages.read_messages(self._storage, path)]
    threshold = self._threshold()
    if len(signatures) < threshold:
      silent = messages.silent_clients(self._storage, signature_files)
      why = '; '.join(f'{u}: {reason}' for u, reason in sorted(
          silent.items())[:3])
      self._fail(messages.read_json(self._storage, secure.stats_path),
                 f'{len(signatures)} contributors signed their list, fewer '
                 f'than the threshold {threshold}' + (
                     f' (e.g. {why})' if why else ''))
      return
    messages.write_messages(self._storage, secure.signatures_path, signatures)
    yield from self._batches({m.sender for m in signatures})
