"""Federated types: a structure of TF type specs placed at the server or at the clients.

A member type is a structure (tuple, list, dict, namedtuple) of `tf.TensorSpec`
and `tf.data.DatasetSpec` leaves. TensorFlow Federated's spellings
(`TensorType`, `SequenceType`, `StructType`, `type_at_server`, a bare dtype,
`(dtype, shape)`) are functions that build exactly those structures, so every
place that takes a type takes either.
"""

import collections.abc
import dataclasses
import enum

import numpy as np
import tensorflow as tf
from tensorflow.python.util import nest

from canonical.core import naming
from canonical.core.naming import describe
from canonical.core.naming import form_text
from canonical import errors


class Placement(enum.Enum):
  SERVER = 'SERVER'
  CLIENTS = 'CLIENTS'

  def __str__(self):
    return self.value


SERVER = Placement.SERVER
CLIENTS = Placement.CLIENTS

_LEAF_SPECS = (tf.TensorSpec, tf.data.DatasetSpec)


def check_member(member, where):
  """Raises unless `member` is a structure of TensorSpec / DatasetSpec leaves."""
  for leaf in tf.nest.flatten(member):
    if not isinstance(leaf, _LEAF_SPECS):
      raise errors.InvalidTypeError(
          f'{where}: expected a structure of tf.TensorSpec or '
          f'tf.data.DatasetSpec, found {leaf!r}.')
  return member


def _fail(where, message):
  raise errors.FederatedError(f'{where} at {naming.user_location()}: {message}')


def _as_dtype(value):
  """The tf.DType `value` names (tf.float32, np.float32, 'float32'), or None."""
  if isinstance(value, tf.DType):
    return value
  if isinstance(value, np.dtype) or (
      isinstance(value, type) and issubclass(value, np.generic)):
    try:
      return tf.as_dtype(value)
    except TypeError:
      return None
  return None


def _is_shape(value):
  if isinstance(value, tf.TensorShape):
    return True
  return isinstance(value, (list, tuple)) and all(
      d is None or (isinstance(d, (int, np.integer)) and not isinstance(
          d, bool)) for d in value)


def _is_named_pairs(value):
  return isinstance(value, (list, tuple)) and bool(value) and all(
      isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str)
      for p in value)


def to_member(value, where='type'):
  """The member structure of a type written as specs or with TFF's spellings.

  A `tf.DType` (or numpy dtype) is a scalar tensor, `(dtype, shape)` a
  tensor, a list of `(name, type)` pairs a dict, any other tuple, list,
  dict or namedtuple a structure of the same kind. Raises `FederatedError`
  naming the caller's line.
  """
  leaves = tf.nest.flatten(value)
  if leaves and all(isinstance(leaf, _LEAF_SPECS) for leaf in leaves):
    return value  # Already a member structure: kept as it is.
  if isinstance(value, FederatedType):
    _fail(where, f'{value} is a placed type where a member type (what one '
          'place holds) is expected; drop type_at_server / type_at_clients.')
  dtype = _as_dtype(value)
  if dtype is not None:
    return tf.TensorSpec([], dtype)
  if (isinstance(value, tuple) and not hasattr(value, '_fields') and
      len(value) == 2 and _as_dtype(value[0]) is not None and
      _is_shape(value[1])):
    return tf.TensorSpec(value[1], _as_dtype(value[0]))
  if _is_named_pairs(value):
    names = [name for name, _ in value]
    if len(set(names)) != len(names):
      _fail(where, f'repeated names in {names}.')
    return {name: to_member(t, where) for name, t in value}
  if isinstance(value, collections.abc.Mapping):
    return type(value)((k, to_member(v, where)) for k, v in value.items())
  if hasattr(value, '_fields') and isinstance(value, tuple):
    return type(value)(*[to_member(v, where) for v in value])
  if isinstance(value, (list, tuple)):
    return type(value)(to_member(v, where) for v in value)
  _fail(where, f'expected a type (tf.TensorSpec, tf.data.DatasetSpec, '
        f'TensorType, SequenceType, a dtype, or a structure of them), found '
        f'{naming.describe_object(value)}.')


def is_type(value):
  """Whether `value` is a member type in some accepted spelling."""
  try:
    to_member(value)
  except errors.FederatedError:
    return False
  return True


# ----------------------------------------------------------------------------
# TensorFlow Federated's names for types. Each returns the member structure
# the language uses, so its result goes wherever a type goes.


def TensorType(dtype, shape=None):  # pylint: disable=invalid-name
  """A tensor: `tf.TensorSpec(shape, dtype)`; no shape means a scalar."""
  as_dtype = _as_dtype(dtype)
  if as_dtype is None:
    _fail('TensorType', f'expected a dtype such as tf.float32, got '
          f'{naming.describe_object(dtype)}.')
  if shape is None:
    shape = []
  if not _is_shape(shape):
    _fail('TensorType', f'expected a shape (a list of ints and None, or a '
          f'tf.TensorShape), got {naming.describe_object(shape)}.')
  return tf.TensorSpec(shape, as_dtype)


def SequenceType(element):  # pylint: disable=invalid-name
  """A sequence: a `tf.data.Dataset` whose elements have type `element`."""
  member = to_member(element, 'SequenceType')
  if has_dataset(member):
    _fail('SequenceType', f'elements cannot be sequences, got '
          f'{describe(member)}.')
  return tf.data.DatasetSpec(member)


def StructType(elements):  # pylint: disable=invalid-name
  """A structure: a tuple of types, or a dict of `(name, type)` pairs."""
  return StructWithPythonType(elements, None)


def StructWithPythonType(elements, container_type):  # pylint: disable=invalid-name
  """A structure held in `container_type` (tuple, list, dict, OrderedDict or
  a namedtuple class); `None` means a tuple, or a dict for named elements."""
  if isinstance(elements, collections.abc.Mapping):
    elements = list(elements.items())
  if not isinstance(elements, (list, tuple)):
    _fail('StructType', f'expected a list of types or of (name, type) pairs, '
          f'got {naming.describe_object(elements)}.')
  named = [isinstance(e, tuple) and len(e) == 2 and isinstance(e[0], str)
           for e in elements]
  if any(named) and not all(named):
    _fail('StructType', 'name every element or none (the language has no '
          'structure with some names).')
  members = [to_member(e[1] if n else e, 'StructType')
             for e, n in zip(elements, named)]
  names = [e[0] for e, n in zip(elements, named) if n]
  if len(set(names)) != len(names):
    _fail('StructType', f'repeated names in {names}.')
  if container_type is None:
    container_type = dict if names else tuple
  fields = getattr(container_type, '_fields', None)
  if fields is not None:
    if names and list(fields) != names:
      _fail('StructWithPythonType', f'{container_type.__name__} has fields '
            f'{list(fields)}, the elements are named {names}.')
    return container_type(*members)
  if container_type in (dict, collections.OrderedDict):
    if not names and members:
      _fail('StructWithPythonType', f'a {container_type.__name__} needs named '
            'elements, (name, type) pairs.')
    return container_type(zip(names, members))
  if container_type in (tuple, list):
    if names:
      _fail('StructWithPythonType', f'a {container_type.__name__} holds '
            'unnamed elements; use dict, OrderedDict or a namedtuple class '
            'for named ones.')
    return container_type(members)
  _fail('StructWithPythonType', f'the container must be tuple, list, dict, '
        f'OrderedDict or a namedtuple class, got '
        f'{naming.describe_object(container_type)}.')


def to_type(value):
  """TFF's `to_type`: a member structure from any accepted spelling."""
  return to_member(value, 'to_type')


def spec_of(value):
  """The nameless spec of a tensor, a tensor-like value or a dataset."""
  if isinstance(value, tf.data.Dataset):
    return tf.data.DatasetSpec.from_value(value)
  if isinstance(value, tf.data.DatasetSpec):
    return value
  if isinstance(value, tf.TensorSpec):
    return tf.TensorSpec(value.shape, value.dtype)
  if not tf.is_tensor(value):
    value = tf.convert_to_tensor(value)
  return tf.TensorSpec(value.shape, value.dtype)


def member_of(structure):
  """The member type (structure of nameless specs) of a structure of values."""
  return tf.nest.map_structure(spec_of, structure)


def is_fully_defined(member):
  """Whether every tensor of `member` has a known shape (datasets never do)."""
  return all(isinstance(leaf, tf.TensorSpec) and leaf.shape.is_fully_defined()
             for leaf in tf.nest.flatten(member))


def same_member(a, b):
  """Whether two member structures have the same structure and compatible specs.

  Sequences compare by length (a tuple matches a list or namedtuple of the
  same layout), mappings by their keys.
  """
  if isinstance(a, collections.abc.Mapping) or isinstance(
      b, collections.abc.Mapping):
    return (isinstance(a, collections.abc.Mapping) and
            isinstance(b, collections.abc.Mapping) and
            sorted(a) == sorted(b) and
            all(same_member(a[k], b[k]) for k in a))
  if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
    return (isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and
            len(a) == len(b) and all(same_member(x, y) for x, y in zip(a, b)))
  return _compatible(a, b)


def has_dataset(member):
  return any(isinstance(leaf, tf.data.DatasetSpec)
             for leaf in tf.nest.flatten(member))


def by_name(spec, arg):
  """`arg` in the containers of `spec` (a member structure) where both name
  their parts (a mapping or a namedtuple for a namedtuple, say): flattening
  alone would pair a dict's sorted keys with a namedtuple's fields in their
  declared order. Anything else as it is."""
  names = _part_names(spec)
  if names is None:
    if (isinstance(spec, (list, tuple)) and isinstance(arg, (list, tuple)) and
        _part_names(arg) is None and len(spec) == len(arg)):
      return type(arg)(by_name(s, a) for s, a in zip(spec, arg))
    return arg
  given = _part_names(arg)
  if given is None or sorted(given) != sorted(names):
    return arg
  parts = {name: by_name(spec[name] if isinstance(spec, dict) else
                          getattr(spec, name), _part(arg, name))
           for name in names}
  if isinstance(spec, dict):
    return type(spec)((name, parts[name]) for name in names)
  return type(spec)(**parts)


def _part_names(value):
  if isinstance(value, dict):
    return list(value)
  fields = getattr(value, '_fields', None)
  if fields is not None and isinstance(value, tuple):
    return list(fields)
  return None


def _part(value, name):
  return value[name] if isinstance(value, dict) else getattr(value, name)


def with_sequences(member, value):
  """`value` (shaped like `member`) with each Python list where `member`
  has a sequence made a dataset of the list's elements, as TFF accepts a
  list for a sequence; anything else as it is."""
  if not has_dataset(member):
    return value
  try:
    return nest.map_structure_up_to(member, _list_as_dataset, member, value,
                                    check_types=False)
  except (TypeError, ValueError):
    return value  # Not this conversion's business: the checks name it.


def _list_as_dataset(spec, value):
  if not isinstance(spec, tf.data.DatasetSpec) or not isinstance(
      value, (list, tuple)):
    return value

  def column(leaf_spec, *leaves):
    if not leaves:
      shape = [0] + [d or 0 for d in leaf_spec.shape.as_list()]
      return np.zeros(shape, leaf_spec.dtype.as_numpy_dtype)
    return np.asarray(leaves, leaf_spec.dtype.as_numpy_dtype)

  return tf.data.Dataset.from_tensor_slices(
      tf.nest.map_structure(column, spec.element_spec, *value))


def dataset_mismatch(member, value):
  """`(expected, actual)` descriptions for the first dataset of `value` (a
  structure shaped like `member`) whose elements do not fit the member's
  DatasetSpec, or None. TensorFlow itself would fail mid-run on it with
  "Type mismatch: actual int32 vs. expect float", naming no piece."""
  try:
    values = nest.flatten_up_to(member, value, check_types=False)
  except (TypeError, ValueError):
    return None  # Not this check's business: the call itself says why.
  for spec, leaf in zip(tf.nest.flatten(member), values):
    if not isinstance(spec, tf.data.DatasetSpec):
      continue
    if not isinstance(leaf, tf.data.Dataset):
      return describe(spec), type(leaf).__name__
    if not same_member(leaf.element_spec, spec.element_spec):
      return describe(spec), describe(spec_of(leaf))
  return None


def _compatible(a, b):
  if isinstance(a, tf.TensorSpec) and isinstance(b, tf.TensorSpec):
    return a.dtype == b.dtype and a.shape.is_compatible_with(b.shape)
  if isinstance(a, tf.data.DatasetSpec) and isinstance(b, tf.data.DatasetSpec):
    return same_member(a.element_spec, b.element_spec)
  return False


@dataclasses.dataclass(frozen=True)
class FederatedType:
  """A member structure at a placement; `all_equal` for clients values known equal.

  As in TFF, `all_equal=None` means True at the SERVER and False at CLIENTS,
  and the member may be written in TFF's spellings (`tf.float32`, ...).
  """
  member: object
  placement: Placement
  all_equal: bool = None

  def __post_init__(self):
    if not isinstance(self.placement, Placement):
      _fail('FederatedType', f'the placement must be SERVER or CLIENTS, got '
            f'{naming.describe_object(self.placement)}.')
    object.__setattr__(self, 'member',
                       to_member(self.member, 'FederatedType'))
    if self.all_equal is None or self.placement == SERVER:
      # A SERVER value is one value: all_equal holds trivially.
      object.__setattr__(self, 'all_equal', self.placement == SERVER)

  def __str__(self):
    text = describe(self.member)
    if self.placement == CLIENTS and not self.all_equal:
      return f'{{{text}}}@CLIENTS'
    return f'{text}@{self.placement}'


def server(member):
  """`member` placed at the server."""
  return FederatedType(to_member(member, 'server type'), SERVER, True)


def clients(member, all_equal=False):
  """`member` placed at the clients (one value per client unless all_equal)."""
  return FederatedType(to_member(member, 'clients type'), CLIENTS, all_equal)


# TensorFlow Federated's names.
type_at_server = server
type_at_clients = clients
at_server = server
at_clients = clients


@dataclasses.dataclass(frozen=True)
class FunctionType:
  """A computation's type, as TFF gives it in `.type_signature`: its
  `parameter` (None when it takes none; a dict named by the Python
  parameters when it takes several) and its `result`."""
  parameter: object
  result: object

  def __str__(self):
    parameter = '' if self.parameter is None else describe(self.parameter)
    return f'({parameter} -> {describe(self.result)})'


class Parameters(dict):
  """A computation's several parameter types, by name or (as in TFF's
  struct) by position."""

  def __getitem__(self, key):
    if isinstance(key, int) and not isinstance(key, bool):
      return list(self.values())[key]
    return super().__getitem__(key)


def parameter_of(types, names):
  """TFF's parameter type of a computation taking `types` (one per Python
  parameter named `names`): None, the one type, or a struct named by them."""
  if not types:
    return None
  if len(types) == 1:
    return types[0]
  return Parameters(zip(names, types))
