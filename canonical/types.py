"""`tff.types` of TensorFlow Federated 0.87.

The type classes live in `canonical.core.types` (a type there is also the
structure of TensorFlow specs the language computes with: see its
docstring); this module adds TFF's functions over them: walking a type
(`contains`, `count`), asking what it holds (`is_structure_of_floats`, ...),
converting values and specs (`type_to_py_container`,
`structure_from_tensor_type_tree`, `type_to_tf_tensor_specs`), shapes, and
serialization in TFF's own messages. Each takes a type in any spelling
`to_type` takes. Before 2026-11 this path was the language's types module,
now `canonical.core.types`: its other names are still served, with a
warning.
"""

import collections
import functools
import operator
import warnings

import numpy as np
import tensorflow as tf

from canonical.core import struct as struct_lib
from canonical.core import types as _core_types
from canonical.core.type_serialization import deserialize_type
from canonical.core.type_serialization import serialize_type
from canonical.core.types import AbstractType
from canonical.core.types import ArrayShape
from canonical.core.types import FederatedType
from canonical.core.types import FunctionType
from canonical.core.types import PlacementType
from canonical.core.types import SequenceType
from canonical.core.types import StructType
from canonical.core.types import StructWithPythonType
from canonical.core.types import TensorType
from canonical.core.types import tensorflow_to_type
from canonical.core.types import to_type
from canonical.core.types import Type
from canonical.core.types import type_at_clients as at_clients
from canonical.core.types import type_at_server as at_server
from canonical.core.types import type_mismatch_error_message
from canonical.core.types import TypeNotAssignableError
from canonical.core.types import TypeRelation
from canonical.core.types import TypesNotEquivalentError
from canonical.core.types import TypesNotIdenticalError
from canonical.core.types import UnexpectedTypeError
from canonical import errors

__all__ = [
    'AbstractType', 'ArrayShape', 'FederatedType', 'FunctionType',
    'PlacementType', 'SequenceType', 'StructType', 'StructWithPythonType',
    'TensorType', 'Type', 'TypeNotAssignableError', 'TypeRelation',
    'TypesNotEquivalentError', 'TypesNotIdenticalError',
    'UnexpectedTypeError', 'at_clients', 'at_server', 'contains',
    'contains_only', 'count', 'deserialize_type', 'is_shape_fully_defined',
    'is_structure_of_floats', 'is_structure_of_integers',
    'is_structure_of_tensors', 'is_tensorflow_compatible_type',
    'num_elements_in_shape', 'serialize_type',
    'structure_from_tensor_type_tree', 'tensorflow_to_type', 'to_type',
    'type_mismatch_error_message', 'type_to_py_container',
    'type_to_tf_tensor_specs',
]


# Walking a type.


def _preorder(type_signature):
  yield type_signature
  for child in type_signature.children():
    yield from _preorder(child)


def count(type_signature, predicate) -> int:
  """How many types in `type_signature` (itself included) pass `predicate`."""
  return sum(1 for t in _preorder(to_type(type_signature)) if predicate(t))


def contains(type_signature, predicate) -> bool:
  """Whether some type in `type_signature` passes `predicate`."""
  return any(predicate(t) for t in _preorder(to_type(type_signature)))


def contains_only(type_signature, predicate) -> bool:
  """Whether every type in `type_signature` passes `predicate`."""
  return all(predicate(t) for t in _preorder(to_type(type_signature)))


# What a type holds.


def _structure_of(type_spec, dtype_test):
  t = to_type(type_spec)
  if isinstance(t, TensorType):
    return dtype_test(t.dtype)
  if isinstance(t, StructType):
    return all(_structure_of(value, dtype_test)
               for _, value in _core_types.elements_of(t))
  if isinstance(t, FederatedType):
    return _structure_of(t.member, dtype_test)
  return False


def is_structure_of_floats(type_spec) -> bool:
  """Whether `type_spec` (or a federated type's member) holds only floating
  point tensors; an empty struct does."""
  return _structure_of(type_spec,
                       lambda d: np.issubdtype(d, np.floating))


def is_structure_of_integers(type_spec) -> bool:
  """Whether `type_spec` (or a federated type's member) holds only integer
  tensors; an empty struct does."""
  return _structure_of(type_spec,
                       lambda d: np.issubdtype(d, np.integer))


def is_structure_of_tensors(type_spec) -> bool:
  """Whether `type_spec` is made of struct and tensor types only."""
  return contains_only(type_spec,
                       lambda t: isinstance(t, (StructType, TensorType)))


def is_tensorflow_compatible_type(type_spec) -> bool:
  """Whether a TensorFlow computation can take or return `type_spec`:
  tensors, sequences and structs of them (None: no parameter, it can)."""
  if type_spec is None:
    return True
  return contains_only(type_spec, lambda t: isinstance(
      t, (SequenceType, StructType, TensorType)))


# Shapes: TFF's ArrayShape is a tuple of sizes (None where unknown), or None
# for an unknown rank; a tf.TensorShape is taken too.


def _dims(shape):
  if isinstance(shape, tf.TensorShape):
    return None if shape.rank is None else shape.as_list()
  return None if shape is None else list(shape)


def is_shape_fully_defined(shape) -> bool:
  """Whether `shape` has a known rank and every size known."""
  dims = _dims(shape)
  return dims is not None and all(d is not None for d in dims)


def num_elements_in_shape(shape):
  """The number of elements of a fully defined `shape`, else None."""
  if not is_shape_fully_defined(shape):
    return None
  return functools.reduce(operator.mul, _dims(shape), 1)


# Conversions between types, values and TensorFlow's specs.


def _container_of(struct_type, pairs):
  """`pairs` in `struct_type`'s Python container; TFF's OrderedDict (named)
  or tuple (unnamed) where it has none."""
  named = [name is not None for name, _ in pairs]
  if any(named) and not all(named):
    raise errors.InvalidValueError(
        f'{struct_type} mixes named and unnamed elements: no Python '
        'container holds it.')
  container = struct_type.python_container
  if container is None:
    container = collections.OrderedDict if any(named) else tuple
  if any(named) and issubclass(container, (list, tuple)) and not hasattr(
      container, '_fields'):
    raise errors.InvalidValueError(
        f'a {container.__name__} cannot hold the named elements of '
        f'{struct_type}.')
  if hasattr(container, '_fields') or hasattr(container, '__attrs_attrs__'):
    return container(**dict(pairs))
  if issubclass(container, dict):
    return container(pairs)
  return container(value for _, value in pairs)


def type_to_py_container(value, type_spec):
  """`value` with every `Struct` in it made the Python container its type
  names (an OrderedDict or a tuple where the type names none); values
  already in containers are kept, a CLIENTS value is a list of members."""
  t = to_type(type_spec)
  if isinstance(t, FederatedType):
    if not t.all_equal:
      if not isinstance(value, list):
        raise errors.InvalidTypeError(
            f'type_to_py_container: a value of {t} is a list (one member per '
            f'client), got {type(value).__name__}.')
      return [type_to_py_container(v, t.member) for v in value]
    t = t.member
  if isinstance(t, SequenceType):
    if isinstance(value, list):
      return [type_to_py_container(v, t.element) for v in value]
    return value
  if not isinstance(t, StructType) or not isinstance(
      value, struct_lib.Struct) or isinstance(value, Type):
    return value
  type_pairs = _core_types.elements_of(t)
  value_names = struct_lib.names_of(value)
  for given, expected in zip(value_names, (name for name, _ in type_pairs)):
    if given is not None and given != expected:
      raise errors.InvalidValueError(
          f'type_to_py_container: a value with field {given!r} cannot take '
          f'the type {t}, whose field there is {expected!r}.')
  pairs = [(name, type_to_py_container(v, element))
           for (name, element), v in zip(type_pairs, value)]
  return _container_of(t, pairs)


def structure_from_tensor_type_tree(fn, type_spec):
  """The structure of `type_spec` (tensors and structs of them) in its
  Python containers, with `fn(tensor_type)` at each tensor, called once per
  tensor in order."""
  t = to_type(type_spec)
  if isinstance(t, TensorType):
    return fn(t)
  if isinstance(t, StructType):
    pairs = [(name, structure_from_tensor_type_tree(fn, value))
             for name, value in _core_types.elements_of(t)]
    return _container_of(t, pairs)
  raise errors.InvalidValueError(
      f'structure_from_tensor_type_tree: expected a tensor or struct type, '
      f'found {t}.')


def type_to_tf_tensor_specs(type_spec):
  """The `tf.TensorSpec`s of `type_spec` in its Python containers (an
  OrderedDict or a tuple where a struct names none); a sequence is a
  `tf.data.DatasetSpec` (TFF 0.87 refuses one)."""
  t = to_type(type_spec)
  if isinstance(t, FederatedType):
    t = t.member
  if isinstance(t, SequenceType):
    return tf.data.DatasetSpec(type_to_tf_tensor_specs(t.element))
  if isinstance(t, StructType):
    return _container_of(t, [(name, type_to_tf_tensor_specs(value))
                             for name, value in _core_types.elements_of(t)])
  if isinstance(t, TensorType):
    return tf.TensorSpec(t.shape, tf.as_dtype(t.dtype))
  raise errors.InvalidValueError(
      f'type_to_tf_tensor_specs: {t} holds no tensors.')


def __getattr__(name):
  value = getattr(_core_types, name)  # AttributeError for unknown names.
  warnings.warn(f'canonical.types.{name} has moved to canonical.core.types; '
                'import it from there.', DeprecationWarning, stacklevel=2)
  return value
