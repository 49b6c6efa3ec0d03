"""A form file's parts without TensorFlow, for `python -m canonical inspect`.

Importing TensorFlow takes seconds, and describing a form needs none of it.
This reader parses a form file with its own copy of the schema (the form's
messages and the TensorFlow ones they embed, `GraphDef` and
`StructuredValue`) in a descriptor pool of its own, so it never meets
TensorFlow's registrations when both are loaded; and it renders structures,
secure sums and bit counts as the loader's modules do. What it needs of
TensorFlow and of those modules is in `tf_snapshot.py`, written by
`python -m canonical.saving.tf_free_reader` from them; a test keeps it
current.

It answers only what it is sure of: a local file, intact, read where the
snapshot's TensorFlow version is installed, with the pieces the loader
requires and structures of the shapes it writes. Otherwise `read` returns
None, or a leaf raises `Unsure`, and the caller goes through the loader's
own checks, which name what is wrong.
"""

import collections
import dataclasses
import functools
import hashlib
import os
import struct
import sys

from canonical import io as storage_lib
from canonical.core import bits_text
from canonical.core import secure_sum_rules
from canonical.saving import tf_snapshot

_SNAPSHOT = 'canonical/saving/tf_snapshot.py'
_MAX_DEPTH = 64  # As structure_coding's check.


class Unsure(Exception):
  """This reader cannot vouch for its answer: ask the loader."""


@dataclasses.dataclass(frozen=True)
class Reading:
  proto: object   # A `fedcanon.Form` message of this reader's pool.
  size: int       # Bytes in the file.
  leaves: object  # `Leaves`.


def read(path):
  """The parsed form at local `path`, or None if this reader is unsure."""
  if (_tensorflow_version() != tf_snapshot.TENSORFLOW_VERSION or
      not storage_lib.is_local(path)):
    return None
  try:
    data = storage_lib.default().read_bytes(path)
  except (OSError, ValueError):  # ValueError: a NUL in the path.
    return None
  unwrapped = _unwrap(data)
  if unwrapped is None:
    return None
  payload, version = unwrapped
  proto = _form_class()()
  try:
    proto.ParseFromString(payload)
  except Exception:  # pylint: disable=broad-except  # The loader says why.
    return None
  names = [piece.name for piece in proto.pieces]
  if (proto.format_version != version or len(set(names)) != len(names) or
      not set(names) <= set(tf_snapshot.PIECES + tf_snapshot.OPTIONAL_PIECES)
      or not set(tf_snapshot.PIECES) <= set(names)):
    return None
  return Reading(proto, len(data), Leaves())


def _tensorflow_version():
  """The installed TensorFlow's version, read without importing it; None
  when it cannot be told."""
  if 'tensorflow' in sys.modules:
    return getattr(sys.modules['tensorflow'], '__version__', None)
  import importlib.metadata  # pylint: disable=g-import-not-at-top
  versions = set()
  for distribution in ('tensorflow', 'tensorflow-cpu'):
    try:
      versions.add(importlib.metadata.version(distribution))
    except importlib.metadata.PackageNotFoundError:
      pass
  return versions.pop() if len(versions) == 1 else None


def _unwrap(data):
  """(payload, format version) of an intact envelope (envelope.py), or
  None."""
  header = struct.Struct(tf_snapshot.HEADER_FORMAT)
  if len(data) < header.size:
    return None
  magic, version, length, digest = header.unpack_from(data)
  payload = data[header.size:]
  if (magic != tf_snapshot.MAGIC or
      not 1 <= version <= tf_snapshot.FORMAT_VERSION or
      len(payload) != length or hashlib.sha256(payload).digest() != digest):
    return None
  return payload, version


@functools.lru_cache(maxsize=None)
def _form_class():
  """The `fedcanon.Form` message class, from a descriptor pool of its own."""
  from google.protobuf import descriptor_pb2  # pylint: disable=g-import-not-at-top
  from google.protobuf import descriptor_pool  # pylint: disable=g-import-not-at-top
  from google.protobuf import message_factory  # pylint: disable=g-import-not-at-top
  pool = descriptor_pool.DescriptorPool()
  for file in descriptor_pb2.FileDescriptorSet.FromString(
      tf_snapshot.SCHEMA).file:
    pool.Add(file)
  return message_factory.GetMessageClass(
      pool.FindMessageTypeByName('fedcanon.Form'))


class Leaves:
  """Renders a form's parts as `inspection.TensorFlowLeaves` does, or
  raises `Unsure`."""

  def __init__(self):
    self.allowed_ops = _allowed_ops()

  def signature(self, piece, where):
    del where  # Only the loader's errors name the file.
    inputs = piece.input_structure
    kind = inputs.WhichOneof('kind')
    if kind not in ('tuple_value', 'list_value'):
      raise Unsure(f'inputs are a {kind}')
    arguments = ', '.join(_member_text(argument, 1)
                          for argument in getattr(inputs, kind).values)
    return f'({arguments}) -> {_member_text(piece.output_structure, 0)}'

  def secure_sum(self, entry, where):
    """As `secagg.sums.SecureSum.describe`: the same rule's text."""
    del where  # Only the loader's errors name the file.
    rule = secure_sum_rules.RULES.get(entry.kind)
    if rule is None:
      raise Unsure(f'secure sum kind {entry.kind!r}')
    return rule.describe(None if entry.from_server_state
                         else list(entry.static_parameters))

  def bits(self, bits):
    return bits_text.human_bits(bits)


@functools.lru_cache(maxsize=None)
def _allowed_ops():
  return frozenset(tf_snapshot.ALLOWED_OPS)


def _member_text(value, depth):
  """`naming.form_text` of the member structure a `StructuredValue` holds
  (tuples, lists, dicts, named tuples of TensorSpec and DatasetSpec leaves),
  as `structure_coding.decode` would return it."""
  if depth > _MAX_DEPTH:
    raise Unsure('too deep')
  kind = value.WhichOneof('kind')
  if kind in ('tuple_value', 'list_value'):
    return '<' + ','.join(_member_text(item, depth + 1)
                          for item in getattr(value, kind).values) + '>'
  if kind == 'dict_value':
    fields = value.dict_value.fields
    return '<' + ','.join(f'{key}={_member_text(fields[key], depth + 1)}'
                          for key in sorted(fields)) + '>'
  if kind == 'named_tuple_value':
    pairs = value.named_tuple_value.values
    try:  # Names TensorFlow's decoder would refuse.
      collections.namedtuple(value.named_tuple_value.name,
                             [pair.key for pair in pairs])
    except (TypeError, ValueError) as e:
      raise Unsure(str(e)) from None
    return '<' + ','.join(f'{pair.key}={_member_text(pair.value, depth + 1)}'
                          for pair in pairs) + '>'
  if kind == 'tensor_spec_value':
    return _tensor_text(value.tensor_spec_value)
  if kind == 'type_spec_value':
    return _dataset_text(value.type_spec_value, depth)
  raise Unsure(f'a {kind} in a structure')


def _tensor_text(spec):
  name = tf_snapshot.TENSOR_TEXT.get(spec.dtype)
  if name is None:
    raise Unsure(f'dtype {spec.dtype}')
  if spec.shape.unknown_rank:
    return f'{name}[...]'
  if not spec.shape.dim:
    return name
  return f'{name}[' + ','.join('?' if d.size == -1 else str(d.size)
                               for d in spec.shape.dim) + ']'


def _dataset_text(spec, depth):
  """A DatasetSpec's text: its type state is (element spec, dataset shape)."""
  if spec.type_spec_class != tf_snapshot.DATASET_SPEC or depth + 2 > _MAX_DEPTH:
    raise Unsure(f'type spec class {spec.type_spec_class}')
  state = spec.type_state
  if (state.WhichOneof('kind') != 'tuple_value' or
      len(state.tuple_value.values) != 2 or
      state.tuple_value.values[1].WhichOneof('kind') != 'tensor_shape_value'):
    raise Unsure('a dataset spec of another shape')
  return _member_text(state.tuple_value.values[0], depth + 2) + '*'


def snapshot_source():
  """The text of `tf_snapshot.py`, taken from TensorFlow and the loader."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from google.protobuf import descriptor_pb2  # pylint: disable=g-import-not-at-top
  from tensorflow.core.protobuf import struct_pb2  # pylint: disable=g-import-not-at-top
  from tensorflow.core.framework import types_pb2  # pylint: disable=g-import-not-at-top
  from canonical.core import naming  # pylint: disable=g-import-not-at-top
  from canonical.saving import canonical_form_pb2  # pylint: disable=g-import-not-at-top
  from canonical.saving import envelope  # pylint: disable=g-import-not-at-top
  from canonical.saving import form_file  # pylint: disable=g-import-not-at-top
  from canonical.saving import op_allowlist  # pylint: disable=g-import-not-at-top
  from canonical.saving import structure_coding  # pylint: disable=g-import-not-at-top

  schema, seen = descriptor_pb2.FileDescriptorSet(), set()

  def add(file_descriptor):  # Dependencies first.
    if file_descriptor.name not in seen:
      seen.add(file_descriptor.name)
      for dependency in file_descriptor.dependencies:
        add(dependency)
      file_descriptor.CopyToProto(schema.file.add())

  add(canonical_form_pb2.DESCRIPTOR)
  tensor_text = {}
  for number in sorted(types_pb2.DataType.values()):
    scalar = struct_pb2.StructuredValue()
    scalar.tensor_spec_value.dtype = number
    try:
      tensor_text[number] = naming.form_text(structure_coding.decode(scalar))
    except structure_coding.StructureError:
      pass  # Not a dtype a TensorSpec takes.
  chunks = _chunks(schema.SerializeToString(deterministic=True))
  return '\n'.join([
      '"""Generated by `python -m canonical.saving.tf_free_reader`: what '
      'reading a',
      'form without TensorFlow needs of TensorFlow and of the loader. Do '
      'not edit."""',
      '',
      '# pylint: skip-file',
      f'TENSORFLOW_VERSION = {tf.__version__!r}',
      f'MAGIC = {envelope.MAGIC!r}',
      f'FORMAT_VERSION = {envelope.FORMAT_VERSION!r}',
      f'HEADER_FORMAT = {envelope._HEADER.format!r}',  # pylint: disable=protected-access
      f'PIECES = {tuple(form_file.REQUIRED_PIECES)!r}',
      f'OPTIONAL_PIECES = {tuple(form_file.OPTIONAL_PIECES)!r}',
      f'DATASET_SPEC = {struct_pb2.TypeSpecProto.DATA_DATASET_SPEC!r}',
      '# The text of a scalar TensorSpec of each DataType number.',
      'TENSOR_TEXT = {',
      *[f'    {k!r}: {v!r},' for k, v in tensor_text.items()],
      '}',
      '# op_allowlist.default_allowed_ops()',
      'ALLOWED_OPS = (',
      *[f'    {op!r},' for op in sorted(op_allowlist.default_allowed_ops())],
      ')',
      '# A FileDescriptorSet: canonical_form.proto and what it imports.',
      'SCHEMA = (',
      *[f'    {chunk!r}' for chunk in chunks],
      ')',
      ''])


def _chunks(data, width=60):
  return [data[i:i + width] for i in range(0, len(data), width)]


def main():
  root = os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))))
  path = os.path.join(root, _SNAPSHOT)
  with open(path, 'w', encoding='utf-8') as f:
    f.write(snapshot_source())
  print(f'wrote {_SNAPSHOT}')


if __name__ == '__main__':
  main()
