"""The federated language's own types: placements, `FederatedType`,
`FunctionType`, `AbstractType` and `PlacementType` (plain classes, unlike
the TensorFlow specs and containers the member types are)."""

import enum

from canonical.core import naming
from canonical.core.type_base import _as_type_or_none
from canonical.core.type_base import _fail
from canonical.core.type_base import conversions
from canonical.core.type_base import Type
from canonical import errors


class Placement(enum.Enum):
  SERVER = 'SERVER'
  CLIENTS = 'CLIENTS'

  def __str__(self):
    return self.value

  @property
  def uri(self):
    """TFF's name of the placement in serialized types."""
    return self.value.lower()

  @property
  def default_all_equal(self):
    return self is Placement.SERVER


SERVER = Placement.SERVER
CLIENTS = Placement.CLIENTS


class FederatedType(Type):
  """TFF's `FederatedType(member, placement, all_equal=None)`: a member type
  (in any spelling `to_type` takes) at SERVER or CLIENTS. `all_equal=None`
  means True at the SERVER (a SERVER value is one value) and False at the
  CLIENTS."""

  __slots__ = ('_member', '_placement', '_all_equal')

  def __init__(self, member, placement, all_equal=None):
    if not isinstance(placement, Placement):
      _fail('FederatedType', f'the placement must be SERVER or CLIENTS, got '
            f'{naming.describe_object(placement)}.')
    self._member = conversions.to_member(member, 'FederatedType')
    self._placement = placement
    self._all_equal = (placement is SERVER if all_equal is None or
                       placement is SERVER else bool(all_equal))

  @property
  def member(self):
    return self._member

  @property
  def placement(self):
    return self._placement

  @property
  def all_equal(self):
    return self._all_equal

  def children(self):
    yield self._member

  def is_assignable_from(self, source_type) -> bool:
    source = _as_type_or_none(source_type)
    return (isinstance(source, FederatedType) and
            self.member.is_assignable_from(source.member) and
            (not self.all_equal or source.all_equal) and
            self.placement is source.placement)

  def __eq__(self, other):
    if self is other:
      return True
    if not isinstance(other, FederatedType):
      return NotImplemented
    return (self.placement is other.placement and
            self.all_equal == other.all_equal and
            self.member == other.member)

  def __ne__(self, other):
    equal = self.__eq__(other)
    return equal if equal is NotImplemented else not equal

  def __hash__(self):
    return hash(('FederatedType', self._member, self._placement,
                 self._all_equal))

  def __repr__(self):
    return (f'FederatedType({self._member!r}, {self._placement.name}, '
            f'{self._all_equal})')

  def __reduce__(self):
    return FederatedType, (self._member, self._placement, self._all_equal)


def server(member):
  """`member` placed at the server."""
  return FederatedType(conversions.to_member(member, 'server type'), SERVER,
                       True)


def clients(member, all_equal=False):
  """`member` placed at the clients (one value per client unless all_equal)."""
  return FederatedType(conversions.to_member(member, 'clients type'),
                       CLIENTS, all_equal)


# TensorFlow Federated's names.
type_at_server = server
type_at_clients = clients
at_server = server
at_clients = clients


class FunctionType(Type):
  """TFF's `FunctionType(parameter, result)`: a computation's type, as
  `.type_signature` gives it (`parameter` None when it takes none; a struct
  named by the Python parameters when it takes several)."""

  __slots__ = ('_parameter', '_result')

  def __init__(self, parameter, result):
    self._parameter = (None if parameter is None else
                       conversions.to_type(parameter))
    self._result = conversions.to_type(result)

  @property
  def parameter(self):
    return self._parameter

  @property
  def result(self):
    return self._result

  def children(self):
    if self._parameter is not None:
      yield self._parameter
    yield self._result

  def is_assignable_from(self, source_type) -> bool:
    source = _as_type_or_none(source_type)
    if not isinstance(source, FunctionType):
      return False
    if (self.parameter is None) != (source.parameter is None):
      return False
    # Parameters are contravariant: the source must take what this takes.
    if self.parameter is not None and not source.parameter.is_assignable_from(
        self.parameter):
      return False
    return self.result.is_assignable_from(source.result)

  def __eq__(self, other):
    if self is other:
      return True
    if not isinstance(other, FunctionType):
      return NotImplemented
    return (self.parameter == other.parameter and
            self.result == other.result)

  def __ne__(self, other):
    equal = self.__eq__(other)
    return equal if equal is NotImplemented else not equal

  def __hash__(self):
    return hash(('FunctionType', self._parameter, self._result))

  def __repr__(self):
    return f'FunctionType({self._parameter!r}, {self._result!r})'

  def __reduce__(self):
    return FunctionType, (self._parameter, self._result)


class AbstractType(Type):
  """TFF's `AbstractType(label)`: a type variable of a generic signature.
  This runtime has no generic computations: it is a type to print and
  compare; TFF 0.87 cannot assign to or from it either."""

  __slots__ = ('_label',)

  def __init__(self, label):
    if not isinstance(label, str):
      raise errors.InvalidTypeError(
          f'AbstractType: the label must be a string, got '
          f'{naming.describe_object(label)}.')
    self._label = label

  @property
  def label(self):
    return self._label

  def children(self):
    return iter(())

  def is_assignable_from(self, source_type) -> bool:
    raise errors.InvalidTypeError('Abstract types are not comparable.')

  def __eq__(self, other):
    if not isinstance(other, AbstractType):
      return NotImplemented
    return self._label == other.label

  def __ne__(self, other):
    equal = self.__eq__(other)
    return equal if equal is NotImplemented else not equal

  def __hash__(self):
    return hash(('AbstractType', self._label))

  def __repr__(self):
    return f'AbstractType({self._label!r})'

  def __reduce__(self):
    return AbstractType, (self._label,)


class PlacementType(Type):
  """TFF's `PlacementType()`: the one type of placements."""

  __slots__ = ()

  def __init__(self, *args, **kwargs):
    del args, kwargs  # There is only one placement type.

  def children(self):
    return iter(())

  def is_assignable_from(self, source_type) -> bool:
    return isinstance(_as_type_or_none(source_type), PlacementType)

  def __eq__(self, other):
    if not isinstance(other, Type):
      return NotImplemented
    return isinstance(other, PlacementType)

  def __ne__(self, other):
    equal = self.__eq__(other)
    return equal if equal is NotImplemented else not equal

  def __hash__(self):
    return 0

  def __repr__(self):
    return 'PlacementType()'
