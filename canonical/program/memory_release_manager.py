"""Release managers that keep values in memory or write them to the log."""

import collections
import collections.abc
import logging

from canonical import errors
from canonical.program import release_manager
from canonical.program import value_reference

_log = logging.getLogger('canonical.program')


class MemoryReleaseManager(release_manager.ReleaseManager):
  """Keeps each released value (references materialized) under its key; a
  key released again replaces its value and keeps its place."""

  def __init__(self):
    self._values = collections.OrderedDict()

  async def release(self, value, key) -> None:
    if not isinstance(key, collections.abc.Hashable):
      raise errors.InvalidTypeError(
          f'MemoryReleaseManager.release: the key must be hashable, got '
          f'{type(key).__name__}.')
    self._values[key] = await value_reference.materialize_value(value)

  def remove_all(self) -> None:
    """Forgets every released value."""
    self._values = collections.OrderedDict()

  def values(self) -> collections.OrderedDict:
    """key -> released value, in the order keys were first released."""
    return self._values.copy()


class LoggingReleaseManager(release_manager.ReleaseManager):
  """Writes each released value (references materialized), and its key if
  not None, to the 'canonical.program' logger at INFO."""

  async def release(self, value, key) -> None:
    value = await value_reference.materialize_value(value)
    _log.info('Releasing')
    _log.info('  value: %s', value)
    if key is not None:
      _log.info('  key: %s', key)
