"""`tff.types` of TensorFlow Federated 0.87 over the language's types.

A type here is a structure of `tf.TensorSpec` / `tf.data.DatasetSpec`, so
TFF's conversions between its types and TensorFlow's are mostly the identity.
Before 2026-11 this path was the language's types module, now
`canonical.core.types`: its other names are still served, with a warning.
"""

import warnings

import tensorflow as tf

from canonical.core import types as _core_types
from canonical.core.types import FederatedType
from canonical.core.types import FunctionType
from canonical.core.types import SequenceType
from canonical.core.types import StructType
from canonical.core.types import StructWithPythonType
from canonical.core.types import TensorType
from canonical.core.types import to_type
from canonical.core.types import type_at_clients as at_clients
from canonical.core.types import type_at_server as at_server

__all__ = [
    'FederatedType', 'FunctionType', 'SequenceType', 'StructType',
    'StructWithPythonType', 'TensorType', 'at_clients', 'at_server',
    'is_structure_of_floats', 'is_structure_of_integers',
    'is_structure_of_tensors', 'tensorflow_to_type', 'to_type',
    'type_to_tf_tensor_specs',
]


def tensorflow_to_type(obj):
  """The type of TensorFlow specs, dtypes or structures of them."""
  return to_type(obj)


def type_to_tf_tensor_specs(type_spec):
  """TensorFlow specs of a (member) type: the type itself."""
  return to_type(type_spec)


def _tensor_leaves(type_spec):
  member = getattr(type_spec, 'member', type_spec)
  leaves = tf.nest.flatten(to_type(member))
  return [leaf for leaf in leaves if isinstance(leaf, tf.TensorSpec)], leaves


def is_structure_of_tensors(type_spec):
  tensors, leaves = _tensor_leaves(type_spec)
  return len(tensors) == len(leaves)


def is_structure_of_floats(type_spec):
  tensors, leaves = _tensor_leaves(type_spec)
  return len(tensors) == len(leaves) and all(t.dtype.is_floating
                                             for t in tensors)


def is_structure_of_integers(type_spec):
  tensors, leaves = _tensor_leaves(type_spec)
  return len(tensors) == len(leaves) and all(t.dtype.is_integer
                                             for t in tensors)


def __getattr__(name):
  value = getattr(_core_types, name)  # AttributeError for unknown names.
  warnings.warn(f'canonical.types.{name} has moved to canonical.core.types; '
                'import it from there.', DeprecationWarning, stacklevel=2)
  return value
