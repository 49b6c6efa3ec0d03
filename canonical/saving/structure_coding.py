"""Member structures (TensorSpec / DatasetSpec trees) <-> TensorFlow's `StructuredValue`.

Decoding a file's structure first walks the proto and accepts only the kinds
a member structure is made of (tuples, lists, dicts, named tuples, tensor
specs, dataset specs), so TensorFlow's decoder never meets anything else.
"""

import tensorflow as tf
from tensorflow.core.protobuf import struct_pb2
from tensorflow.python.saved_model import nested_structure_coder

from canonical.core import types as ft
from canonical import errors

_MAX_DEPTH = 64
_DATASET_SPEC = struct_pb2.TypeSpecProto.DATA_DATASET_SPEC


class StructureError(errors.Error, ValueError):
  """A StructuredValue that is not a member structure."""


def encode(structure):
  """The `StructuredValue` of a member structure."""
  return nested_structure_coder.encode_structure(structure)


def decode(value):
  """The member structure of a `StructuredValue`; raises `StructureError`."""
  _check(value, depth=0, in_type_state=False)
  try:
    structure = nested_structure_coder.decode_proto(value)
    return ft.check_member(structure, 'structure')
  except Exception as e:  # TF's decoder raises many kinds on bad input.
    raise StructureError(f'{type(e).__name__}: {e}') from e


def _check(value, depth, in_type_state):
  if depth > _MAX_DEPTH:
    raise StructureError(f'nested deeper than {_MAX_DEPTH} levels')
  kind = value.WhichOneof('kind')
  if kind in ('list_value', 'tuple_value'):
    for item in getattr(value, kind).values:
      _check(item, depth + 1, in_type_state)
  elif kind == 'dict_value':
    for item in value.dict_value.fields.values():
      _check(item, depth + 1, in_type_state)
  elif kind == 'named_tuple_value':
    for pair in value.named_tuple_value.values:
      _check(pair.value, depth + 1, in_type_state)
  elif kind == 'tensor_spec_value':
    pass
  elif kind == 'tensor_shape_value' and in_type_state:
    pass  # A DatasetSpec's dataset shape.
  elif kind == 'type_spec_value':
    spec = value.type_spec_value
    if spec.type_spec_class != _DATASET_SPEC:
      raise StructureError(
          'only TensorSpec and DatasetSpec leaves are allowed, found type '
          f'spec class {spec.type_spec_class} {spec.type_spec_class_name!r}')
    _check(spec.type_state, depth + 1, in_type_state=True)
  else:
    raise StructureError(f'unexpected {kind or "empty value"} in a member '
                         'structure')


def flat_specs(structure):
  """The leaves of a member structure, in the order of its bindings."""
  return tf.nest.flatten(structure)
