"""TFF's `TransformingClientData`: more clients from fewer, each expanded
id's examples mapped by a function made for that id (an augmentation per
pseudo-client)."""

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from canonical import errors
from canonical.simulation.datasets import client_data as client_data_lib


class TransformingClientData(client_data_lib.ClientData):
  """The clients of `base_client_data`, or with `expand_client_id` (id ->
  list of new ids) and `reduce_client_id` (new id -> base id, traceable)
  the expanded ones, sorted; a client's data is its base client's with
  `make_transform_fn(client id)` (element -> element, traceable) mapped
  over it."""

  def __init__(self, base_client_data: client_data_lib.ClientData,
               make_transform_fn: Callable[[str], Callable[[Any], Any]],
               expand_client_id: Callable[[str], list[str]] | None = None,
               reduce_client_id: Callable[[str], str] | None = None):
    where = 'TransformingClientData'
    if not isinstance(base_client_data, client_data_lib.ClientData):
      raise errors.InvalidTypeError(
          f'{where}: base_client_data must be a ClientData, got '
          f'{type(base_client_data).__name__}.')
    if not base_client_data.client_ids:
      raise errors.InvalidValueError(
          f'{where}: base_client_data has no clients.')
    if (expand_client_id is None) != (reduce_client_id is None):
      raise errors.InvalidValueError(
          f'{where}: give both expand_client_id and reduce_client_id, or '
          'neither.')
    if not callable(make_transform_fn):
      raise errors.InvalidTypeError(
          f'{where}: make_transform_fn must be a function client id -> '
          f'(element -> element), got {type(make_transform_fn).__name__}.')
    self._base = base_client_data
    self._make_transform_fn = make_transform_fn
    if expand_client_id is None:
      ids = list(base_client_data.client_ids)
      self._reduce_client_id = tf.convert_to_tensor
    else:
      ids = [expanded for client_id in base_client_data.client_ids
             for expanded in expand_client_id(client_id)]
      self._reduce_client_id = reduce_client_id
    self._client_ids = sorted(ids)
    self._element_type_structure = self._dataset(
        self._client_ids[0]).element_spec

  def _dataset(self, client_id):
    base = self._base.serializable_dataset_fn(
        self._reduce_client_id(client_id))
    return base.map(self._make_transform_fn(client_id),
                    num_parallel_calls=tf.data.AUTOTUNE)

  @property
  def client_ids(self):
    return self._client_ids

  @property
  def serializable_dataset_fn(self):
    return self._dataset

  @property
  def element_type_structure(self):
    return self._element_type_structure
