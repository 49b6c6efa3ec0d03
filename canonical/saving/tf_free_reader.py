"""A form file's parts without TensorFlow, for `python -m canonical inspect`.

Importing TensorFlow takes seconds, and describing a form needs none of it.
This reader parses a form file with the schema `scripts/gen_proto` writes
beside the generated module (`form_schema.binpb`: the form's messages and the
TensorFlow ones they embed, `GraphDef` and `StructuredValue`) in a
descriptor pool of its own, so it never meets TensorFlow's registrations
when both are loaded. It checks and renders with the loader's own
TensorFlow-free tables: the envelope, the piece names, the op allowlist and
the secure-sum rules; dtype names come from the schema's `DataType` enum.

It answers only what it is sure of: a local file, intact, with the pieces
the loader requires and structures of the shapes it writes. Otherwise `read`
returns None, or a leaf raises `Unsure`, and the caller goes through the
loader's own checks, which name what is wrong.
"""

import collections
import dataclasses
import functools
import importlib.resources

from canonical import errors
from canonical import io as storage_lib
from canonical.core import bits_text
from canonical.core import piece_names
from canonical.core import secure_sum_rules
from canonical.saving import envelope
from canonical.saving import op_allowlist

SCHEMA = 'form_schema.binpb'  # Package data, beside this module.
_MAX_DEPTH = 64  # As structure_coding's check.
# TensorFlow's names of the dtypes whose `DataType` name does not say them.
_DTYPE_NAMES = {'DT_FLOAT': 'float32', 'DT_DOUBLE': 'float64',
                'DT_HALF': 'float16'}


class Unsure(Exception):
  """This reader cannot vouch for its answer: ask the loader."""


@dataclasses.dataclass(frozen=True)
class Reading:
  proto: object   # A `fedcanon.Form` message of this reader's pool.
  size: int       # Bytes in the file.
  leaves: object  # `Leaves`.


def read(path):
  """The parsed form at local `path`, or None if this reader is unsure."""
  if not storage_lib.is_local(path):
    return None
  try:
    data = storage_lib.default().read_bytes(path)
    payload, version = envelope.unwrap(data, path)
  except (OSError, ValueError, errors.FormError):  # ValueError: a NUL.
    return None
  proto = _schema().form_class()
  try:
    proto.ParseFromString(payload)
  except Exception:  # pylint: disable=broad-except  # The loader says why.
    return None
  names = [piece.name for piece in proto.pieces]
  if (proto.format_version != version or len(set(names)) != len(names) or
      not set(names) <= set(piece_names.PIECES + piece_names.OPTIONAL_PIECES)
      or not set(piece_names.PIECES) <= set(names)):
    return None
  return Reading(proto, len(data), Leaves())


@dataclasses.dataclass(frozen=True)
class _Schema:
  form_class: type  # `fedcanon.Form`, from a descriptor pool of its own.
  dtype_names: dict  # DataType number -> the loader's text of a scalar.
  dataset_spec: int  # TypeSpecProto's number of a DatasetSpec.


@functools.lru_cache(maxsize=None)
def _schema():
  from google.protobuf import descriptor_pb2  # pylint: disable=g-import-not-at-top
  from google.protobuf import descriptor_pool  # pylint: disable=g-import-not-at-top
  from google.protobuf import message_factory  # pylint: disable=g-import-not-at-top
  pool = descriptor_pool.DescriptorPool()
  schema = importlib.resources.files(__package__).joinpath(SCHEMA)
  for file in descriptor_pb2.FileDescriptorSet.FromString(
      schema.read_bytes()).file:
    pool.Add(file)
  dtypes = pool.FindEnumTypeByName('tensorflow.DataType')
  names = {}
  for value in dtypes.values:
    if value.number == 0:  # DT_INVALID
      continue
    base = value.name.removesuffix('_REF')
    name = _DTYPE_NAMES.get(base, base.removeprefix('DT_').lower()) + (
        '_ref' if value.name.endswith('_REF') else '')
    # A string tensor's text, as `types` writes it.
    names[value.number] = 'str' if name == 'string' else name
  type_spec_class = pool.FindEnumTypeByName(
      'tensorflow.TypeSpecProto.TypeSpecClass')
  return _Schema(
      message_factory.GetMessageClass(
          pool.FindMessageTypeByName('fedcanon.Form')), names,
      type_spec_class.values_by_name['DATA_DATASET_SPEC'].number)


class Leaves:
  """Renders a form's parts as `inspection.TensorFlowLeaves` does, or
  raises `Unsure`."""

  def __init__(self):
    self.allowed_ops = op_allowlist.default_allowed_ops()

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
    text = rule.describe(None if entry.from_server_state
                         else list(entry.static_parameters))
    if entry.client_noise:
      text += secure_sum_rules.describe_noise(entry.client_noise)
    return text

  def bits(self, bits):
    return bits_text.human_bits(bits)


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
  name = _schema().dtype_names.get(spec.dtype)
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
  if (spec.type_spec_class != _schema().dataset_spec or
      depth + 2 > _MAX_DEPTH):
    raise Unsure(f'type spec class {spec.type_spec_class}')
  state = spec.type_state
  if (state.WhichOneof('kind') != 'tuple_value' or
      len(state.tuple_value.values) != 2 or
      state.tuple_value.values[1].WhichOneof('kind') != 'tensor_shape_value'):
    raise Unsure('a dataset spec of another shape')
  return _member_text(state.tuple_value.values[0], depth + 2) + '*'
