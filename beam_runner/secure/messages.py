"""The protocol's messages travel as files of the attempt, not as pipeline
values (a round of n clients sends n*k shares). What every party reads of
them is read once per worker: runners may make new DoFns for every
element."""

import functools
import json
import threading

import tensorflow as tf

from beam_runner.worker_io import client_data
from canonical import secagg
from canonical.secagg import sums as secure_sums

# A batch's clients that failed a step they may skip: {client: why}.
SILENT_SUFFIX = '.silent.json'


def batch_key(tasks):
  """A batch's name in the protocol's files: its first client's."""
  return client_data.file_name(tasks[0].client_id)


def read_lines(storage, path):
  return [line for line in storage.read_bytes(path).split(b'\n') if line]


def read_messages(storage, path):
  return [secagg.wire.from_bytes(line) for line in read_lines(storage, path)]


def write_messages(storage, path, messages):
  storage.write_bytes(path, b'\n'.join(secagg.wire.to_bytes(m)
                                        for m in messages))


def read_json(storage, path):
  return json.loads(storage.read_bytes(path))


def silent_clients(storage, paths):
  """{client: why} of the clients that went silent in a client step."""
  silent = {}
  for path in paths:
    if path.endswith(SILENT_SUFFIX):
      silent.update(read_json(storage, path))
  return silent


class Cache:
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


_FILES = Cache(16)  # The round's parameters, roster, contributors.


class Round:
  """What every party of the round knows: its config and parameters."""

  def __init__(self, form, secure_round):
    fields = json.loads(secure_round.storage.read_bytes(
        secure_round.round_path))
    self.parameters = fields['parameters']
    # A round started before noised sums has none.
    self.noise_stddevs = fields.get('noise_stddevs') or [None] * len(
        self.parameters)
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
      read_messages(secure_round.storage, path)))


def contributors_of(secure_round):
  """Whose masked inputs the sum holds, as the Unmask request published."""
  return _FILES.get(secure_round.contributors_path,
                    functools.partial(read_json, secure_round.storage))


def sharing_of(secure_round):
  """{'senders': who shared keys (U2), 'silent': {client: why not}}, as
  the Relay published."""
  return _FILES.get(secure_round.sharing_path,
                    functools.partial(read_json, secure_round.storage))


def signatures_of(secure_round):
  """{contributor: its signature of the contributor list}, as the server
  published them."""
  return _FILES.get(secure_round.signatures_path, lambda path: {
      m.sender: m.signature for m in read_messages(secure_round.storage,
                                                   path)})
