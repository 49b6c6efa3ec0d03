"""Adagrad and RMSprop: each weight's rate divided by the root of its
squared gradients, summed (Adagrad) or decayed (RMSprop).

Adagrad: `p <- p + g^2`, `w <- w - lr g / sqrt(p + epsilon)`, epsilon inside
the root, as TFF and Keras both place it.

RMSprop: `p <- p + (g^2 - p)(1 - decay)` and a step `lr g / (sqrt(p) +
epsilon)` in TFF's form; Keras's (the `rmsprop` builder) puts epsilon inside
the root, may centre `p` by the running mean gradient `m`
(`sqrt(p - m^2 + epsilon)`) and may pass the step through a momentum buffer.
"""

import collections

import tensorflow as tf

from canonical.learning.optimizers import base


class _Adagrad(base.SlotOptimizer):

  def __init__(self, text, learning_rate, initial_value, epsilon, **layout):
    super().__init__(text, [(base.LEARNING_RATE_KEY, learning_rate),
                            ('epsilon', epsilon)], ['preconditioner'],
                     **layout)
    self._initial_value = initial_value

  def _initial_slots(self, specs):
    return collections.OrderedDict(preconditioner=tf.nest.map_structure(
        lambda spec: base.filled(spec, self._initial_value), specs))

  def _step(self, hparams, slots, weights, gradients):
    def update(w, g, p):
      p = p + tf.square(g)
      lr = base.cast(hparams[base.LEARNING_RATE_KEY], w)
      return w - lr * g / tf.sqrt(p + base.cast(hparams['epsilon'], w)), p

    new_weights, preconditioner = base.map_leaves(
        update, weights, gradients, slots['preconditioner'])
    return collections.OrderedDict(preconditioner=preconditioner), new_weights


def build_adagrad(learning_rate, initial_preconditioner_value=0.1,
                  epsilon=1e-7):
  """TFF's `build_adagrad`; the state holds 'learning_rate', 'epsilon' and
  the 'preconditioner' (summed squared gradients)."""
  base.check_builder_args('build_adagrad', non_negative=dict(
      learning_rate=learning_rate, epsilon=epsilon,
      initial_preconditioner_value=initial_preconditioner_value))
  return _Adagrad(
      f'build_adagrad(learning_rate={learning_rate}, '
      f'initial_preconditioner_value={initial_preconditioner_value}, '
      f'epsilon={epsilon})', learning_rate, initial_preconditioner_value,
      epsilon)


def adagrad(learning_rate, initial_accumulator_value=0.1, epsilon=1e-7):
  """Adagrad as Keras's, with the hyperparameters fixed in the graph; the
  state is 'accumulator', its key before TFF's API came here."""
  base.check_builder_args('adagrad', non_negative=dict(
      learning_rate=learning_rate,
      initial_accumulator_value=initial_accumulator_value),
                          positive=dict(epsilon=epsilon))
  return _Adagrad(
      f'adagrad(learning_rate={learning_rate}, initial_accumulator_value='
      f'{initial_accumulator_value}, epsilon={epsilon})', learning_rate,
      initial_accumulator_value, epsilon, hparams_in_state=False,
      names={'preconditioner': 'accumulator'})


class _RMSprop(base.SlotOptimizer):

  def __init__(self, text, learning_rate, decay, epsilon, momentum=0.0,
               centered=False, epsilon_inside_root=False, **layout):
    roles = ['preconditioner']
    roles += ['average_gradient'] if centered else []
    roles += ['momentum_buffer'] if momentum else []
    hparams = [(base.LEARNING_RATE_KEY, learning_rate), ('decay', decay),
               ('epsilon', epsilon)]
    super().__init__(text, hparams, roles, **layout)
    self._momentum = momentum
    self._epsilon_inside_root = epsilon_inside_root

  def _initial_slots(self, specs):
    return collections.OrderedDict(
        (role, tf.nest.map_structure(base.zeros, specs))
        for role in self._roles)

  def _step(self, hparams, slots, weights, gradients):
    roles = list(slots)

    def update(w, g, *leaf_slots):
      lr, decay, epsilon = (base.cast(hparams[key], w)
                            for key in (base.LEARNING_RATE_KEY, 'decay',
                                        'epsilon'))
      leaf = dict(zip(roles, leaf_slots))
      p = leaf['preconditioner'] + (tf.square(g) - leaf['preconditioner']) * (
          1 - decay)
      new = {'preconditioner': p}
      if 'average_gradient' in leaf:
        m = leaf['average_gradient'] + (g - leaf['average_gradient']) * (
            1 - decay)
        new['average_gradient'] = m
        p = p - tf.square(m)
      if self._epsilon_inside_root:
        increment = lr * g / tf.sqrt(p + epsilon)
      else:
        increment = lr * g / (tf.sqrt(p) + epsilon)
      if 'momentum_buffer' in leaf:
        increment = (base.cast(self._momentum, w) * leaf['momentum_buffer']
                     + increment)
        new['momentum_buffer'] = increment
      return (w - increment, *(new[role] for role in roles))

    new_weights, *new_slots = base.map_leaves(update, weights, gradients,
                                              *slots.values())
    return collections.OrderedDict(zip(roles, new_slots)), new_weights


def build_rmsprop(learning_rate, decay=0.9, epsilon=1e-7):
  """TFF's `build_rmsprop`; the state holds 'learning_rate', 'decay',
  'epsilon' and the 'preconditioner' (running mean of squared gradients)."""
  base.check_builder_args(
      'build_rmsprop', non_negative=dict(learning_rate=learning_rate,
                                         epsilon=epsilon),
      fractions=dict(decay=decay))
  return _RMSprop(f'build_rmsprop(learning_rate={learning_rate}, decay='
                  f'{decay}, epsilon={epsilon})', learning_rate, decay,
                  epsilon)


def rmsprop(learning_rate, rho=0.9, momentum=0.0, epsilon=1e-7,
            centered=False):
  """RMSprop as Keras's, with the hyperparameters fixed in the graph; the
  state is 'velocity', and 'average_gradient' (centered) and 'momentum'
  (with momentum), its keys before TFF's API came here."""
  base.check_builder_args(
      'rmsprop', non_negative=dict(learning_rate=learning_rate),
      open_fractions=dict(rho=rho, momentum=momentum),
      positive=dict(epsilon=epsilon))
  return _RMSprop(
      f'rmsprop(learning_rate={learning_rate}, rho={rho}, momentum='
      f'{momentum}, epsilon={epsilon}, centered={centered})', learning_rate,
      rho, epsilon, momentum, centered, epsilon_inside_root=True,
      hparams_in_state=False,
      names={'preconditioner': 'velocity', 'momentum_buffer': 'momentum'})
