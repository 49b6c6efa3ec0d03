"""`ReleaseManager`: where a federated program puts the values it releases
(metrics, a final model), and the managers that wrap others to filter,
group, thin out or delay releases.

`release` is a coroutine, as in TFF 0.87 (`await manager.release(metrics,
key=round_num)`); code without an event loop calls it through `run_sync`.
"""

import abc
import asyncio
import collections
import collections.abc
import datetime
from typing import Generic, TypeVar

from canonical import errors
from canonical.program import structure

# TFF's names for what a manager releases, for program logic's annotations
# (`ReleaseManager[ReleasableStructure, int]`).
ReleasableValue = object
ReleasableStructure = TypeVar('ReleasableStructure')
Key = TypeVar('Key')


class NotFilterableError(errors.Error, TypeError):
  """A structure that filtering would have to cut a field out of (a named
  tuple's or dataclass's fields are all or nothing)."""


class ReleaseManager(abc.ABC, Generic[ReleasableStructure, Key]):
  """Releases values, each under a key whose meaning the manager documents
  (a round number, say)."""

  @abc.abstractmethod
  async def release(self, value, key) -> None:
    """Releases `value` (a structure of values or references) as `key`."""


def _check_manager(manager, where):
  if not isinstance(manager, ReleaseManager):
    raise errors.InvalidTypeError(
        f'{where}: expected a tff.program.ReleaseManager, got '
        f'{type(manager).__name__}.')


_FILTERED = object()  # What remains of a subtree whose every leaf is out.


class FilteringReleaseManager(ReleaseManager):
  """Releases to `release_manager` only the leaves whose path (a tuple of
  keys, indices and field names; `()` for a lone value) `filter_fn`
  accepts; containers left empty go too, and if nothing is left nothing is
  released."""

  def __init__(self, release_manager: ReleaseManager, filter_fn):
    _check_manager(release_manager, 'FilteringReleaseManager')
    if not callable(filter_fn):
      raise errors.InvalidTypeError(
          f'FilteringReleaseManager: filter_fn must be callable (path -> '
          f'bool), got {type(filter_fn).__name__}.')
    self._release_manager = release_manager
    self._filter_fn = filter_fn

  def _filter(self, path, value):
    if not structure.is_container(value):
      return value if self._filter_fn(path) else _FILTERED
    pairs = [(k, self._filter(path + (k,), v))
             for k, v in structure.items(value)]
    kept = {k: v for k, v in pairs if v is not _FILTERED}
    if not kept:
      return _FILTERED
    if len(kept) == len(pairs):
      return structure.rebuild(value, kept)
    if structure.is_named_tuple(value) or \
        structure.is_dataclass_value(value):
      missing = [k for k, _ in pairs if k not in kept]
      raise NotFilterableError(
          f'FilteringReleaseManager: {type(value).__name__} at '
          f'{structure.describe_path(path)} would lose its fields {missing}, '
          'and the fields of a named tuple or dataclass cannot be filtered; '
          'keep all of them, or none.')
    if isinstance(value, collections.abc.Mapping):
      pairs = [(k, kept[k]) for k in value if k in kept]
      if isinstance(value, collections.defaultdict):
        return type(value)(value.default_factory, pairs)
      return type(value)(pairs)
    return type(value)(kept[i] for i in range(len(value)) if i in kept)

  async def release(self, value, key) -> None:
    filtered = self._filter((), value)
    if filtered is not _FILTERED:
      await self._release_manager.release(filtered, key=key)


class GroupingReleaseManager(ReleaseManager):
  """Releases each value to every manager of `release_managers`, at once."""

  def __init__(self, release_managers):
    if not isinstance(release_managers, collections.abc.Sequence) or \
        isinstance(release_managers, str):
      raise errors.InvalidTypeError(
          'GroupingReleaseManager: release_managers must be a sequence '
          f'(list or tuple) of release managers, got '
          f'{type(release_managers).__name__}.')
    if not release_managers:
      raise errors.InvalidValueError(
          'GroupingReleaseManager: release_managers is empty; give at least '
          'one release manager.')
    for i, manager in enumerate(release_managers):
      _check_manager(manager, f'GroupingReleaseManager: release_managers[{i}]')
    self._release_managers = release_managers

  async def release(self, value, key) -> None:
    await asyncio.gather(*[m.release(value, key=key)
                           for m in self._release_managers])


class PeriodicReleaseManager(ReleaseManager):
  """Releases every `periodicity`-th value (an int), or the first value
  once `periodicity` (a timedelta) has passed since the last release (or
  since construction)."""

  def __init__(self, release_manager: ReleaseManager, periodicity):
    _check_manager(release_manager, 'PeriodicReleaseManager')
    if isinstance(periodicity, bool) or not isinstance(
        periodicity, (int, datetime.timedelta)):
      raise errors.InvalidTypeError(
          'PeriodicReleaseManager: periodicity must be an int or a '
          f'datetime.timedelta, got {type(periodicity).__name__}.')
    if (isinstance(periodicity, int) and periodicity < 1) or (
        isinstance(periodicity, datetime.timedelta) and
        periodicity.total_seconds() < 1.0):
      raise errors.InvalidValueError(
          'PeriodicReleaseManager: periodicity must be a positive int or a '
          f'timedelta of at least a second, got {periodicity}.')
    self._release_manager = release_manager
    self._periodicity = periodicity
    self._count = 0
    self._timestamp = datetime.datetime.now()

  async def release(self, value, key) -> None:
    if isinstance(self._periodicity, int):
      self._count += 1
      if self._count % self._periodicity == 0:
        await self._release_manager.release(value, key=key)
      return
    now = datetime.datetime.now()
    if now >= self._timestamp + self._periodicity:
      self._timestamp = now
      await self._release_manager.release(value, key=key)


class DelayedReleaseManager(ReleaseManager):
  """Releases nothing until `release` has been called `delay` times, then
  every value (from the `delay`-th on)."""

  def __init__(self, release_manager: ReleaseManager, delay: int):
    _check_manager(release_manager, 'DelayedReleaseManager')
    if isinstance(delay, bool) or not isinstance(delay, int) or delay < 1:
      raise errors.InvalidValueError(
          f'DelayedReleaseManager: delay must be a positive int, got '
          f'{delay!r}.')
    self._release_manager = release_manager
    self._delay = delay
    self._count = 0

  async def release(self, value, key) -> None:
    self._count += 1
    if self._count >= self._delay:
      await self._release_manager.release(value, key=key)
