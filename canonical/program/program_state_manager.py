"""`ProgramStateManager`: what a federated program saves so that a restarted
run goes on where the last one stopped (TFF's fault tolerance).

Its methods are coroutines, as in TFF 0.87 (`await manager.save(state, 3)`);
code without an event loop calls them through `run_sync`.
"""

import abc
from typing import Generic, TypeVar

from canonical import errors

# TFF's names for what a manager saves, for program logic's annotations
# (`ProgramStateManager[ProgramStateStructure]`).
ProgramStateValue = object
ProgramStateStructure = TypeVar('ProgramStateStructure')


class ProgramStateExistsError(errors.Error, FileExistsError):
  """A version that is saved already (versions are written once)."""

  def __init__(self, *, version: int, path: str):
    super().__init__(f'Program state version {version} already exists in '
                     f'{path!r}; each version is saved once: save the next '
                     'one under a higher version.')


class ProgramStateNotFoundError(errors.Error, LookupError):
  """No program state is saved under the version asked for."""

  def __init__(self, version: int):
    super().__init__(f'No program state found for version: {version}.')


class ProgramStateManager(abc.ABC, Generic[ProgramStateStructure]):
  """Saves and loads program state by version (a strictly increasing int)."""

  @abc.abstractmethod
  async def get_versions(self) -> list[int] | None:
    """The saved versions, ascending, or None if none is saved."""

  @abc.abstractmethod
  async def load(self, version: int, structure):
    """The state saved as `version`, in the containers of `structure` (a
    value shaped like it, such as the initial state); raises
    ProgramStateNotFoundError if there is none."""

  async def load_latest(self, structure):
    """`(state, version)` of the highest saved version, or `(None, 0)` if
    nothing is saved."""
    versions = await self.get_versions()
    if not versions:
      return None, 0
    latest = max(versions)
    try:
      return await self.load(latest, structure), latest
    except ProgramStateNotFoundError:  # Removed since it was listed.
      return None, 0

  @abc.abstractmethod
  async def save(self, program_state, version: int) -> None:
    """Saves `program_state` as `version`; ProgramStateExistsError if that
    version is saved already."""
