"""`TestClientData`: TFF's in-memory `ClientData` for toy data sets, from a
dict client id -> tensor slices (what `tf.data.Dataset.from_tensor_slices`
takes: a list, a tuple or a dict of arrays).

Eagerly a client's data set is made from its own slices. The traceable
`serializable_dataset_fn` holds every client's examples as constants, one
array per leaf with the clients one after another, and slices a client's
rows out by the position of its id: pure TensorFlow, no lookup table.
"""

import copy

import numpy as np
import tensorflow as tf

from canonical import errors
from canonical.simulation.datasets import client_data as client_data_lib


def _is_namedtuple(value):
  return isinstance(value, tuple) and hasattr(value, '_fields')


class TestClientData(client_data_lib.ClientData):
  """Client data held in memory: for tests and toy simulations, since every
  client's examples go into the graph of `serializable_dataset_fn`."""

  __test__ = False  # Not a pytest test class, whatever its name says.

  def __init__(self, tensor_slices_dict):
    where = 'TestClientData'
    if not isinstance(tensor_slices_dict, dict):
      raise errors.InvalidTypeError(
          f'{where} takes a dict client id -> tensor slices, got '
          f'{type(tensor_slices_dict).__name__}.')
    if not tensor_slices_dict:
      raise errors.InvalidValueError(f'{where}: the dict has no clients.')
    data = copy.deepcopy(tensor_slices_dict)
    first_id, first = next(iter(data.items()))
    if _is_namedtuple(first):
      raise errors.InvalidTypeError(
          f'{where}: client {first_id!r} has a namedtuple of slices; convert '
          'it with ._asdict() (a list, a tuple or a dict is taken).')
    if not isinstance(first, (list, tuple, dict)):
      raise errors.InvalidTypeError(
          f'{where}: client {first_id!r} has {type(first).__name__}; a '
          'client\'s slices must be a list, a tuple or a dict.')
    for client_id, slices in data.items():
      if not isinstance(client_id, str):
        raise errors.InvalidTypeError(
            f'{where}: client ids must be strings, got {client_id!r}.')
      if not isinstance(slices, type(first)) or _is_namedtuple(slices):
        raise errors.InvalidTypeError(
            f'{where}: client {client_id!r} has {type(slices).__name__} '
            f'slices, client {first_id!r} {type(first).__name__}; every '
            'client\'s slices must be of one kind.')
      if any(tf.is_tensor(leaf) for leaf in tf.nest.flatten(slices)):
        raise errors.InvalidTypeError(
            f'{where}: client {client_id!r} has a TensorFlow tensor among '
            'its slices; pass numpy arrays or lists (tensors would be '
            'captured into graphs).')
      if not slices:
        raise errors.InvalidValueError(
            f'{where}: client {client_id!r} has no data.')
    self._data = data
    self._element_type_structure = self.create_tf_dataset_for_client(
        first_id).element_spec
    self._dataset_fn = None

  @property
  def client_ids(self):
    return list(self._data)

  def create_tf_dataset_for_client(self, client_id):
    if client_id not in self._data:
      raise errors.InvalidValueError(
          f'{client_id!r} is not a client of this TestClientData '
          f'({len(self._data)} clients; see its client_ids).')
    return tf.data.Dataset.from_tensor_slices(self._data[client_id])

  @property
  def element_type_structure(self):
    return self._element_type_structure

  @property
  def serializable_dataset_fn(self):
    if self._dataset_fn is None:
      self._dataset_fn = self._build_dataset_fn()
    return self._dataset_fn

  def _build_dataset_fn(self):
    ids = self.client_ids
    spec = self._element_type_structure
    columns, offsets = [[] for _ in tf.nest.flatten(spec)], [0]
    for client_id in ids:
      rows = self._rows_of(client_id, spec)
      for column, leaf in zip(columns, tf.nest.flatten(rows)):
        column.append(leaf)
      offsets.append(offsets[-1] + len(tf.nest.flatten(rows)[0]))
    columns = [np.concatenate(column) for column in columns]
    offsets = np.array(offsets, np.int64)

    def dataset_fn(client_id):
      client_id = tf.convert_to_tensor(client_id, tf.string)
      matches = tf.equal(tf.constant(ids), client_id)
      found = tf.debugging.Assert(tf.reduce_any(matches),
                                  ['TestClientData has no client', client_id])
      with tf.control_dependencies([found]):
        index = tf.argmax(tf.cast(matches, tf.int32), output_type=tf.int32)
      bounds = tf.constant(offsets)
      begin, end = bounds[index], bounds[index + 1]
      leaves = [tf.constant(column)[begin:end] for column in columns]
      return tf.data.Dataset.from_tensor_slices(
          tf.nest.pack_sequence_as(spec, leaves))

    return dataset_fn

  def _rows_of(self, client_id, spec):
    """A client's examples stacked, leaf by leaf, as numpy arrays."""
    dataset = self.create_tf_dataset_for_client(client_id)
    if dataset.element_spec != spec:
      raise errors.InvalidValueError(
          f'TestClientData: client {client_id!r} has elements '
          f'{dataset.element_spec}, client {self.client_ids[0]!r} {spec}; '
          'the clients must agree to be read by one serializable_dataset_fn '
          '(create_tf_dataset_from_all_clients, dataset_computation).')
    count = int(dataset.cardinality())
    if count == 0:
      return tf.nest.map_structure(
          lambda s: np.zeros([0] + s.shape.as_list(), s.dtype.as_numpy_dtype),
          spec)
    return tf.nest.map_structure(
        lambda t: t.numpy(), dataset.batch(count).get_single_element())
