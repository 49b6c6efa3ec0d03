"""Federated types: a structure of TF type specs placed at the server or at the clients."""

import collections.abc
import dataclasses
import enum

import tensorflow as tf
from tensorflow.python.util import nest


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
      raise TypeError(f'{where}: expected a structure of tf.TensorSpec or '
                      f'tf.data.DatasetSpec, found {leaf!r}.')
  return member


def describe(member):
  """A short readable form of a member structure."""

  def leaf(spec):
    if isinstance(spec, tf.data.DatasetSpec):
      return f'Dataset<{describe(spec.element_spec)}>'
    dims = ','.join('?' if d is None else str(d) for d in spec.shape.as_list()) \
        if spec.shape.rank is not None else '...'
    return f'{spec.dtype.name}[{dims}]'

  if isinstance(member, collections.abc.Mapping):
    return '<' + ', '.join(f'{k}={describe(member[k])}'
                           for k in sorted(member)) + '>'
  if isinstance(member, (list, tuple)):
    return '<' + ', '.join(describe(v) for v in member) + '>'
  return leaf(member)


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
  """A member structure at a placement; `all_equal` for clients values known equal."""
  member: object
  placement: Placement
  all_equal: bool = False

  def __str__(self):
    text = describe(self.member)
    if self.placement == CLIENTS and not self.all_equal:
      return f'{{{text}}}@CLIENTS'
    return f'{text}@{self.placement}'


def server(member):
  return FederatedType(check_member(member, 'server type'), SERVER, True)


def clients(member, all_equal=False):
  return FederatedType(check_member(member, 'clients type'), CLIENTS, all_equal)
