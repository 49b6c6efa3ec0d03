"""Adam, AdamW and Yogi: first and second moments, with the bias
corrections folded into the rate.

`a <- a + (g - a)(1 - beta_1)`, `p <- p + (g^2 - p)(1 - beta_2)`, and
`w <- w - lr sqrt(1 - beta_2^t) / (1 - beta_1^t) a / (sqrt(p) + epsilon)`:
epsilon outside the correction, as TFF and Keras place it. AdamW adds
`lr * weight_decay * w` to the step, decoupled from the moments. Yogi moves
the second moment additively, by at most `g^2` a step,
`p <- p + (1 - beta_2) sign(g^2 - p) g^2`, from a small positive start.
"""

import collections

import tensorflow as tf

from canonical.learning.optimizers import base

_HPARAMS = (base.LEARNING_RATE_KEY, 'beta_1', 'beta_2', 'epsilon')


class Adam(base.SlotOptimizer):
  """Adam's state and step; Yogi changes the second moment only."""

  _TRAILING_HPARAMS = ('weight_decay',)

  def __init__(self, text, hparams, **layout):
    super().__init__(text, hparams, ['step', 'accumulator', 'preconditioner'],
                     **layout)

  def _initial_preconditioner(self, spec):
    return base.zeros(spec)

  def _second_moment(self, p, g, beta_2):
    return p + (tf.square(g) - p) * (1.0 - beta_2)

  def _initial_slots(self, specs):
    return collections.OrderedDict(
        step=tf.constant(0, tf.int32),
        accumulator=tf.nest.map_structure(base.zeros, specs),
        preconditioner=tf.nest.map_structure(self._initial_preconditioner,
                                             specs))

  def _step(self, hparams, slots, weights, gradients):
    step = slots['step'] + 1

    def update(w, g, a, p):
      lr, beta_1, beta_2, epsilon = (base.cast(hparams[key], w)
                                     for key in _HPARAMS)
      t = tf.cast(step, w.dtype)
      a = a + (g - a) * (1.0 - beta_1)
      p = self._second_moment(p, g, beta_2)
      root = tf.sqrt(1.0 - tf.pow(beta_2, t))
      if 'weight_decay' in hparams:
        decay = base.cast(hparams['weight_decay'], w)
        w = w - lr * (root / (1.0 - tf.pow(beta_1, t)) * a /
                      (tf.sqrt(p) + epsilon) + decay * w)
      else:
        step_size = lr * root / (1.0 - tf.pow(beta_1, t))
        w = w - step_size * a / (tf.sqrt(p) + epsilon)
      return w, a, p

    new_weights, accumulator, preconditioner = base.map_leaves(
        update, weights, gradients, slots['accumulator'],
        slots['preconditioner'])
    return collections.OrderedDict(
        step=step, accumulator=accumulator,
        preconditioner=preconditioner), new_weights


def _checked(builder, learning_rate, beta_1, beta_2, epsilon, **more):
  base.check_builder_args(
      builder, non_negative=dict(learning_rate=learning_rate,
                                 epsilon=epsilon, **more),
      fractions=dict(beta_1=beta_1, beta_2=beta_2))
  hparams = dict(learning_rate=learning_rate, beta_1=beta_1, beta_2=beta_2,
                 epsilon=epsilon)
  text = ', '.join(f'{k}={v}' for k, v in dict(hparams, **more).items())
  return hparams, f'{builder}({text})'


def build_adam(learning_rate, beta_1=0.9, beta_2=0.999, epsilon=1e-7):
  """TFF's `build_adam`; the state holds the four hyperparameters, 'step',
  'accumulator' (first moment) and 'preconditioner' (second moment)."""
  hparams, text = _checked('build_adam', learning_rate, beta_1, beta_2,
                           epsilon)
  return Adam(text, hparams)


def build_adamw(learning_rate, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                weight_decay=0.004):
  """TFF's `build_adamw`: Adam's state with 'weight_decay' last."""
  hparams, text = _checked('build_adamw', learning_rate, beta_1, beta_2,
                           epsilon, weight_decay=weight_decay)
  return Adam(text, dict(hparams, weight_decay=weight_decay))


def adam(learning_rate, beta_1=0.9, beta_2=0.999, epsilon=1e-7):
  """Adam as Keras's, with the hyperparameters fixed in the graph; the state
  is 'step', 'm' and 'v', the keys it had before TFF's API came here."""
  base.check_builder_args('adam', open_fractions=dict(beta_1=beta_1,
                                                      beta_2=beta_2),
                          positive=dict(epsilon=epsilon))
  hparams, _ = _checked('adam', learning_rate, beta_1, beta_2, epsilon)
  return Adam(f'adam(learning_rate={learning_rate}, beta_1={beta_1}, '
              f'beta_2={beta_2}, epsilon={epsilon})', hparams,
              hparams_in_state=False,
              names={'accumulator': 'm', 'preconditioner': 'v'})


class _Yogi(Adam):

  def __init__(self, text, hparams, initial_preconditioner_value):
    super().__init__(text, hparams)
    self._initial_value = initial_preconditioner_value

  def _initial_preconditioner(self, spec):
    return base.filled(spec, self._initial_value)

  def _second_moment(self, p, g, beta_2):
    g2 = tf.square(g)
    return p + (1.0 - beta_2) * tf.sign(g2 - p) * g2


def build_yogi(learning_rate, beta_1=0.9, beta_2=0.999, epsilon=1e-3,
               initial_preconditioner_value=1e-6):
  """TFF's `build_yogi`, with `build_adam`'s state."""
  hparams, text = _checked(
      'build_yogi', learning_rate, beta_1, beta_2, epsilon,
      initial_preconditioner_value=initial_preconditioner_value)
  return _Yogi(text, hparams, initial_preconditioner_value)
