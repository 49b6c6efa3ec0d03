"""`ClientData`: a federated data set for simulations, as TFF's
`tff.simulation.datasets.ClientData` is: client ids, and one
`tf.data.Dataset` per client made by a function TensorFlow can trace.

That function (`serializable_dataset_fn`) is what lets one data set serve
three uses: called eagerly for one client, mapped over ids inside
`tf.data` (all clients as one data set), and wrapped as a computation from a
client id to its data (`dataset_computation`). Client order is shuffled only
by numpy's `RandomState(seed)`, as TFF shuffles, so a seed gives TFF's order.
"""

import abc
from collections.abc import Callable, Iterable, Sequence
import numbers

import numpy as np
import tensorflow as tf

from canonical.core import computations
from canonical import errors

DatasetFn = Callable[[str], tf.data.Dataset]


def check_seed(seed, where):
  """`seed` as numpy's RandomState takes it (None, a 32-bit unsigned int or
  a sequence of them), else InvalidTypeError naming `where`."""

  def is_uint32(x):
    return (isinstance(x, numbers.Integral) and not isinstance(x, bool) and
            0 <= x < 2**32)

  if seed is None or is_uint32(seed) or (
      isinstance(seed, Sequence) and not isinstance(seed, str) and
      all(is_uint32(x) for x in seed)):
    return
  raise errors.InvalidTypeError(
      f'{where}: seed must be None, a nonnegative 32-bit integer or a '
      f'sequence of them, got {seed!r}.')


def shuffled(client_ids, seed, where):
  """A copy of `client_ids` in the order RandomState(seed) shuffles it."""
  check_seed(seed, where)
  ids = list(client_ids)
  np.random.RandomState(seed).shuffle(ids)
  return ids


def _checked_dataset(dataset, where):
  if not isinstance(dataset, tf.data.Dataset):
    raise errors.InvalidTypeError(
        f'{where} must return a tf.data.Dataset, it returned '
        f'{type(dataset).__name__}.')
  return dataset


class ClientData(abc.ABC):
  """Client ids and a traceable `client id -> tf.data.Dataset` function.

  Subclasses give `client_ids`, `serializable_dataset_fn` and
  `element_type_structure`; everything else is built on those.
  """

  @property
  @abc.abstractmethod
  def client_ids(self) -> list[str]:
    """The clients' string ids."""

  @property
  @abc.abstractmethod
  def serializable_dataset_fn(self) -> DatasetFn:
    """`client id -> tf.data.Dataset`, traceable (it also runs on a string
    tensor inside `tf.data` and a tf_computation)."""

  @property
  @abc.abstractmethod
  def element_type_structure(self):
    """The `tf.TensorSpec` structure of an element of a client's data."""

  def create_tf_dataset_for_client(self, client_id: str) -> tf.data.Dataset:
    """One client's data; InvalidValueError for an id it does not have."""
    if client_id not in self.client_ids:
      raise errors.InvalidValueError(
          f'{client_id!r} is not a client of this {type(self).__name__} '
          f'({len(self.client_ids)} clients; see its client_ids).')
    return _checked_dataset(self.serializable_dataset_fn(client_id),
                            f'{type(self).__name__}.serializable_dataset_fn')

  @property
  def dataset_computation(self):
    """A tf_computation `string -> dataset` (TFF's `(str -> T*)`), so a
    client's data can be made inside a computation from its id."""
    if getattr(self, '_dataset_computation', None) is None:
      self._dataset_computation = computations.tf_computation(
          self.serializable_dataset_fn, tf.string)
    return self._dataset_computation

  def datasets(self, limit_count: int | None = None,
               seed=None) -> Iterable[tf.data.Dataset]:
    """Yields the clients' data sets, in the order `seed` shuffles the ids
    (TFF's), at most `limit_count` of them."""
    ids = shuffled(self.client_ids, seed, 'ClientData.datasets')
    if limit_count is not None:
      ids = ids[:max(0, limit_count)]
    for client_id in ids:
      yield self.create_tf_dataset_for_client(client_id)

  def create_tf_dataset_from_all_clients(self, seed=None) -> tf.data.Dataset:
    """Every client's examples in one data set, client after client in the
    order `seed` shuffles the ids (not shuffled within a client): for a
    centralized baseline. Read lazily through `serializable_dataset_fn`."""
    ids = shuffled(self.client_ids, seed,
                   'ClientData.create_tf_dataset_from_all_clients')
    try:
      return tf.data.Dataset.from_tensor_slices(ids).flat_map(
          self.serializable_dataset_fn)
    except Exception as e:  # pylint: disable=broad-except
      raise errors.InvalidValueError(
          f'{type(self).__name__}.create_tf_dataset_from_all_clients: its '
          'serializable_dataset_fn must run on a string tensor inside '
          f'tf.data, and failed: {type(e).__name__}: {e}') from e

  def preprocess(self, preprocess_fn: Callable[[tf.data.Dataset],
                                               tf.data.Dataset]):
    """This data with `preprocess_fn` (dataset -> dataset, traceable)
    applied to every client's data set."""
    if not callable(preprocess_fn):
      raise errors.InvalidTypeError(
          'ClientData.preprocess takes a function dataset -> dataset, got '
          f'{type(preprocess_fn).__name__}.')
    return PreprocessedClientData(self, preprocess_fn)

  @classmethod
  def from_clients_and_tf_fn(cls, client_ids: Iterable[str],
                             serializable_dataset_fn: DatasetFn):
    """A `ClientData` of `client_ids`, each one's data made by
    `serializable_dataset_fn(client_id)` (traceable)."""
    return ConcreteClientData(client_ids, serializable_dataset_fn)

  @classmethod
  def train_test_client_split(cls, client_data: 'ClientData',
                              num_test_clients: int, seed=None):
    """`(train, test)`: `num_test_clients` clients with data, drawn in the
    order `seed` shuffles the ids (as TFF draws them), held out as test;
    every other client (empty ones included) is train."""
    where = 'ClientData.train_test_client_split'
    count = len(client_data.client_ids)
    if num_test_clients <= 0:
      raise errors.InvalidValueError(
          f'{where}: num_test_clients must be positive, got '
          f'{num_test_clients}.')
    if count <= num_test_clients:
      raise errors.InvalidValueError(
          f'{where}: the client data has {count} clients, so at most '
          f'{count - 1} can be test clients; {num_test_clients} were asked.')
    remaining = shuffled(client_data.client_ids, seed, where)
    empty, test = [], []
    while len(test) < num_test_clients:
      # Like TFF: give up once "many" (relative to the ask) are empty.
      if not remaining or len(empty) > 5 * num_test_clients + 10:
        raise errors.InvalidValueError(
            f'{where}: {len(empty)} clients have no data; found only '
            f'{len(test)} of the {num_test_clients} test clients asked.')
      client_id = remaining.pop()
      dataset = client_data.create_tf_dataset_for_client(client_id)
      if next(iter(dataset.take(1)), None) is None:
        empty.append(client_id)
      else:
        test.append(client_id)
    dataset_fn = client_data.serializable_dataset_fn
    return (cls.from_clients_and_tf_fn(remaining + empty, dataset_fn),
            cls.from_clients_and_tf_fn(test, dataset_fn))

  def to_dict(self, client_ids: Iterable[str] | None = None):
    """`{client id: tf.data.Dataset}` for `client_ids` (all by default): what
    `canonical.run_round` (as a list) and `beam_runner.run` /
    `beam_runner.write_client_data` take. Not in TFF."""
    ids = self.client_ids if client_ids is None else list(client_ids)
    return {client_id: self.create_tf_dataset_for_client(client_id)
            for client_id in ids}


class ConcreteClientData(ClientData):
  """Client ids and a function that makes a client's data set."""

  def __init__(self, client_ids: Iterable[str],
               serializable_dataset_fn: DatasetFn):
    if isinstance(client_ids, str) or not isinstance(client_ids, Iterable):
      raise errors.InvalidTypeError(
          'ClientData.from_clients_and_tf_fn: client_ids must be a list of '
          f'strings, got {type(client_ids).__name__}.')
    if not callable(serializable_dataset_fn):
      raise errors.InvalidTypeError(
          'ClientData.from_clients_and_tf_fn: serializable_dataset_fn must '
          'be a function client id -> tf.data.Dataset, got '
          f'{type(serializable_dataset_fn).__name__}.')
    self._client_ids = list(client_ids)
    if not self._client_ids:
      raise errors.InvalidValueError(
          'ClientData.from_clients_and_tf_fn: at least one client id is '
          'needed.')
    self._dataset_fn = serializable_dataset_fn
    first = _checked_dataset(
        serializable_dataset_fn(self._client_ids[0]),
        'ClientData.from_clients_and_tf_fn: serializable_dataset_fn')
    self._element_type_structure = first.element_spec

  @property
  def client_ids(self):
    return self._client_ids

  @property
  def serializable_dataset_fn(self):
    return self._dataset_fn

  @property
  def element_type_structure(self):
    return self._element_type_structure


class PreprocessedClientData(ClientData):
  """Another `ClientData` with a function applied to each client's data."""

  def __init__(self, underlying: ClientData,
               preprocess_fn: Callable[[tf.data.Dataset], tf.data.Dataset]):
    self._underlying = underlying
    self._preprocess_fn = preprocess_fn
    first = self.create_tf_dataset_for_client(underlying.client_ids[0])
    self._element_type_structure = first.element_spec

  @property
  def client_ids(self):
    return self._underlying.client_ids

  @property
  def serializable_dataset_fn(self):
    underlying_fn = self._underlying.serializable_dataset_fn
    return lambda client_id: self._preprocess_fn(underlying_fn(client_id))

  def create_tf_dataset_for_client(self, client_id):
    # Through the underlying data's own eager path (TestClientData's is
    # cheaper than its traceable one).
    dataset = self._underlying.create_tf_dataset_for_client(client_id)
    return _checked_dataset(self._preprocess_fn(dataset),
                            'ClientData.preprocess: preprocess_fn')

  @property
  def element_type_structure(self):
    return self._element_type_structure
