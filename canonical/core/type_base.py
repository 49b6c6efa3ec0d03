"""TFF's `Type`, which every type class derives from, and the relations
between types it answers (assignable, equivalent, identical) with their
errors.

The conversions to types and the texts of types come after the classes,
since they build or read every class, yet the classes call them (a
constructor takes its element types in any spelling; `str(t)` is a text):
`type_conversions` and `type_texts` hand their functions to `conversions`
and `texts` here when they are imported, which `canonical.core.types` does.
"""

import abc
import difflib
import enum

from canonical.core import naming
from canonical import errors


class _HandedOver:
  """Functions that a module above this one hands over when imported."""

  __slots__ = ()

  def __getattr__(self, name):
    # Not handed over: a class's module was imported without the public
    # one (scripts/import_guard.py keeps the project on `types`; a pickled
    # type names `types`, which imports them all).
    raise AttributeError(
        f'{name} is not handed over yet: import canonical.core.types, the '
        'public home of the type classes.')


class _Conversions(_HandedOver):
  """`type_conversions`' functions, handed over by it."""
  __slots__ = ('to_type', 'to_member', 'convert')  # convert: `_to_type`.


class _Texts(_HandedOver):
  """`type_texts`' functions, handed over by it."""
  __slots__ = ('lines',)


conversions = _Conversions()
texts = _Texts()


def _fail(where, message):
  raise errors.FederatedError(f'{where} at {naming.user_location()}: {message}')


# ----------------------------------------------------------------------------
# TFF's relations between types, and their errors.


class UnexpectedTypeError(errors.Error, TypeError):
  """A type of another kind than expected."""

  def __init__(self, expected, actual):
    super().__init__(f'Expected type of kind {expected}, found type {actual}')
    self.expected = expected
    self.actual = actual


@enum.unique
class TypeRelation(enum.Enum):
  EQUIVALENT = 'equivalent'
  IDENTICAL = 'identical'
  ASSIGNABLE = 'assignable'


_LINE = 100  # Longer types are shown formatted, with a diff.


def type_mismatch_error_message(first, second, relation,
                                second_is_expected=False):
  """Why `first` is not `relation` to `second`: both types, formatted and
  diffed when they are long, by their reprs when their texts agree."""
  first = conversions.to_type(first)
  second = conversions.to_type(second)
  first_text = first.compact_representation()
  second_text = second.compact_representation()
  diff = None
  if first_text == second_text:
    # They differ in what the text does not show (containers).
    first_text, second_text = repr(first), repr(second)
  elif max(len(first_text), len(second_text)) > _LINE:
    first_text = first.formatted_representation()
    second_text = second.formatted_representation()
    diff = '\n'.join(difflib.unified_diff(first_text.split('\n'),
                                          second_text.split('\n')))
  parts = ['Type', f'`{first_text}`',
           f'is not {relation.value} to '
           f'{"expected " if second_is_expected else ""}type',
           f'`{second_text}`']
  if diff:
    parts.append(f'\nDiff:\n{diff}')
  line = ' '.join(parts)
  return '\n'.join(parts) if len(line) > _LINE or '\n' in line else line


class TypeNotAssignableError(errors.Error, TypeError):

  def __init__(self, source_type, target_type):
    self.message = type_mismatch_error_message(source_type, target_type,
                                               TypeRelation.ASSIGNABLE)
    super().__init__(self.message)
    self.source_type = source_type
    self.target_type = target_type


class TypesNotEquivalentError(errors.Error, TypeError):

  def __init__(self, first_type, second_type):
    self.message = type_mismatch_error_message(first_type, second_type,
                                               TypeRelation.EQUIVALENT)
    super().__init__(self.message)
    self.first_type = first_type
    self.second_type = second_type


class TypesNotIdenticalError(errors.Error, TypeError):

  def __init__(self, first_type, second_type):
    self.message = type_mismatch_error_message(first_type, second_type,
                                               TypeRelation.IDENTICAL)
    super().__init__(self.message)
    self.first_type = first_type
    self.second_type = second_type


# ----------------------------------------------------------------------------
# TFF's `Type`, which every type class derives from.


class Type(abc.ABC):
  """TFF's `tff.Type`: what every type here is an instance of."""

  __slots__ = ()

  def compact_representation(self) -> str:
    """The type on one line: `<x=int32,y=float32[2]>`."""
    return ''.join(line.rstrip()
                   for line in texts.lines(self, formatted=False))

  def formatted_representation(self) -> str:
    """The type over several lines, a struct's elements indented."""
    return '\n'.join(line.rstrip()
                     for line in texts.lines(self, formatted=True))

  @abc.abstractmethod
  def children(self):
    """The immediate child types."""

  def __str__(self):
    return self.compact_representation()

  def check_assignable_from(self, source_type) -> None:
    if not self.is_assignable_from(source_type):
      raise TypeNotAssignableError(source_type=source_type, target_type=self)

  @abc.abstractmethod
  def is_assignable_from(self, source_type) -> bool:
    """Whether values of `source_type` can be used where this type is."""

  def check_equivalent_to(self, other) -> None:
    if not self.is_equivalent_to(other):
      raise TypesNotEquivalentError(self, other)

  def is_equivalent_to(self, other) -> bool:
    other = _as_type_or_none(other)
    return (other is not None and self.is_assignable_from(other) and
            other.is_assignable_from(self))

  def check_identical_to(self, other) -> None:
    if not self.is_identical_to(other):
      raise TypesNotIdenticalError(self, other)

  def is_identical_to(self, other) -> bool:
    return self == other


def _as_type_or_none(value):
  """`value` as a type (a spec structure is one here), or None."""
  if isinstance(value, Type):
    return value
  try:
    return conversions.to_type(value)
  except (errors.Error, TypeError, ValueError):
    return None
