"""`FilePerUserClientData`: TFF's `ClientData` with one file per client,
read by a function path -> dataset (`tf.data.TFRecordDataset` by default in
`create_from_dir`). The id-to-path map is held as constants and looked up
by position, so `serializable_dataset_fn` stays pure TensorFlow."""

from collections.abc import Callable, Mapping

import tensorflow as tf

from canonical import errors
from canonical.simulation.datasets import client_data as client_data_lib


class FilePerUserClientData(client_data_lib.ClientData):
  """Client ids (sorted) mapped to files; `dataset_fn(path)` reads one, for
  a Python string or a string tensor alike."""

  def __init__(self, client_ids_to_files: Mapping[str, str],
               dataset_fn: Callable[[str], tf.data.Dataset]):
    if not isinstance(client_ids_to_files, Mapping):
      raise errors.InvalidTypeError(
          'FilePerUserClientData takes a mapping client id -> file path, got '
          f'{type(client_ids_to_files).__name__}.')
    if not client_ids_to_files:
      raise errors.InvalidValueError(
          'FilePerUserClientData: the mapping has no clients.')
    self._client_ids = sorted(client_ids_to_files)
    self._paths = dict(client_ids_to_files)
    self._dataset_fn = dataset_fn
    ids = list(self._paths)
    paths = [self._paths[i] for i in ids]

    def serializable_dataset_fn(client_id):
      matches = tf.equal(tf.constant(ids), tf.convert_to_tensor(
          client_id, tf.string))
      found = tf.debugging.Assert(
          tf.reduce_any(matches),
          ['FilePerUserClientData has no client', client_id])
      with tf.control_dependencies([found]):
        index = tf.argmax(tf.cast(matches, tf.int32), output_type=tf.int32)
      return dataset_fn(tf.constant(paths)[index])

    self._serializable_dataset_fn = serializable_dataset_fn
    self._element_type_structure = serializable_dataset_fn(
        self._client_ids[0]).element_spec

  @classmethod
  def create_from_dir(cls, path, create_tf_dataset_fn=tf.data.TFRecordDataset):
    """One client per file directly in `path`, named by its file name."""
    return cls({name: tf.io.gfile.join(path, name)
                for name in tf.io.gfile.listdir(path)
                if not tf.io.gfile.isdir(tf.io.gfile.join(path, name))},
               create_tf_dataset_fn)

  @property
  def client_ids(self):
    return self._client_ids

  @property
  def serializable_dataset_fn(self):
    return self._serializable_dataset_fn

  @property
  def element_type_structure(self):
    return self._element_type_structure

  def create_tf_dataset_for_client(self, client_id):
    if client_id not in self._paths:
      raise errors.InvalidValueError(
          f'{client_id!r} is not a client of this FilePerUserClientData '
          f'({len(self._paths)} clients; see its client_ids).')
    dataset = self._dataset_fn(self._paths[client_id])
    if dataset.element_spec != self._element_type_structure:
      raise errors.InvalidValueError(
          f'FilePerUserClientData: client {client_id!r} '
          f'({self._paths[client_id]}) reads as {dataset.element_spec}, '
          f'the first client as {self._element_type_structure}.')
    return dataset
