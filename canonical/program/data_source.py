"""Where a federated program's client data comes from (TFF's
`FederatedDataSource`): a source describes the data and makes iterators;
each iterator selects the clients' data for one round at a time.

An iterator is serializable (`to_bytes` / `from_bytes`, TFF's
`tff.Serializable`), so a program can keep it in its program state and a
restarted run selects what the interrupted one would have.
"""

import abc


class FederatedDataSourceIterator(abc.ABC):
  """One pass over a data source's data, a selection at a time."""

  @property
  @abc.abstractmethod
  def federated_type(self):
    """The type of what `select` returns (a CLIENTS-placed type)."""

  @abc.abstractmethod
  def select(self, k: int | None = None):
    """The next selection of (at most `k`) clients' data, a value of
    `federated_type` to pass to a computation."""

  @classmethod
  @abc.abstractmethod
  def from_bytes(cls, buffer: bytes) -> 'FederatedDataSourceIterator':
    """The iterator `to_bytes` wrote."""

  @abc.abstractmethod
  def to_bytes(self) -> bytes:
    """This iterator, where it is, as bytes."""


class FederatedDataSource(abc.ABC):
  """Federated data: its type, and iterators over it."""

  @property
  @abc.abstractmethod
  def federated_type(self):
    """The type of what an iterator's `select` returns."""

  @abc.abstractmethod
  def iterator(self) -> FederatedDataSourceIterator:
    """A new, independent iterator over this source's data."""
