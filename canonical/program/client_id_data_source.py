"""`ClientIdDataSource`: clients named by their ids, as in TFF. A selection
is a list of ids (`{str}@CLIENTS`): a computation composed with a dataset
computation (`tff.simulation.compose_dataset_computation_with_learning_
process(client_data.dataset_computation, process)`) makes each client's
data from its id.

`select(k)` returns k distinct ids, drawn anew (with replacement across
calls) at each call. As `DatasetDataSource` here, and unlike TFF (which
draws from Python's global `random`), the draw is a pure function of the
source's `seed` and of how many selections the iterator made: a program
restarted from its program state (which keeps the iterator) selects what
the interrupted one would have. With no seed, a random one is drawn once
per source.
"""

import collections.abc
import json

import numpy as np

from canonical import errors
from canonical.program import data_source
from canonical.program import dataset_data_source
from canonical.program import file_program_state_manager

FORMAT = 'canonical.client_id_data_source_iterator'
LAYOUT = 1


def _check_client_ids(client_ids, where):
  if isinstance(client_ids, (str, bytes)) or not isinstance(
      client_ids, collections.abc.Sequence):
    raise errors.InvalidTypeError(
        f'{where}: client_ids must be a sequence (list or tuple) of str, '
        f'got {type(client_ids).__name__}.')
  if not client_ids:
    raise errors.InvalidValueError(
        f'{where}: client_ids is empty; give at least one client id.')
  for i, client_id in enumerate(client_ids):
    if not isinstance(client_id, str):
      raise errors.InvalidTypeError(
          f'{where}: client_ids[{i}] is a {type(client_id).__name__} '
          f'{client_id!r}, not a str.')
  return list(client_ids)


def _federated_type():
  from canonical.core import types  # pylint: disable=g-import-not-at-top
  return types.clients(types.TensorType(np.str_))


class ClientIdDataSourceIterator(data_source.FederatedDataSourceIterator):
  """Selections of `client_ids` (see the module's docstring); `position`
  counts the selections made so far."""

  def __init__(self, client_ids, *, seed=None, position=0):
    where = 'ClientIdDataSourceIterator'
    self._client_ids = _check_client_ids(client_ids, where)
    self._seed = dataset_data_source.check_seed(seed, where)
    self._position = file_program_state_manager.check_int(
        position, where, 'position')
    self._federated_type = _federated_type()

  @property
  def federated_type(self):
    """`{str}@CLIENTS`."""
    return self._federated_type

  @property
  def seed(self) -> int:
    return self._seed

  @property
  def position(self) -> int:
    return self._position

  def select(self, k: int | None = None) -> list[str]:
    """`k` of the client ids, distinct, drawn by the seed and position."""
    if k is not None and (isinstance(k, bool) or
                          not isinstance(k, (int, np.integer))):
      raise errors.InvalidTypeError(
          f'ClientIdDataSourceIterator.select: k must be an int, got '
          f'{type(k).__name__}.')
    if k is None or not 0 <= k <= len(self._client_ids):
      raise errors.InvalidValueError(
          f'ClientIdDataSourceIterator.select: k must be an int from 0 to '
          f'the number of client ids ({len(self._client_ids)}), got {k}.')
    rng = np.random.default_rng([self._seed, self._position])
    self._position += 1
    return [self._client_ids[i]
            for i in rng.choice(len(self._client_ids), int(k), replace=False)]

  def to_bytes(self) -> bytes:
    return json.dumps({'format': FORMAT, 'layout': LAYOUT,
                       'seed': self._seed, 'position': self._position,
                       'client_ids': self._client_ids}).encode('utf-8')

  @classmethod
  def from_bytes(cls, buffer: bytes) -> 'ClientIdDataSourceIterator':
    try:
      manifest = json.loads(bytes(buffer).decode('utf-8'))
      if manifest.get('format') != FORMAT or \
          manifest.get('layout') != LAYOUT:
        raise ValueError(f'not a {FORMAT} of layout {LAYOUT}')
      return cls(manifest['client_ids'], seed=manifest['seed'],
                 position=manifest['position'])
    except (KeyError, ValueError, TypeError, AttributeError,
            errors.Error) as e:
      raise errors.InvalidValueError(
          'ClientIdDataSourceIterator.from_bytes: these bytes are not an '
          f'iterator that to_bytes wrote ({type(e).__name__}: {e}).'
      ) from None

  def __eq__(self, other):
    if self is other:
      return True
    if not isinstance(other, ClientIdDataSourceIterator):
      return NotImplemented
    return (self._client_ids, self._seed, self._position) == (
        other._client_ids, other._seed, other._position)

  __hash__ = None


class ClientIdDataSource(data_source.FederatedDataSource):
  """Clients named by `client_ids` (a sequence of str); selections drawn
  by `seed` (see the module)."""

  def __init__(self, client_ids, *, seed=None):
    self._client_ids = _check_client_ids(client_ids, 'ClientIdDataSource')
    self._seed = dataset_data_source.check_seed(seed, 'ClientIdDataSource')
    self._federated_type = _federated_type()

  @property
  def federated_type(self):
    """`{str}@CLIENTS`."""
    return self._federated_type

  def iterator(self) -> ClientIdDataSourceIterator:
    """A new iterator, from the first selection of this source's seed."""
    return ClientIdDataSourceIterator(self._client_ids, seed=self._seed)
