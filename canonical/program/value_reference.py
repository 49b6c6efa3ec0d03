"""References to values not yet at hand (TFF's `MaterializableValueReference`),
and `materialize_value`, which every manager applies before it keeps a value.

A computation called from Python returns its values; under a
`NativeFederatedContext` (a program's platform lines), references resolved
over them, as TFF returns references. Program logic written against TFF's
interfaces (awaiting `materialize_value`) runs unchanged on either.
"""

import abc
import asyncio
from typing import Union

import numpy as np

from canonical import errors
from canonical.program import structure

# TFF's names for values and structures of them, for annotations.
MaterializableTypeSignature = object  # A tensor or sequence type.
MaterializedValue = Union[bool, int, float, complex, str, bytes, np.generic,
                          np.ndarray]
MaterializedStructure = object  # Containers of MaterializedValue.


class MaterializableValueReference(abc.ABC):
  """A server value that `get_value` produces when awaited."""

  @property
  @abc.abstractmethod
  def type_signature(self):
    """The type of the referenced value."""

  @abc.abstractmethod
  async def get_value(self):
    """The value: a numpy array or scalar, a Python scalar, or a sequence of
    them."""


class NativeValueReference(MaterializableValueReference):
  """A reference whose value is what an asyncio task (or any awaitable)
  returns; awaited once, however often `get_value` is called. `resolved`
  makes one over a value at hand (what `NativeFederatedContext` returns)."""

  def __init__(self, task, type_signature):
    self._task = task
    self._type_signature = type_signature
    self._resolved = False
    self._value = None

  @classmethod
  def resolved(cls, value, type_signature) -> 'NativeValueReference':
    """A reference to `value`, which `get_value` returns at once."""
    reference = cls(None, type_signature)
    reference._resolved, reference._value = True, value
    return reference

  @property
  def is_resolved(self) -> bool:
    """Whether the value is at hand (`value()` returns it without waiting)."""
    return self._resolved

  def value(self):
    """The value of a resolved reference."""
    if not self._resolved:
      raise errors.InvalidValueError(
          'NativeValueReference.value: this reference waits on a task; '
          'await get_value() instead.')
    return self._value

  def __tf_tensor__(self, dtype=None, name=None):
    """A resolved reference is its value to TensorFlow (a tf_computation
    called with it, as TFF's context takes references)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    return tf.convert_to_tensor(self.value(), dtype=dtype, name=name)

  def __array__(self, dtype=None, copy=None):
    del copy  # A new array either way.
    return np.array(self.value(), dtype=dtype)

  @property
  def type_signature(self):
    return self._type_signature

  async def get_value(self):
    if self._resolved:
      return self._value
    if not isinstance(self._task, asyncio.Future):
      self._task = asyncio.ensure_future(self._task)
    return await self._task

  def __eq__(self, other):
    if not isinstance(other, NativeValueReference):
      return NotImplemented
    if self._resolved or other._resolved:
      return self is other
    return (self._type_signature, self._task) == (other._type_signature,
                                                  other._task)

  __hash__ = object.__hash__


MaterializableValue = Union[MaterializedValue, MaterializableValueReference]
MaterializableStructure = object  # Containers of MaterializableValue.


async def materialize_value(value):
  """`value` (a structure) with each reference replaced by its value; the
  references are awaited concurrently. Containers are new, as in TFF."""
  leaves = structure.flatten_with_path(value)
  references = [(path, leaf) for path, leaf in leaves
                if isinstance(leaf, MaterializableValueReference)]
  values = await asyncio.gather(*[leaf.get_value() for _, leaf in references])
  found = {path: v for (path, _), v in zip(references, values)}
  return structure.map_structure(lambda path, leaf: found.get(path, leaf),
                                 value)
