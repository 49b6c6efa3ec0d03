"""TFF's `TensorType` and `SequenceType`, which are TensorFlow's
`tf.TensorSpec` and `tf.data.DatasetSpec` (the leaves `tf.nest` finds in a
member type), and the numpy-readable dtypes TFF 0.87 gives."""

from typing import Optional, Union

import numpy as np
import tensorflow as tf

from canonical.core import naming
from canonical.core.member_structures import has_dataset
from canonical.core.naming import describe
from canonical.core.struct_types import _struct
from canonical.core.struct_types import elements_of
from canonical.core.struct_types import StructType
from canonical.core.type_base import _as_type_or_none
from canonical.core.type_base import _fail
from canonical.core.type_base import conversions
from canonical.core.type_base import Type


# TensorType --------------------------------------------------------------


class _NumpyDType(tf.dtypes.DType):
  """A `tf.DType` that numpy reads as its own dtype, as TFF 0.87's
  `TensorType.dtype` is: `np.dtype(d)`, `np.issubdtype(d, np.floating)`,
  `d.type`, `d.kind`, `d.itemsize`. TensorFlow reads it as the DType it is."""

  @property
  def type(self):
    return np.str_ if self.as_datatype_enum == tf.string.as_datatype_enum \
        else self.as_numpy_dtype

  @property
  def dtype(self):  # numpy's protocol: np.dtype(obj) reads obj.dtype.
    return np.dtype(self.type)

  @property
  def kind(self):
    return self.dtype.kind

  @property
  def itemsize(self):
    return self.dtype.itemsize

  @property
  def char(self):
    return self.dtype.char

  @property
  def str(self):
    return self.dtype.str


_DTYPES = {}


def _numpy_dtype(dtype):
  enum_value = dtype.as_datatype_enum
  if enum_value not in _DTYPES:
    _DTYPES[enum_value] = _NumpyDType(enum_value)
  return _DTYPES[enum_value]


def _as_dtype(value):
  """The tf.DType `value` names (tf.float32, np.float32, a numpy dtype), or
  None."""
  if isinstance(value, tf.DType):
    return tf.as_dtype(value)
  if isinstance(value, np.dtype) or (
      isinstance(value, type) and issubclass(value, np.generic)):
    try:
      return tf.as_dtype(value)
    except TypeError:
      return None
  return None


def _is_shape(value):
  if value is None or isinstance(value, tf.TensorShape):
    return True
  return isinstance(value, (list, tuple)) and all(
      d is None or (isinstance(d, (int, np.integer)) and not isinstance(
          d, bool)) for d in value)


class TensorType(Type, tf.TensorSpec):
  """TFF's `TensorType(dtype, shape=())`: a `tf.TensorSpec` with no name.
  `shape=None` means an unknown rank; a tf.DType is taken too."""

  __slots__ = ()

  def __init__(self, dtype, shape=()):  # pylint: disable=super-init-not-called
    as_dtype = _as_dtype(dtype)
    if as_dtype is None:
      _fail('TensorType', f'expected a dtype such as np.float32, got '
            f'{naming.describe_object(dtype)}.')
    if not _is_shape(shape):
      _fail('TensorType', f'expected a shape (a list of ints and None, or '
            f'None), got {naming.describe_object(shape)}.')
    tf.TensorSpec.__init__(self, tf.TensorShape(shape), as_dtype)
    self._dtype = _numpy_dtype(as_dtype)

  def children(self):
    return iter(())

  def is_assignable_from(self, source_type) -> bool:
    source = _as_type_or_none(source_type)
    if not isinstance(source, TensorType) or self.dtype != source.dtype:
      return False
    target_dims, source_dims = self.shape.dims, source.shape.dims
    if target_dims is None:
      return True
    if source_dims is None or len(target_dims) != len(source_dims):
      return False
    return all(t.value is None or t.value == s.value
               for t, s in zip(target_dims, source_dims))

  def _plain(self):
    return tf.TensorSpec(self.shape, tf.as_dtype(self.dtype))

  def __eq__(self, other):
    if self is other:
      return True
    if not isinstance(other, tf.TensorSpec):
      return NotImplemented
    return self.dtype == other.dtype and self.shape == other.shape

  def __ne__(self, other):
    equal = self.__eq__(other)
    return equal if equal is NotImplemented else not equal

  __hash__ = tf.TensorSpec.__hash__

  def __repr__(self):
    dtype = f'np.{self.dtype.type.__name__}'
    if self.shape.rank == 0:
      return f'TensorType({dtype})'
    shape = None if self.shape.rank is None else tuple(self.shape.as_list())
    return f'TensorType({dtype}, {shape!r})'

  def __reduce__(self):
    shape = None if self.shape.rank is None else self.shape.as_list()
    return TensorType, (tf.as_dtype(self.dtype), shape)

  def __copy__(self):
    return self

  def __deepcopy__(self, memo):
    return self

  # TensorFlow's own operations on specs give plain TensorSpecs back.
  @classmethod
  def _deserialize(cls, serialization):
    return tf.TensorSpec(*serialization)

  def is_compatible_with(self, spec_or_tensor):
    return self._plain().is_compatible_with(spec_or_tensor)

  def is_subtype_of(self, other):
    return self._plain().is_subtype_of(_plain_spec(other))

  def most_specific_common_supertype(self, others):
    return self._plain().most_specific_common_supertype(
        [_plain_spec(o) for o in others])


def _plain_spec(spec):
  plain = getattr(spec, '_plain', None)
  return plain() if callable(plain) else spec


# SequenceType --------------------------------------------------------------


class SequenceType(Type, tf.data.DatasetSpec):
  """TFF's `SequenceType(element)`: a `tf.data.DatasetSpec` whose element
  type is `element` (lists in it become tuples, as datasets make them)."""

  def __init__(self, element):  # pylint: disable=super-init-not-called
    element = _tuples_for_lists(
        conversions.to_member(element, 'SequenceType'))
    if has_dataset(element):
      _fail('SequenceType', f'elements cannot be sequences, got '
            f'{describe(element)}.')
    tf.data.DatasetSpec.__init__(self, element)

  @property
  def element(self):
    return self._element_spec

  def children(self):
    yield self._element_spec

  def is_assignable_from(self, source_type) -> bool:
    source = _as_type_or_none(source_type)
    return isinstance(source, SequenceType) and (
        self.element.is_assignable_from(source.element))

  def _plain(self):
    return tf.data.DatasetSpec(self._element_spec, self._dataset_shape)

  def __eq__(self, other):
    if self is other:
      return True
    if not isinstance(other, tf.data.DatasetSpec):
      return NotImplemented
    return self.element == other.element_spec

  def __ne__(self, other):
    equal = self.__eq__(other)
    return equal if equal is NotImplemented else not equal

  def __hash__(self):
    return hash(('SequenceType', self.element))

  def __repr__(self):
    return f'SequenceType({self.element!r})'

  def __reduce__(self):
    return SequenceType, (self.element,)

  def __copy__(self):
    return self

  def __deepcopy__(self, memo):
    return self

  @classmethod
  def _deserialize(cls, serialization):
    return tf.data.DatasetSpec(*serialization)

  def is_compatible_with(self, spec_or_value):
    return self._plain().is_compatible_with(_plain_spec(spec_or_value))

  def is_subtype_of(self, other):
    return self._plain().is_subtype_of(_plain_spec(other))

  def most_specific_common_supertype(self, others):
    return self._plain().most_specific_common_supertype(
        [_plain_spec(o) for o in others])


def _tuples_for_lists(member):
  """`member` with list containers made tuples (a dataset's elements)."""
  if isinstance(member, StructType):
    pairs = [(name, _tuples_for_lists(value))
             for name, value in elements_of(member)]
    container = type(member)._container  # pylint: disable=protected-access
    if issubclass(container, list):
      container = tuple
    python_container = member.python_container
    if python_container is list:
      python_container = tuple
    return _struct(pairs, container, python_container)
  return member


ArrayShape = Union[tuple[Optional[int], ...], None, tuple[()]]
