"""Client data in an SQLite file, TFF's format for its downloaded data sets
(`emnist_all.sqlite`, `shakespeare.sqlite`, ...) and for
`save_to_sql_client_data`.

The file has a table `examples` (`split_name`, `client_id`,
`serialized_example_proto`: one serialized `tf.train.Example` per row) and
a table `client_metadata` (`client_id`, `split_name`, `num_examples`).
`SqlClientData` gives each client's rows as a data set of the serialized
protos; `load_and_parse_sql_client_data` (and each data set module) parses
them into tensors. Reading goes through TensorFlow's `SqlDataset`, so
`serializable_dataset_fn` stays traceable (inside `tf.data` and a
tf_computation too); Python's `sqlite3` reads only the client ids and
writes new files.
"""

import collections
from collections.abc import Callable, Mapping
import os
import sqlite3
import tempfile

import numpy as np
import tensorflow as tf

from canonical import errors
from canonical.simulation.datasets import client_data as client_data_lib

_EXAMPLE_COLUMNS = frozenset(['split_name', 'client_id',
                              'serialized_example_proto'])
_TABLES = frozenset(['examples', 'client_metadata'])
_DEFAULT_SPLIT = 'default_split'


class DatabaseFormatError(errors.Error, ValueError):
  """An SQLite file lacks the tables or columns client data needs."""


class ElementSpecCompatibilityError(errors.Error, TypeError):
  """Elements that a `tf.train.Example` cannot hold, or clients whose
  elements differ."""


def _connect(path, where):
  if not os.path.isfile(path):
    raise errors.InvalidValueError(f'{where}: no SQLite file at {path!r}.')
  return sqlite3.connect(f'file:{path}?mode=ro', uri=True)


def _check_format(path, where):
  with _connect(path, where) as connection:
    tables = {row[0] for row in connection.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")}
    missing = sorted(_TABLES - tables)
    if missing:
      raise DatabaseFormatError(
          f'{where}: {path!r} has no table {", ".join(missing)} (client data '
          'files have the tables examples and client_metadata).')
    columns = {row[1] for row in connection.execute(
        'PRAGMA table_info(examples)')}
    missing = sorted(_EXAMPLE_COLUMNS - columns)
    if missing:
      raise DatabaseFormatError(
          f'{where}: table examples of {path!r} lacks the columns '
          f'{", ".join(missing)}.')


def _client_ids(path, split_name, where):
  query = 'SELECT DISTINCT client_id FROM client_metadata'
  parameters = ()
  if split_name is not None:
    query += ' WHERE split_name = ?'
    parameters = (split_name,)
  with _connect(path, where) as connection:
    return sorted(row[0] for row in connection.execute(query, parameters))


def _quoted(value):
  """`value` (a string tensor) as the body of an SQL string literal."""
  return tf.strings.regex_replace(value, "'", "''")


class SqlClientData(client_data_lib.ClientData):
  """TFF's `SqlClientData`: the clients of one split (all of them for
  `split_name=None`) of an SQLite file, each client's data set the
  serialized `tf.train.Example` protos of its rows (strings)."""

  def __init__(self, database_filepath: str, split_name: str | None = None):
    where = 'SqlClientData'
    if not isinstance(database_filepath, str):
      raise errors.InvalidTypeError(
          f'{where}: database_filepath must be a string, got '
          f'{type(database_filepath).__name__}.')
    _check_format(database_filepath, where)
    self._path = database_filepath
    self._split_name = split_name
    self._client_ids = _client_ids(database_filepath, split_name, where)
    if not self._client_ids:
      split = f' in split {split_name!r}' if split_name is not None else ''
      raise errors.InvalidValueError(
          f'{where}: {database_filepath!r} has no clients{split}.')

  def _dataset(self, client_id):
    parts = ["SELECT serialized_example_proto FROM examples WHERE "
             "client_id = '", _quoted(client_id), "'"]
    if self._split_name is not None:
      parts += [" AND split_name = '",
                _quoted(tf.constant(self._split_name)), "'"]
    return tf.data.experimental.SqlDataset(
        'sqlite', self._path, tf.strings.join(parts), tf.string)

  @property
  def serializable_dataset_fn(self):
    return self._dataset

  @property
  def client_ids(self):
    return self._client_ids

  @property
  def element_type_structure(self):
    return tf.TensorSpec([], tf.string)


def _check_element_spec(spec, where):
  if not isinstance(spec, Mapping):
    raise ElementSpecCompatibilityError(
        f'{where}: elements must be a mapping of names to tensors '
        f'(Mapping[str, tf.TensorSpec]) to be tf.train.Examples, got {spec}.')
  for key, value in spec.items():
    if not isinstance(key, str) or not isinstance(value, tf.TensorSpec):
      raise ElementSpecCompatibilityError(
          f'{where}: element {key!r} is {value}; a tf.train.Example holds '
          'named tensors, not nested structures.')
    if not (value.dtype == tf.string or value.dtype.is_floating or
            value.dtype.is_integer or value.dtype == tf.bool):
      raise ElementSpecCompatibilityError(
          f'{where}: element {key!r} has dtype {value.dtype.name}, which a '
          'tf.train.Example cannot hold.')


def _feature(spec, value):
  """`value` (an eager tensor) as a `tf.train.Feature`."""
  array = np.asarray(value.numpy())
  if spec.dtype == tf.string:
    return tf.train.Feature(bytes_list=tf.train.BytesList(
        value=list(array.reshape(-1))))
  if spec.dtype.is_floating:
    return tf.train.Feature(float_list=tf.train.FloatList(
        value=array.reshape(-1)))
  return tf.train.Feature(int64_list=tf.train.Int64List(
      value=array.reshape(-1).astype('int64')))


def _serialize(spec, element):
  return tf.train.Example(features=tf.train.Features(feature={
      key: _feature(spec[key], element[key]) for key in spec
  })).SerializeToString()


def _parse_type(dtype):
  """The type a `tf.train.Example` stores `dtype` as."""
  if dtype == tf.string:
    return tf.string
  return tf.float32 if dtype.is_floating else tf.int64


def parser_for(element_spec: Mapping[str, tf.TensorSpec],
               where: str) -> Callable[[tf.Tensor], dict]:
  """`serialized proto -> OrderedDict of tensors of element_spec`."""
  _check_element_spec(element_spec, where)
  features = {key: tf.io.FixedLenFeature(spec.shape, _parse_type(spec.dtype))
              for key, spec in element_spec.items()}

  def parse(serialized):
    parsed = tf.io.parse_example(serialized, features)
    return collections.OrderedDict(
        (key, tf.cast(parsed[key], spec.dtype))
        for key, spec in element_spec.items())

  return parse


def save_to_sql_client_data(
    client_ids: list[str], dataset_fn: Callable[[str], tf.data.Dataset],
    database_filepath: str, allow_overwrite: bool = False,
    split_names_by_client_id: Mapping[str, str] | None = None) -> None:
  """Writes the clients' data (elements of named tensors, one
  `tf.train.Example` each) to an SQLite file `SqlClientData` reads; clients
  without a split name in `split_names_by_client_id` are refused, and with
  none given every client is in split 'default_split' (TFF's)."""
  where = 'save_to_sql_client_data'
  if not isinstance(database_filepath, str):
    raise errors.InvalidTypeError(
        f'{where}: database_filepath must be a string, got '
        f'{type(database_filepath).__name__}.')
  if tf.io.gfile.exists(database_filepath) and not allow_overwrite:
    raise errors.InvalidValueError(
        f'{where}: {database_filepath!r} exists; pass allow_overwrite=True '
        'to replace it.')
  client_ids = list(client_ids)
  if not client_ids:
    raise errors.InvalidValueError(f'{where}: no client ids.')
  spec = dataset_fn(client_ids[0]).element_spec
  _check_element_spec(spec, where)
  handle, scratch = tempfile.mkstemp(suffix='.sqlite')
  os.close(handle)
  try:
    with sqlite3.connect(scratch) as connection:
      connection.execute(
          'CREATE TABLE examples (split_name TEXT NOT NULL, client_id TEXT '
          'NOT NULL, serialized_example_proto BLOB NOT NULL)')
      connection.execute(
          'CREATE TABLE client_metadata (client_id TEXT NOT NULL, split_name '
          'TEXT NOT NULL, num_examples INTEGER NOT NULL)')
      for client_id in client_ids:
        split = _DEFAULT_SPLIT
        if split_names_by_client_id is not None:
          split = split_names_by_client_id.get(client_id)
          if split is None:
            raise errors.InvalidValueError(
                f'{where}: split_names_by_client_id has no split for '
                f'client {client_id!r}.')
        dataset = dataset_fn(client_id)
        if dataset.element_spec != spec:
          raise ElementSpecCompatibilityError(
              f'{where}: client {client_id!r} has elements '
              f'{dataset.element_spec}, client {client_ids[0]!r} {spec}; '
              'every client\'s must be the same.')
        count = 0
        for element in dataset:
          connection.execute(
              'INSERT INTO examples (split_name, client_id, '
              'serialized_example_proto) VALUES (?, ?, ?)',
              (split, client_id, _serialize(spec, element)))
          count += 1
        connection.execute(
            'INSERT INTO client_metadata (client_id, split_name, '
            'num_examples) VALUES (?, ?, ?)', (client_id, split, count))
    directory = os.path.dirname(database_filepath)
    if directory:
      tf.io.gfile.makedirs(directory)
    tf.io.gfile.copy(scratch, database_filepath, overwrite=True)
  finally:
    os.remove(scratch)


def load_and_parse_sql_client_data(
    database_filepath: str, element_spec: Mapping[str, tf.TensorSpec],
    split_name: str | None = None) -> client_data_lib.ClientData:
  """The clients of an SQLite client data file, their protos parsed into
  elements of `element_spec` (named tensors). A file not on local disk
  (gs://, ...) is copied to a local temporary file first, as SQLite reads
  local files only."""
  where = 'load_and_parse_sql_client_data'
  parse = parser_for(element_spec, where)
  if not tf.io.gfile.exists(database_filepath):
    raise errors.InvalidValueError(
        f'{where}: no file at {database_filepath!r}.')
  if not os.path.exists(database_filepath):
    local = os.path.join(tempfile.mkdtemp(),
                         os.path.basename(database_filepath))
    tf.io.gfile.copy(database_filepath, local, overwrite=True)
    database_filepath = local
  return SqlClientData(database_filepath, split_name).preprocess(
      lambda dataset: dataset.map(parse))
