"""Gradient descent, with heavy-ball or Nesterov momentum.

With momentum `m` the accumulator is `a <- m a + g` and the step
`w <- w - lr a` (Nesterov: `w <- w - lr (m a + g)`). Keras keeps `v = -lr a`
instead: the same steps while the rate is constant, but TFF's form stays
right when `set_hparams` changes the rate between rounds.
"""

import collections
import numbers

import tensorflow as tf

from canonical.learning.optimizers import base


class _SGD(base.SlotOptimizer):

  def __init__(self, text, learning_rate, momentum=None, nesterov=False,
               **layout):
    self._momentum = momentum is not None and not (
        isinstance(momentum, numbers.Number) and momentum == 0)
    self._nesterov = nesterov
    hparams = [(base.LEARNING_RATE_KEY, learning_rate)]
    if self._momentum:
      hparams.append(('momentum', momentum))
    super().__init__(text, hparams,
                     ['accumulator'] if self._momentum else [], **layout)

  def _initial_slots(self, specs):
    if not self._momentum:
      return collections.OrderedDict()
    return collections.OrderedDict(
        accumulator=tf.nest.map_structure(base.zeros, specs))

  def _step(self, hparams, slots, weights, gradients):
    rate = hparams[base.LEARNING_RATE_KEY]
    if not self._momentum:
      (new_weights,) = base.map_leaves(
          lambda w, g: (w - base.cast(rate, w) * g,), weights, gradients)
      return collections.OrderedDict(), new_weights

    def update(w, g, a):
      m = base.cast(hparams['momentum'], w)
      a = m * a + g
      direction = m * a + g if self._nesterov else a
      return w - base.cast(rate, w) * direction, a

    new_weights, accumulator = base.map_leaves(update, weights, gradients,
                                               slots['accumulator'])
    return collections.OrderedDict(accumulator=accumulator), new_weights


def build_sgdm(learning_rate=0.01, momentum=None):
  """TFF's `build_sgdm`: plain SGD, or with momentum (in [0, 1]) if given.

  The state holds 'learning_rate', and with momentum also 'momentum' and
  the 'accumulator'.
  """
  base.check_builder_args(
      'build_sgdm', non_negative={'learning_rate': learning_rate},
      fractions={} if momentum is None else {'momentum': momentum})
  text = f'build_sgdm(learning_rate={learning_rate}' + (
      ')' if momentum is None else f', momentum={momentum})')
  return _SGD(text, learning_rate, momentum)


def sgd(learning_rate, momentum=0.0, nesterov=False):
  """SGD as Keras's, with the hyperparameters fixed in the graph.

  Without momentum the state is empty; with it, it holds the accumulator
  under 'velocity', the key it had before TFF's API came here.
  """
  base.check_builder_args('sgd', non_negative={'learning_rate': learning_rate},
                          open_fractions={'momentum': momentum})
  nesterov_text = ', nesterov=True' if nesterov else ''
  return _SGD(f'sgd(learning_rate={learning_rate}, momentum={momentum}'
              f'{nesterov_text})', learning_rate, momentum, nesterov,
              hparams_in_state=False, names={'accumulator': 'velocity'})
