"""TFF's `schedule_learning_rate`: an optimizer whose rate follows a function
of how many steps it has taken, kept in its state beside the inner one's."""

import collections
import collections.abc

import tensorflow as tf

from canonical import errors
from canonical.learning.optimizers import base


def schedule_learning_rate(optimizer, schedule_fn):
  """`optimizer` taking its `i`-th step (from 0) at rate `schedule_fn(i)`.

  `schedule_fn` takes an int32 tensor and returns the rate (traced into the
  graph). The state is `{'round_num', 'optimizer'}`, the inner optimizer's
  state holding 'learning_rate'.
  """
  if not isinstance(optimizer, base.Optimizer):
    raise errors.InvalidTypeError(
        'schedule_learning_rate: optimizer must be a '
        'tff.learning.optimizers.Optimizer, got '
        f'{type(optimizer).__name__}.')
  if not callable(schedule_fn):
    raise errors.InvalidTypeError(
        'schedule_learning_rate: schedule_fn must map a step number to a '
        f'rate, got {schedule_fn!r}.')
  return _Scheduled(optimizer, schedule_fn)


class _Scheduled(base.Optimizer):

  def __init__(self, optimizer, schedule_fn):
    self._optimizer = optimizer
    self._schedule_fn = schedule_fn

  def __repr__(self):
    return f'schedule_learning_rate({self._optimizer!r}, ...)'

  def initialize(self, specs):
    return self._with_rate(tf.constant(0, tf.int32),
                           self._optimizer.initialize(specs))

  def next(self, state, weights, gradients):
    inner, weights = self._optimizer.next(state['optimizer'], weights,
                                          gradients)
    return self._with_rate(state['round_num'] + 1, inner), weights

  def _with_rate(self, round_num, inner):
    """The state with the rate for step `round_num` set in the inner one,
    in the dtype the inner rate has (so the state's type never changes)."""
    if (not isinstance(inner, collections.abc.Mapping) or
        base.LEARNING_RATE_KEY not in inner):
      found = (list(inner) if isinstance(inner, collections.abc.Mapping)
               else type(inner).__name__)
      raise errors.InvalidValueError(
          f'schedule_learning_rate: the state of {self._optimizer!r} has no '
          f"'{base.LEARNING_RATE_KEY}' (it is {found}); schedule an "
          'optimizer of tff.learning.optimizers.build_*.')
    inner = collections.OrderedDict(inner)
    dtype = getattr(inner[base.LEARNING_RATE_KEY], 'dtype', tf.float32)
    inner[base.LEARNING_RATE_KEY] = tf.cast(self._schedule_fn(round_num),
                                            dtype)
    return collections.OrderedDict(round_num=round_num, optimizer=inner)
