"""Between its work and its masking a client keeps its U in the attempt's
files, as a device keeps its state: the pipeline never carries a client's
input. A batch's clients share a few files, since on object storage each
file is a request."""

import itertools

import tensorflow as tf

from beam_runner.pipeline import round as round_pipeline
from beam_runner.secure import clients
from beam_runner.secure import messages
from beam_runner.worker_io import tensor_io
from canonical import secagg
from canonical.secagg import sums as secure_sums

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
    the_round = messages.round_of(form, secure_round)
    plain, secure_part = form.split_update(update)
    client = clients.client_of(the_round, client_id)
    try:
      value = secure_sums.client_inputs(
          form.secure_sums, the_round.parameters, secure_part,
          f'client {client_id!r}', stddevs=the_round.noise_stddevs,
          secret=client.noise_source() if form.has_client_noise else None)
    except secure_sums.SecureSumError as e:
      raise round_pipeline.ClientDropped(round_pipeline.SECURE_INPUT,
                                         str(e)) from e
    if secure_round.malicious_server:
      try:
        clients.claim_round(secure_round, client_id, value)
      except secagg.ProtocolViolationError as e:
        raise round_pipeline.ClientDropped(round_pipeline.SECURE_REPLAYED,
                                           str(e)) from e
    advertisement = client.advertisement
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


def read_kept(secure_round, form, batch):
  """(client id, U's plain part, the secure input) of each client whose
  U the batch's `Keeper` kept, in the order it kept them."""
  spec = form.client_update_spec
  plain_leaves = len(tf.nest.flatten(spec))
  secure_leaves = len(tf.nest.flatten(form.secure_update_spec))
  for part in itertools.count():
    path = secure_round.kept_path(batch, part)
    arrays, fields = _KEPT_CODER.decode(secure_round.storage.read_bytes(path))
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
