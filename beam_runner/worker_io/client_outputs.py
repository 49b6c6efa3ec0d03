"""Per-client outputs (the form's Y, less any client state): written by the
clients' workers, read lazily by whoever asks for them.

A round's outputs live in its attempt, beside its client states:

    rounds/<r>/<attempt>/client_outputs/<batch>-<part>.tfrecord
    rounds/<r>/<attempt>/client_outputs.json    the index (committed JSON)

Each worker element writes its successful clients' outputs as parts of
about PART_BYTES (a batch is never held in memory whole, and thousands of
clients make a few files, not thousands), one TFRecord per client: its id
and its flat tensors (`tensor_io`, no pickle). The driver never sees the
values while the round runs: only the part names and the ids in each. It
writes the index (the outputs' structure, each part, its record count, and
which of its clients survived the round: a secure round may drop a client
after its work) before the round commits, and the commit records the
index's SHA-256. So a round's
outputs are visible with the round or not at all, and read back as they
were written: TFRecord's and tensor_io's CRCs catch flipped bits, the
index's counts and ids a part cut at a record boundary or swapped; either
is an error naming the file.

Reading is lazy: `RoundOutputs` is a mapping client id -> value that reads
one part at a time, when a value in it is asked for. The index's structure
(TensorFlow's StructuredValue, checked as a saved form's are) lets a run
directory be read without its form.
"""

import base64
import collections.abc

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import struct_pb2

from beam_runner.worker_io import tensor_io
from beam_runner.worker_io import tfrecords
from canonical.core import types as ft
from canonical import form as form_lib
from canonical import io as storage_lib
from canonical.saving import structure_coding

DIRECTORY = 'client_outputs'
INDEX_FILE = 'client_outputs.json'
PART_BYTES = 4 << 20
_SUFFIX = '.tfrecord'


def check_spec(form):
  """FormError (before any round) if the form's outputs cannot be kept:
  only tensors can (the compiler refuses datasets; a hand-made form may
  not)."""
  spec = form.client_output_spec
  for leaf in tf.nest.flatten(spec):
    if not isinstance(leaf, tf.TensorSpec):
      raise form_lib.FormError(
          f'Form {form.name!r} returns per-client outputs '
          f'{ft.describe(spec)}, holding {leaf!r}; the Beam runner keeps '
          'only tensors as outputs.')


def _encode(client_id, outputs):
  name = np.array(str(client_id).encode('utf-8', 'surrogatepass'),
                  dtype=object)
  return tensor_io.encode([name] + tensor_io.flatten(outputs))


class Writer:
  """A batch's outputs, in parts of about PART_BYTES under the attempt's
  directory; `close` returns `[[part file name, [client ids]], ...]`."""

  def __init__(self, attempt, batch):
    self._attempt = attempt
    self._batch = batch
    self._records, self._clients, self._bytes = [], [], 0
    self._parts = []

  def add(self, client_id, outputs):
    record = _encode(client_id, outputs)
    self._records.append(record)
    self._clients.append(client_id)
    self._bytes += len(record)
    if self._bytes >= PART_BYTES:
      self._write()

  def close(self):
    if self._records:
      self._write()
    return self._parts

  def _write(self):
    name = f'{self._batch}-{len(self._parts):05d}{_SUFFIX}'
    self._attempt.storage.write_bytes(
        storage_lib.join(self._attempt.directory, DIRECTORY, name),
        tfrecords.file_bytes(self._records))
    self._parts.append([name, self._clients])
    self._records, self._clients, self._bytes = [], [], 0


def index(spec, parts, sampled, dropped):
  """The index of a round's outputs: their structure `spec`, and the parts
  in the order of the sampled clients, each with its record count and the
  clients that survived."""
  position = {client: i for i, client in enumerate(sampled)}
  dropped = set(dropped)
  entries = []
  for name, clients in sorted(parts, key=lambda p: (position[p[1][0]], p[0])):
    kept = [c for c in clients if c not in dropped]
    if kept:
      entries.append({'file': name, 'records': len(clients), 'clients': kept})
  structure = structure_coding.encode(spec).SerializeToString(
      deterministic=True)
  return {'structure': base64.b64encode(structure).decode(),
          'parts': entries}


def _structure(run, round_number, index_fields):
  """The outputs' structure an index recorded; RunDirError if unusable."""
  try:
    value = struct_pb2.StructuredValue()
    value.ParseFromString(base64.b64decode(index_fields['structure'],
                                           validate=True))
    return structure_coding.decode(value)
  except Exception as e:  # pylint: disable=broad-except
    raise run.damaged_output(
        storage_lib.join(run.attempt(round_number).directory, INDEX_FILE),
        round_number, f'its structure cannot be read ({type(e).__name__})'
        ) from None


class RoundOutputs(collections.abc.Mapping):
  """One committed round's outputs: client id -> value (the form's output
  structure of tensors), in the order the clients were sampled. Values are
  read when asked for, one part file at a time (the last one read is kept);
  a damaged file is a RunDirError naming it. `spec`: the structure to give
  them (default: the one the round recorded)."""

  def __init__(self, run, round_number, spec=None):
    self._run = run
    self.round = round_number
    attempt = run.attempt(round_number)
    self.directory = storage_lib.join(attempt.directory, DIRECTORY)
    self.index_path = storage_lib.join(attempt.directory, INDEX_FILE)
    fields = run.client_outputs_index(round_number)
    self._spec = spec if spec is not None else _structure(run, round_number,
                                                          fields)
    self._parts = fields['parts']
    self._part_of = {c: i for i, part in enumerate(self._parts)
                     for c in part['clients']}
    self._cached = (None, None)

  def __getitem__(self, client_id):
    number = self._part_of.get(client_id)
    if number is None:
      raise KeyError(client_id)
    if self._cached[0] != number:
      self._cached = (number, self._read(self._parts[number]))
    return self._cached[1][client_id]

  def __contains__(self, client_id):
    return client_id in self._part_of  # Reads no part.

  def __iter__(self):
    for part in self._parts:
      yield from part['clients']

  def __len__(self):
    return len(self._part_of)

  @property
  def files(self):
    """The part files, in order."""
    return [storage_lib.join(self.directory, p['file']) for p in self._parts]

  def _read(self, part):
    path = storage_lib.join(self.directory, part['file'])
    damaged = lambda problem: self._run.damaged_output(path, self.round,
                                                       problem)
    try:
      records = tfrecords.records_of(self._run.storage.read_bytes(path))
    except storage_lib.NotFound:
      raise damaged('missing') from None
    except tf.errors.DataLossError as e:
      raise damaged(f'a record is corrupt ({e.message.splitlines()[0]})'
                    ) from None
    if len(records) != part['records']:
      raise damaged(f'it holds {len(records)} records, its round\'s index '
                    f'{part["records"]}')
    kept, values = set(part['clients']), {}
    for number, record in enumerate(records):
      try:
        arrays = tensor_io.decode(record)
        client_id = arrays[0].item().decode('utf-8', 'surrogatepass')
        if client_id in kept:
          values[client_id] = tensor_io.pack(self._spec, arrays[1:],
                                             what=f'client {client_id!r}\'s '
                                             'outputs')
      except (ValueError, IndexError, AttributeError,
              tf.errors.InvalidArgumentError) as e:
        raise damaged(f'record {number}: {e}') from None
    missing = kept - set(values)
    if missing:
      raise damaged(f'no outputs of client {sorted(missing)[0]!r}, which '
                    'its round\'s index names')
    return values

  def __repr__(self):
    return (f'RoundOutputs(round {self.round}, {len(self)} clients, '
            f'{self.directory})')


class ClientOutputs(collections.abc.Mapping):
  """A run's per-client outputs: round number -> `RoundOutputs`, for the
  rounds committed when it was made (1..last); nothing is read until a
  round's values are. `spec`: as `RoundOutputs`'."""

  def __init__(self, run, spec=None):
    self._run = run
    self._spec = spec
    self._rounds = [r for r in run.committed_rounds() if r > 0]

  def __getitem__(self, round_number):
    if round_number not in self._rounds:
      raise KeyError(round_number)
    return RoundOutputs(self._run, round_number, self._spec)

  def __contains__(self, round_number):
    return round_number in self._rounds

  def __iter__(self):
    return iter(self._rounds)

  def __len__(self):
    return len(self._rounds)

  @property
  def output_dir(self):
    return self._run.directory

  def __repr__(self):
    rounds = f'rounds 1-{self._rounds[-1]}' if self._rounds else 'no rounds'
    return f'ClientOutputs({rounds} of {self._run.directory})'

