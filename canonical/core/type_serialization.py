"""Types to and from TFF 0.87's type messages (`proto/tff_type.proto`): the
same fields and numbers as TFF's, so the bytes are TFF's.

As in TFF, a struct's Python container is not serialized: a struct comes
back without one (its elements named or not).
"""

import tensorflow as tf

from canonical.core import tff_type_pb2 as pb
from canonical.core import types as ft
from canonical import errors

_PLACEMENTS = {p.uri: p for p in ft.Placement}


def serialize_type(type_spec) -> pb.Type:
  """The `Type` message of `type_spec` (any spelling `to_type` takes)."""
  t = ft.to_type(type_spec)
  if isinstance(t, ft.TensorType):
    shape = t.shape
    dims = [] if shape.rank is None else [
        -1 if d is None else d for d in shape.as_list()]
    return pb.Type(tensor=pb.TensorType(
        dtype=tf.as_dtype(t.dtype).as_datatype_enum, dims=dims,
        unknown_rank=shape.rank is None))
  if isinstance(t, ft.SequenceType):
    return pb.Type(sequence=pb.SequenceType(element=serialize_type(
        t.element)))
  if isinstance(t, ft.StructType):
    return pb.Type(struct=pb.StructType(element=[
        pb.StructType.Element(name=name or '', value=serialize_type(value))
        for name, value in ft.elements_of(t)]))
  if isinstance(t, ft.FunctionType):
    return pb.Type(function=pb.FunctionType(
        parameter=None if t.parameter is None else serialize_type(
            t.parameter),
        result=serialize_type(t.result)))
  if isinstance(t, ft.FederatedType):
    return pb.Type(federated=pb.FederatedType(
        placement=pb.PlacementSpec(value=pb.Placement(uri=t.placement.uri)),
        all_equal=t.all_equal, member=serialize_type(t.member)))
  if isinstance(t, ft.PlacementType):
    return pb.Type(placement=pb.PlacementType())
  if isinstance(t, ft.AbstractType):
    return pb.Type(abstract=pb.AbstractType(label=t.label))
  raise errors.InvalidTypeError(f'serialize_type: cannot serialize {t!r}.')


def deserialize_type(type_proto):
  """The type of a `Type` message (or of its serialized bytes)."""
  if isinstance(type_proto, (bytes, bytearray)):
    type_proto = pb.Type.FromString(bytes(type_proto))
  if not isinstance(type_proto, pb.Type):
    raise errors.InvalidTypeError(
        f'deserialize_type: expected a Type message or its bytes, got '
        f'{type(type_proto).__name__}.')
  kind = type_proto.WhichOneof('type')
  if kind == 'tensor':
    tensor = type_proto.tensor
    shape = None if tensor.unknown_rank else [
        None if d < 0 else d for d in tensor.dims]
    return ft.TensorType(tf.as_dtype(tensor.dtype), shape)
  if kind == 'sequence':
    return ft.SequenceType(deserialize_type(type_proto.sequence.element))
  if kind == 'struct':
    return ft.StructType([
        (e.name, deserialize_type(e.value)) if e.name else
        deserialize_type(e.value) for e in type_proto.struct.element])
  if kind == 'function':
    function = type_proto.function
    parameter = deserialize_type(function.parameter) if function.HasField(
        'parameter') else None
    return ft.FunctionType(parameter, deserialize_type(function.result))
  if kind == 'federated':
    federated = type_proto.federated
    uri = federated.placement.value.uri
    if federated.placement.WhichOneof('placement') != 'value' or (
        uri not in _PLACEMENTS):
      raise errors.InvalidValueError(
          f'deserialize_type: placement {federated.placement} is neither '
          'SERVER nor CLIENTS.')
    return ft.FederatedType(deserialize_type(federated.member),
                            _PLACEMENTS[uri], federated.all_equal)
  if kind == 'placement':
    return ft.PlacementType()
  if kind == 'abstract':
    return ft.AbstractType(type_proto.abstract.label)
  raise errors.InvalidValueError(
      f'deserialize_type: the message holds no type ({kind}).')
