"""Types from the spellings TFF takes (dtypes, `(dtype, shape)`, Python
containers, `Struct` values) and from TensorFlow's specs: `to_type`, and
what each class's constructor does with its element types."""

import collections
import collections.abc

import numpy as np
import tensorflow as tf

from canonical.core import naming
from canonical.core import struct as struct_lib
from canonical.core import type_base
from canonical.core.federated_types import FederatedType
from canonical.core.leaf_types import _as_dtype
from canonical.core.leaf_types import SequenceType
from canonical.core.leaf_types import TensorType
from canonical.core.member_structures import spec_of
from canonical.core.struct import Struct
from canonical.core.struct_types import _is_attrs_class
from canonical.core.struct_types import _is_pair
from canonical.core.struct_types import _struct
from canonical.core.struct_types import elements_of
from canonical.core.struct_types import StructType
from canonical.core.type_base import _fail
from canonical.core.type_base import Type
from canonical import errors


def _is_array_shape(value):
  return value is None or (
      isinstance(value, (list, tuple)) and not hasattr(value, '_fields') and
      all(d is None or (isinstance(d, (int, np.integer)) and
                        not isinstance(d, bool)) for d in value))


def _to_type(value, where):
  """TFF's `to_type`, also taking TensorFlow's specs and dtypes; names
  `where` and the user's line when `value` is no type."""
  if isinstance(value, Type):
    return value
  if isinstance(value, tf.TensorSpec):
    return TensorType(value.dtype, None if value.shape.rank is None
                      else value.shape)
  if isinstance(value, tf.data.DatasetSpec):
    return SequenceType(value.element_spec)
  dtype = _as_dtype(value)
  if dtype is not None:
    return TensorType(dtype)
  if (isinstance(value, tuple) and not hasattr(value, '_fields') and
      len(value) == 2 and _as_dtype(value[0]) is not None and
      (_is_array_shape(value[1]) or isinstance(value[1], tf.TensorShape))):
    return TensorType(value[0], value[1])
  if isinstance(value, Struct):
    names = struct_lib.names_of(value)
    pairs = [(name, _to_type(v, where)) for name, v in zip(names, value)]
    if any(name is not None for name in names):
      if None in names:
        _fail(where, 'name every element of the Struct or none.')
      return _struct(pairs, struct_lib.layout(tuple(names)), None)
    return _struct(pairs, tuple, None)
  if isinstance(value, (list, tuple)) and not hasattr(value, '_fields') and \
      any(_is_pair(e) for e in value):
    return StructType(value)  # (name, type) pairs: no Python container.
  if isinstance(value, (list, tuple, collections.abc.Mapping)):
    container = type(value)
    if isinstance(value, collections.abc.Mapping) and not issubclass(
        container, dict):
      _fail(where, f'a mapping type must be a dict (dict, OrderedDict, ...), '
            f'got {naming.describe_object(container)}.')
    pairs = [(name, _to_type(v, where)) for name, v in elements_of(value)]
    return _struct(pairs, container, container)
  if _is_attrs_class(type(value)):
    # Held as a Struct layout (an attrs instance cannot hold types); values
    # of the type are made the attrs class, as TFF 0.87 makes them.
    pairs = [(name, _to_type(v, where)) for name, v in elements_of(value)]
    return _struct(pairs, struct_lib.layout(tuple(n for n, _ in pairs)),
                   type(value))
  _fail(where, f'expected a type (tf.TensorSpec, tf.data.DatasetSpec, '
        f'TensorType, SequenceType, a dtype, or a structure of them), found '
        f'{naming.describe_object(value)}.')


def to_type(obj):
  """TFF's `to_type(obj)`: a type from a `Type`, a dtype, `(dtype, shape)`,
  a TensorFlow spec, or a structure of them (a list of `(name, type)` pairs
  is a struct with no Python container; a tuple, list, dict or namedtuple a
  struct held in one)."""
  return _to_type(obj, 'to_type')


def tensorflow_to_type(obj):
  """TFF's `tensorflow_to_type`: a type from TensorFlow specs, dtypes and
  `(dtype, tf.TensorShape)`, or structures of them."""
  return _to_type(obj, 'tensorflow_to_type')


def to_member(value, where='type'):
  """The member type (what one place holds) of a type in any spelling
  `to_type` takes: a tensor, a sequence, or a structure of them. Raises
  `FederatedError` naming `where` and the caller's line."""
  if isinstance(value, FederatedType):
    _fail(where, f'{value} is a placed type where a member type (what one '
          'place holds) is expected; drop type_at_server / type_at_clients.')
  member = _to_type(value, where)
  for leaf in tf.nest.flatten(member):
    if not isinstance(leaf, (TensorType, SequenceType)):
      _fail(where, f'a member type holds tensors and sequences, found '
            f'{leaf} in {member}.')
  return member


def is_type(value):
  """Whether `value` is a member type in some accepted spelling."""
  try:
    to_member(value)
  except errors.FederatedError:
    return False
  return True


def member_of(structure):
  """The member type of a structure of values."""
  return to_type(tf.nest.map_structure(spec_of, structure))


# A computation's several parameters --------------------------------------


def parameter_of(types, names):
  """TFF's parameter type of a computation taking `types` (one per Python
  parameter named `names`): None, the one type, or a struct named by them,
  which unpacks into the parameters' types as TFF's does."""
  if not types:
    return None
  if len(types) == 1:
    return to_type(types[0])
  # TFF's is an OrderedDict struct that unpacks into the types; held as a
  # Struct layout, it does (a dict would give the names).
  return _struct([(name, to_type(t)) for name, t in zip(names, types)],
                 struct_lib.layout(tuple(names)), collections.OrderedDict)


# The classes call these (see `type_base`).
type_base.conversions.to_type = to_type
type_base.conversions.to_member = to_member
type_base.conversions.convert = _to_type
