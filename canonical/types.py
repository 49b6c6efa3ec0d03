"""Federated types: a structure of TF type specs placed at the server or at the clients."""

import dataclasses
import enum

import tensorflow as tf


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

  if isinstance(member, dict):
    return '<' + ', '.join(f'{k}={describe(v)}' for k, v in member.items()) + '>'
  if isinstance(member, (list, tuple)):
    return '<' + ', '.join(describe(v) for v in member) + '>'
  return leaf(member)


def same_member(a, b):
  """Whether two member structures have the same structure and compatible specs."""
  try:
    tf.nest.assert_same_structure(a, b, check_types=False)
  except (ValueError, TypeError):
    return False
  return all(_compatible(x, y)
             for x, y in zip(tf.nest.flatten(a), tf.nest.flatten(b)))


def _compatible(a, b):
  if isinstance(a, tf.TensorSpec) and isinstance(b, tf.TensorSpec):
    return a.dtype == b.dtype and a.shape.is_compatible_with(b.shape)
  return a.is_compatible_with(b)


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
