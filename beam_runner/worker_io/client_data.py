"""Client data sources: where each worker reads the data of its clients.

A source lists its client ids, describes its element type, and reads one
client's data (a tf.data.Dataset, or a structure of tensors) by id. Two kinds:

- `InMemoryClientData`: a dict client id -> data in the driver process, for
  tests and the in-process runner (workers in other processes cannot see it).
- `TFRecordClientData`: a directory with one TFRecord file per client and a
  JSON description of the element type, written by `write_client_data`. Each
  record is a `tf.train.Example` holding the element's flat tensors, each
  serialized by `tf.io.serialize_tensor`; a dataset keeps its elements (and so
  its batching) record for record. The directory may be local or anywhere
  `canonical.io` reaches (s3://, gs://, ...): local files are read by
  TensorFlow directly, others as bytes parsed in TensorFlow.
"""

import hashlib
import itertools
import json
import os
import urllib.parse
import uuid
import weakref

import tensorflow as tf
from tensorflow.core.framework import tensor_pb2
from tensorflow.python.util import deprecation  # pylint: disable=g-direct-tensorflow-import

from beam_runner.worker_io import tfrecords
from canonical.core import types as ft
from canonical import errors
from canonical import io as storage_lib

SPEC_FILE = 'element_spec.json'
# {file name: bytes} of the client files as written: a file cut at a record
# boundary (TFRecord's CRCs catch the rest), or emptied, is then refused
# instead of read as a client with fewer examples. Directories without it
# (written before it) are read unchecked.
SIZES_FILE = 'client_sizes.json'
CLIENTS_DIR = 'clients'
_SUFFIX = '.tfrecord'

_REGISTRY = {}


class ClientDataError(errors.Error, ValueError):
  """Client data that does not fit the form, or cannot be read."""


# Longest file name (bytes) made by percent-encoding; longer ids, and the
# empty id, are named by a digest.
MAX_NAME_BYTES = 200
_DIGEST_MARK = '%%'  # Percent-encoding never makes it.


def file_name(client_id):
  """A file name for a client id (any string), distinct for distinct ids:
  its percent-encoding, reversible by `client_id_of`; for the empty id and
  ids that encode longer than MAX_NAME_BYTES, a readable prefix and a
  SHA-256 digest, not reversible (run directories record their ids)."""
  text = str(client_id)
  name = urllib.parse.quote(text, safe='')
  if not name or len(name) > MAX_NAME_BYTES:
    return name[:64] + _DIGEST_MARK + hashlib.sha256(
        text.encode('utf-8', 'surrogatepass')).hexdigest()
  return name.replace('.', '%2E') if name.strip('.') == '' else name


def client_id_of(name):
  """The client id a `file_name` encodes, or None for a digest name."""
  return None if _DIGEST_MARK in name else urllib.parse.unquote(name)


def _reversible_name(client_id):
  """The file name of a client of a client data directory (whose ids come
  from its file names); ClientDataError if the id has none."""
  name = file_name(client_id)
  if client_id_of(name) is None:
    raise ClientDataError(
        f'Client id {str(client_id)[:80]!r}'
        f'{"..." if len(str(client_id)) > 80 else ""} cannot name a file of '
        f'a client data directory: it is empty or longer than '
        f'{MAX_NAME_BYTES} bytes percent-encoded. Use a shorter id (in-memory '
        'client data takes any id).')
  return name


class InMemoryClientData:
  """A dict client id -> data (Dataset or tensors); ids become strings."""

  def __init__(self, data):
    by_id = {}
    for client_id, value in data.items():
      key = str(client_id)
      if key in by_id:
        raise ClientDataError(f'Client ids {client_id!r} and another id both '
                              f'read as {key!r}.')
      by_id[key] = value
    self._key = str(uuid.uuid4())
    self._data = by_id
    _REGISTRY[self._key] = by_id
    weakref.finalize(self, _REGISTRY.pop, self._key, None)

  def __getstate__(self):
    return {'_key': self._key, '_data': None}

  def _values(self):
    data = self._data if self._data is not None else _REGISTRY.get(self._key)
    if data is None:
      raise ClientDataError(
          'In-memory client data lives in the driver process and cannot reach '
          'this worker process: write it with beam_runner.write_client_data '
          'and pass the directory, or use the in-process runner.')
    return data

  def client_ids(self):
    return sorted(self._values())

  def describe(self):
    return f'in-memory client data ({len(self._values())} clients)'

  def check(self, spec):
    """Raises `ClientDataError` unless every client's data has type `spec`."""
    for client_id, value in sorted(self._values().items()):
      actual = ft.member_of(value)
      if not ft.same_member(actual, spec):
        raise ClientDataError(
            f'Client {client_id!r} of {self.describe()} has data of type '
            f'{ft.describe(actual)}, but the form takes client data '
            f'{ft.describe(spec)}.')

  def read(self, client_id, spec):
    del spec
    return self._values()[client_id]


class TFRecordClientData:
  """A directory of per-client TFRecord files (see `write_client_data`),
  read through `storage` (the default if None), which workers get with it."""

  def __init__(self, directory, storage=None):
    self.storage = storage or storage_lib.default()
    try:
      self.directory = self.storage.absolute(directory)
    except storage_lib.StorageError as e:
      raise ClientDataError(str(e)) from None
    spec_path = storage_lib.join(self.directory, SPEC_FILE)
    if storage_lib.is_local(self.directory) and not os.path.isdir(
        self.directory):
      raise ClientDataError(f'Client data directory {self.directory!r} does '
                            'not exist.')
    try:
      text = self.storage.read_bytes(spec_path)
    except storage_lib.NotFound:
      raise ClientDataError(
          f'{self.directory!r} is not a client data directory: it has no '
          f'{SPEC_FILE} (write one with beam_runner.write_client_data).'
      ) from None
    except storage_lib.StorageError as e:
      raise ClientDataError(f'Client data {self.directory!r}: {e}') from None
    try:
      self.spec = spec_from_json(json.loads(text))
    except (ValueError, KeyError, TypeError) as e:
      raise ClientDataError(f'{spec_path!r} does not describe an element '
                            f'type: {type(e).__name__}: {e}') from None
    sizes_path = storage_lib.join(self.directory, SIZES_FILE)
    try:
      self._sizes = json.loads(self.storage.read_bytes(sizes_path))
    except storage_lib.NotFound:
      self._sizes = {}
    except (ValueError, storage_lib.StorageError) as e:
      raise ClientDataError(f'{sizes_path!r} is unreadable: {e}') from None

  @property
  def remote(self):
    """Whether reads wait on a network (worth running several at once)."""
    return not storage_lib.is_local(self.directory)

  def client_ids(self):
    clients_dir = storage_lib.join(self.directory, CLIENTS_DIR)
    names = self.storage.list_names(clients_dir)
    if not names:
      raise ClientDataError(f'The {self.describe()} has no {CLIENTS_DIR}/ '
                            'directory of client files.')
    ids = []
    for name in sorted(n for n in names if n.endswith(_SUFFIX)):
      stem = name[:-len(_SUFFIX)]
      client_id = client_id_of(stem)
      if client_id is None or file_name(client_id) != stem:
        expected = '' if client_id is None else \
            f' (client {client_id!r} would be {file_name(client_id)}{_SUFFIX})'
        raise ClientDataError(
            f'{storage_lib.join(clients_dir, name)}: not a name '
            f'write_client_data gives a client file{expected}; two names '
            'could then mean one client. Rename it, or rewrite the directory '
            'with beam_runner.write_client_data.')
      ids.append(client_id)
    return sorted(ids)

  def describe(self):
    return f'client data directory {self.directory!r}'

  def check(self, spec):
    if not ft.same_member(self.spec, spec):
      raise ClientDataError(
          f'The {self.describe()} holds data of type '
          f'{ft.describe(self.spec)}, but the form takes client data '
          f'{ft.describe(spec)}.')

  def path(self, client_id):
    return storage_lib.join(self.directory, CLIENTS_DIR,
                        _reversible_name(client_id) + _SUFFIX)

  def _check_size(self, client_id, path, size):
    expected = self._sizes.get(storage_lib.basename(path))
    if expected is not None and size != expected:
      raise ClientDataError(
          f'Client {client_id!r}: {path} holds {size} bytes, {expected} were '
          'written (truncated or replaced); rewrite the client data.')

  def read(self, client_id, spec):
    """The client's data, structured as the form's `spec` says."""
    path = self.path(client_id)
    if isinstance(spec, tf.data.DatasetSpec):
      if storage_lib.is_local(path):
        self._check_local(client_id, path)
        return _readers(spec).dataset(path)
      return _readers(spec).dataset_of_records(
          tf.constant(self._records(client_id, path), tf.string))
    records = self._records(client_id, path, limit=2)
    if len(records) != 1:
      raise ClientDataError(f'Client {client_id!r}: {path!r} must hold exactly '
                            f'one record, it holds {len(records)}+.')
    return _readers(spec).parse(records[0])

  def read_elements(self, client_id, spec):
    """The client's dataset (`spec` a DatasetSpec) as the list of its
    elements, numpy arrays parsed without tf.data: for a piece that takes
    them unrolled (`canonical.core.unrolled_datasets`), setting up a
    dataset would cost more than a small client's work."""
    path = self.path(client_id)
    leaves = tf.nest.flatten(spec.element_spec)
    return [tf.nest.pack_sequence_as(spec.element_spec,
                                     _arrays_of(record, leaves, client_id))
            for record in self._records(client_id, path)]

  def _check_local(self, client_id, path):
    if not os.path.exists(path):
      raise ClientDataError(
          f'Client {client_id!r} has no data file {path!r}.')
    self._check_size(client_id, path, os.path.getsize(path))

  def _records(self, client_id, path, limit=None):
    """The records of the client's file (the first `limit`, if given)."""
    if storage_lib.is_local(path):
      self._check_local(client_id, path)
      with deprecation.silence():  # See tfrecords.records_of.
        return list(itertools.islice(
            tf.compat.v1.io.tf_record_iterator(path), limit))
    try:
      data = self.storage.read_bytes(path)
    except storage_lib.NotFound:
      raise ClientDataError(
          f'Client {client_id!r} has no data file {path!r}.') from None
    self._check_size(client_id, path, len(data))
    return tfrecords.records_of(data)[:limit]


def _arrays_of(record, leaves, client_id):
  """The flat arrays of one record (see `example_of`), checked against the
  element's leaf specs."""
  features = tf.train.Example.FromString(record).features.feature
  arrays = []
  for i, leaf in enumerate(leaves):
    try:
      value = features[f'{i}'].bytes_list.value[0]
      array = tf.make_ndarray(tensor_pb2.TensorProto.FromString(value))
    except (KeyError, IndexError, ValueError, TypeError) as e:
      raise ClientDataError(f'Client {client_id!r}: a record lacks component '
                            f'{i} or it is not a tensor ({e}).') from None
    if array.dtype != leaf.dtype.as_numpy_dtype or not (
        leaf.shape.is_compatible_with(array.shape)):
      raise ClientDataError(
          f'Client {client_id!r}: component {i} of a record is '
          f'{array.dtype}{list(array.shape)}, the data\'s type says '
          f'{ft.form_text(leaf)}.')
    arrays.append(array)
  return arrays


class _Readers:
  """The `tf.function`s that read one spec's client files, traced once.

  Eagerly, `TFRecordDataset(path).map(parse)` traces `parse` again for every
  client, as eager parsing of a tensor client's record costs as much: 20-30 ms
  a client, more than a small model's work. Traced once per spec, a client
  costs about 1 ms.
  """

  def __init__(self, spec):
    path_spec = [tf.TensorSpec([], tf.string)]
    if isinstance(spec, tf.data.DatasetSpec):
      parse = _parser(spec.element_spec)
      self.dataset = tf.function(
          lambda path: tf.data.TFRecordDataset(path).map(parse),
          input_signature=path_spec)
      self.dataset_of_records = tf.function(
          lambda records: tf.data.Dataset.from_tensor_slices(records).map(
              parse), input_signature=[tf.TensorSpec([None], tf.string)])
    else:
      self.parse = tf.function(_parser(spec), input_signature=path_spec)


_READERS = {}


def _readers(spec):
  key = json.dumps(spec_to_json(spec), sort_keys=True)
  if key not in _READERS:
    _READERS[key] = _Readers(spec)
  return _READERS[key]


def _parser(element_spec):
  leaves = tf.nest.flatten(element_spec)
  features = {f'{i}': tf.io.FixedLenFeature([], tf.string)
              for i in range(len(leaves))}

  def parse(record):
    parsed = tf.io.parse_single_example(record, features)
    tensors = []
    for i, leaf in enumerate(leaves):
      tensor = tf.io.parse_tensor(parsed[f'{i}'], leaf.dtype)
      tensors.append(tf.ensure_shape(tensor, leaf.shape))
    return tf.nest.pack_sequence_as(element_spec, tensors)

  return parse


def example_of(element):
  """The `tf.train.Example` record of one element (its flat tensors, each
  serialized by `tf.io.serialize_tensor`), as `TFRecordClientData` reads it."""
  feature = {
      f'{i}': tf.train.Feature(bytes_list=tf.train.BytesList(
          value=[tf.io.serialize_tensor(t).numpy()]))
      for i, t in enumerate(tf.nest.flatten(element))}
  return tf.train.Example(features=tf.train.Features(feature=feature))



def write_client_data(directory, data, storage=None):
  """Writes a dict client id -> data (Dataset or tensors) as per-client
  TFRecord files; returns a `TFRecordClientData` over them.

  `directory` may be local or on any storage `canonical.io` reaches (through
  `storage`, the default if None). Every client's data must have the same
  type. Each file is written whole or not at all, and the element type last:
  a directory without it is not client data.
  """
  storage = storage or storage_lib.default()
  directory = storage.absolute(directory)
  names, ids = {}, {}
  for client_id in data:  # Before anything is written.
    names[client_id] = _reversible_name(client_id) + _SUFFIX
    other = ids.setdefault(names[client_id], client_id)
    if other is not client_id:
      raise ClientDataError(f'Client ids {other!r} and {client_id!r} are one '
                            'id as text; ids must differ as strings.')
  spec, sizes = None, {}
  for client_id, value in sorted(data.items(), key=lambda kv: str(kv[0])):
    value_spec = ft.member_of(value)
    if spec is None:
      spec = value_spec
    elif not ft.same_member(value_spec, spec):
      raise ClientDataError(
          f'Client {client_id!r} has data of type {ft.describe(value_spec)}, '
          f'the clients before it {ft.describe(spec)}.')
    elements = value if isinstance(value, tf.data.Dataset) else [value]
    name = names[client_id]
    file_bytes = tfrecords.file_bytes(example_of(element).SerializeToString(
        deterministic=True) for element in elements)
    storage.write_bytes(storage_lib.join(directory, CLIENTS_DIR, name),
                        file_bytes)
    sizes[name] = len(file_bytes)
  if spec is None:
    raise ClientDataError('write_client_data: no clients given.')
  write_sizes(directory, sizes, storage)
  storage.write_bytes(storage_lib.join(directory, SPEC_FILE),
                      json.dumps(spec_to_json(spec), indent=1).encode())
  return TFRecordClientData(directory, storage)


def write_sizes(directory, sizes, storage=None):
  """Records the client files' sizes ({file name: bytes}); see SIZES_FILE."""
  (storage or storage_lib.default()).write_bytes(
      storage_lib.join(directory, SIZES_FILE),
      json.dumps(sizes, sort_keys=True).encode())


def takes_elements(form, source):
  """Whether a client's dataset goes to `form`'s work as the list of its
  elements: work takes them unrolled (its dataset only feeds reductions,
  see canonical.core.unrolled_datasets) and `source` reads them without
  tf.data."""
  return (isinstance(form.client_data_spec, tf.data.DatasetSpec) and
          hasattr(source, 'read_elements') and
          form.work.unrolled() is not None)


def source_of(client_data, storage=None):
  """A source for a dict (in memory), a directory path (read through
  `storage`), or a source."""
  if isinstance(client_data, (InMemoryClientData, TFRecordClientData)):
    return client_data
  if isinstance(client_data, dict):
    return InMemoryClientData(client_data)
  if isinstance(client_data, (str, os.PathLike)):
    return TFRecordClientData(client_data, storage)
  raise errors.InvalidTypeError(
      'client_data must be a dict client id -> data, a client '
      'data directory or a client data source, got '
      f'{type(client_data).__name__}.')


def spec_to_json(spec):
  """A member type (structure of TensorSpec / DatasetSpec) as plain JSON."""
  if isinstance(spec, tf.data.DatasetSpec):
    return {'dataset': spec_to_json(spec.element_spec)}
  if isinstance(spec, tf.TensorSpec):
    shape = None if spec.shape.rank is None else spec.shape.as_list()
    return {'dtype': spec.dtype.name, 'shape': shape}
  if isinstance(spec, dict):
    return {'dict': {str(k): spec_to_json(v) for k, v in spec.items()}}
  if isinstance(spec, (tuple, list)):
    return {'tuple': [spec_to_json(v) for v in spec]}
  raise errors.InvalidTypeError(
      f'Cannot describe {spec!r} as client data type.')


def spec_from_json(value):
  if 'dataset' in value:
    return tf.data.DatasetSpec(spec_from_json(value['dataset']))
  if 'dtype' in value:
    return tf.TensorSpec(value['shape'], tf.as_dtype(value['dtype']))
  if 'dict' in value:
    return {k: spec_from_json(v) for k, v in value['dict'].items()}
  return tuple(spec_from_json(v) for v in value['tuple'])
