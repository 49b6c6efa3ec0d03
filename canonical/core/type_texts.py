"""TFF's texts of types, as `str(t)`, `compact_representation` and
`formatted_representation` give them: `<x=int32,y=float32[2]>@SERVER`."""

import tensorflow as tf

from canonical.core import naming
from canonical.core import type_base
from canonical.core.federated_types import AbstractType
from canonical.core.federated_types import FederatedType
from canonical.core.federated_types import FunctionType
from canonical.core.federated_types import PlacementType
from canonical.core.leaf_types import SequenceType
from canonical.core.leaf_types import TensorType
from canonical.core.naming import describe
from canonical.core.struct_types import elements_of
from canonical.core.struct_types import StructType


def _tensor_text(t):
  name = 'str' if t.dtype == tf.string else t.dtype.name
  if t.shape.rank is None:
    return f'{name!r}(shape=None)'
  if t.shape.rank == 0:
    return name
  return f'{name}[{naming.dims(t.shape)}]'


def _join(parts):
  """Lines of `parts` (each a list of lines) run together: each part's first
  line continues the line before it."""
  lines = ['']
  for part in parts:
    lines[-1] += part[0]
    lines.extend(part[1:])
  return lines


def _lines(t, formatted):
  """The lines of type `t`'s text (one unless `formatted`)."""
  if isinstance(t, AbstractType):
    return [t.label]
  if isinstance(t, PlacementType):
    return ['placement']
  if isinstance(t, FederatedType):
    member = _lines(t.member, formatted)
    where = [f'@{t.placement}']
    if t.all_equal:
      return _join([member, where])
    return _join([['{'], member, ['}'], where])
  if isinstance(t, FunctionType):
    parameter = [''] if t.parameter is None else _lines(t.parameter,
                                                         formatted)
    return _join([['('], parameter, [' -> '], _lines(t.result, formatted),
                  [')']])
  if isinstance(t, SequenceType):
    return _join([_lines(t.element, formatted), ['*']])
  if isinstance(t, TensorType):
    return [_tensor_text(t)]
  if isinstance(t, StructType):
    pairs = elements_of(t)
    if not pairs:
      return ['<>']
    parts = []
    for i, (name, value) in enumerate(pairs):
      if i:
        parts.append([',', ''] if formatted else [','])
      element = _lines(value, formatted)
      parts.append(element if name is None else _join([[f'{name}='],
                                                       element]))
    elements = _join(parts)
    if formatted:
      return _join([['<', ''], ['  ' + line for line in elements],
                    ['', '>']])
    return _join([['<'], elements, ['>']])
  return [describe(t)]  # A plain spec structure inside a structure of types.


# `Type`'s texts are these (see `type_base`).
type_base.texts.lines = _lines
