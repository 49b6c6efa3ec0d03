"""TensorFlow Federated's aggregation factories: a factory's `create` makes the
`AggregationProcess` for one value type (and weight type).

Factories compose as in TFF: an outer factory takes inner ones and calls
their processes' `initialize` and `next` inside its own, so a whole chain
(zeroing, clipping, a weighted mean of encoded sums, ...) inlines into the
round that uses it and compiles to one canonical form.
"""

import abc
from typing import Union

import tensorflow as tf

from canonical.core import types as ft
from canonical import errors
from canonical.templates import aggregation_process


class UnweightedAggregationFactory(abc.ABC):
  """Makes `AggregationProcess`es whose `next(state, value)` takes no weight."""

  @abc.abstractmethod
  def create(self, value_type) -> aggregation_process.AggregationProcess:
    """The process aggregating values of the unplaced type `value_type`."""


class WeightedAggregationFactory(abc.ABC):
  """Makes `AggregationProcess`es whose `next(state, value, weight)` takes a
  weight per client."""

  @abc.abstractmethod
  def create(self, value_type,
             weight_type) -> aggregation_process.AggregationProcess:
    """The process aggregating values of `value_type` weighted by values of
    `weight_type` (both unplaced)."""


AggregationFactory = Union[UnweightedAggregationFactory,
                           WeightedAggregationFactory]


def value_type_of(value_type, where, what='value_type'):
  """`value_type` as the language's member type (any of TFF's spellings), of
  tensors with known shapes only."""
  if isinstance(value_type, ft.FederatedType):
    raise errors.InvalidTypeError(
        f'{where}: {what} must be unplaced (what one client holds), got '
        f'{value_type}.')
  member = ft.to_member(value_type, where)
  leaves = tf.nest.flatten(member)
  if not leaves:
    raise errors.InvalidTypeError(
        f'{where}: {what} {ft.describe(member)} holds no tensor.')
  for leaf in leaves:
    if not isinstance(leaf, tf.TensorSpec) or (
        not leaf.shape.is_fully_defined()):
      raise errors.InvalidTypeError(
          f'{where}: {what} must be a structure of tensors of known shapes, '
          f'got {ft.describe(member)}.')
  return tf.nest.map_structure(lambda s: tf.TensorSpec(s.shape, s.dtype),
                               member)


def float_value_type(value_type, where, what='value_type'):
  """`value_type_of`, of floating-point tensors only."""
  return _value_type_of_kind(value_type, where, what, 'floating')


def integer_value_type(value_type, where, what='value_type'):
  """`value_type_of`, of integer tensors only."""
  return _value_type_of_kind(value_type, where, what, 'integer')


def _value_type_of_kind(value_type, where, what, kind):
  member = value_type_of(value_type, where, what)
  if not all(getattr(s.dtype, f'is_{kind}')
             for s in tf.nest.flatten(member)):
    article = 'an' if kind == 'integer' else 'a'
    raise errors.InvalidTypeError(
        f'{where}: every tensor of {what} must be of {article} {kind} dtype, '
        f'got {ft.describe(member)}.')
  return member


def check_factory(factory, kinds, where, what):
  """`factory` is an instance of one of `kinds`."""
  if not isinstance(factory, kinds):
    names = ' or '.join(k.__name__ for k in kinds)
    raise errors.InvalidTypeError(
        f'{where}: {what} must be a {names}, got '
        f'{type(factory).__name__}.')
  return factory
