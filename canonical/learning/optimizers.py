"""Pure optimizers: an `(init, apply)` pair of functions over tensor structures.

Client and server updates are canonical-form pieces, so an optimizer cannot
keep slots in variables: its state is a structure of tensors that goes in and
comes out. `init(weights)` makes that state; `apply(state, weights, gradients)`
returns `(new_state, new_weights)`. Weights may be any `tf.nest` structure
(tuples, not lists, if the state has to live inside `Dataset.reduce`).
"""

import numbers
from typing import Callable, NamedTuple

import tensorflow as tf

from canonical import errors


class Optimizer(NamedTuple):
  """A pure optimizer."""
  name: str
  init: Callable  # weights -> state
  apply: Callable  # (state, weights, gradients) -> (state, weights)


def sgd(learning_rate, momentum=0.0, nesterov=False):
  """Gradient descent, with heavy-ball momentum as Keras's SGD does it.

  Velocity `v <- momentum * v - learning_rate * g`, then `w <- w + v`, or
  with `nesterov`, `w <- w + momentum * v - learning_rate * g`. Without
  momentum the state is empty.
  """
  _check_non_negative('learning_rate', learning_rate)
  _check_fraction('momentum', momentum)

  def init(weights):
    if not momentum:
      return {}
    return {'velocity': tf.nest.map_structure(tf.zeros_like, weights)}

  def apply(state, weights, gradients):
    _check_same_structure(weights, gradients)
    if not momentum:
      new_weights = tf.nest.map_structure(
          lambda w, g: w - _as(learning_rate, w) * g, weights, gradients)
      return state, new_weights
    velocity = tf.nest.map_structure(
        lambda v, g: _as(momentum, v) * v - _as(learning_rate, v) * g,
        state['velocity'], gradients)
    if nesterov:
      new_weights = tf.nest.map_structure(
          lambda w, v, g: w + _as(momentum, v) * v - _as(learning_rate, v) * g,
          weights, velocity, gradients)
    else:
      new_weights = tf.nest.map_structure(lambda w, v: w + v, weights,
                                          velocity)
    return {'velocity': velocity}, new_weights

  nesterov_text = ', nesterov=True' if nesterov else ''
  return Optimizer(f'sgd(learning_rate={learning_rate}, momentum={momentum}'
                   f'{nesterov_text})', init, apply)


def adagrad(learning_rate, initial_accumulator_value=0.1, epsilon=1e-7):
  """Adagrad as Keras's: `a <- a + g^2`, `w <- w - lr g / sqrt(a + eps)`."""
  _check_non_negative('learning_rate', learning_rate)
  _check_non_negative('initial_accumulator_value', initial_accumulator_value)
  _check_positive('adagrad', 'epsilon', epsilon)

  def init(weights):
    return {'accumulator': tf.nest.map_structure(
        lambda w: tf.fill(tf.shape(w), _as(initial_accumulator_value, w)),
        weights)}

  def apply(state, weights, gradients):
    _check_same_structure(weights, gradients)
    accumulator = tf.nest.map_structure(lambda a, g: a + tf.square(g),
                                        state['accumulator'], gradients)
    new_weights = tf.nest.map_structure(
        lambda w, a, g: w - _as(learning_rate, w) * g / tf.sqrt(
            a + _as(epsilon, w)), weights, accumulator, gradients)
    return {'accumulator': accumulator}, new_weights

  return Optimizer(
      f'adagrad(learning_rate={learning_rate}, initial_accumulator_value='
      f'{initial_accumulator_value}, epsilon={epsilon})', init, apply)


def rmsprop(learning_rate, rho=0.9, momentum=0.0, epsilon=1e-7,
            centered=False):
  """RMSprop as Keras's: `v <- rho v + (1 - rho) g^2` (and, centered, the
  mean gradient `m` likewise, dividing by `sqrt(v - m^2 + eps)`), a step of
  `lr g / sqrt(v + eps)`, through a momentum buffer if `momentum`."""
  _check_non_negative('learning_rate', learning_rate)
  _check_fraction('rho', rho)
  _check_fraction('momentum', momentum)
  _check_positive('rmsprop', 'epsilon', epsilon)

  def init(weights):
    zeros = lambda: tf.nest.map_structure(tf.zeros_like, weights)
    state = {'velocity': zeros()}
    if centered:
      state['average_gradient'] = zeros()
    if momentum:
      state['momentum'] = zeros()
    return state

  def apply(state, weights, gradients):
    _check_same_structure(weights, gradients)
    new_state = {'velocity': tf.nest.map_structure(
        lambda v, g: _as(rho, v) * v + _as(1.0 - rho, v) * tf.square(g),
        state['velocity'], gradients)}
    denominator = tf.nest.map_structure(lambda v: v + _as(epsilon, v),
                                        new_state['velocity'])
    if centered:
      new_state['average_gradient'] = tf.nest.map_structure(
          lambda m, g: _as(rho, m) * m + _as(1.0 - rho, m) * g,
          state['average_gradient'], gradients)
      denominator = tf.nest.map_structure(
          lambda d, m: d - tf.square(m), denominator,
          new_state['average_gradient'])
    increment = tf.nest.map_structure(
        lambda g, d: _as(learning_rate, g) * g / tf.sqrt(d), gradients,
        denominator)
    if momentum:
      new_state['momentum'] = tf.nest.map_structure(
          lambda b, i: _as(momentum, b) * b + i, state['momentum'], increment)
      increment = new_state['momentum']
    new_weights = tf.nest.map_structure(lambda w, i: w - i, weights,
                                        increment)
    return new_state, new_weights

  return Optimizer(
      f'rmsprop(learning_rate={learning_rate}, rho={rho}, momentum='
      f'{momentum}, epsilon={epsilon}, centered={centered})', init, apply)


def adam(learning_rate, beta_1=0.9, beta_2=0.999, epsilon=1e-7):
  """Adam, with Keras's placement of `epsilon` (outside the bias correction).

  The state counts steps so the first- and second-moment bias corrections
  are exact from step one; the corrections are folded into the step size,
  `lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)`, and `epsilon` is added to the
  uncorrected `sqrt(v)`, so the numbers match `keras.optimizers.Adam`.
  """
  _check_non_negative('learning_rate', learning_rate)
  _check_fraction('beta_1', beta_1)
  _check_fraction('beta_2', beta_2)
  _check_positive('adam', 'epsilon', epsilon)

  def init(weights):
    return {
        'step': tf.constant(0, tf.int64),
        'm': tf.nest.map_structure(tf.zeros_like, weights),
        'v': tf.nest.map_structure(tf.zeros_like, weights),
    }

  def apply(state, weights, gradients):
    _check_same_structure(weights, gradients)
    step = state['step'] + 1

    def moments(m, v, g):
      new_m = m + (g - m) * _as(1.0 - beta_1, m)
      new_v = v + (tf.square(g) - v) * _as(1.0 - beta_2, v)
      return new_m, new_v

    def descend(w, m, v):
      t = tf.cast(step, w.dtype)
      step_size = (_as(learning_rate, w)
                   * tf.sqrt(1.0 - tf.pow(_as(beta_2, w), t))
                   / (1.0 - tf.pow(_as(beta_1, w), t)))
      return w - step_size * m / (tf.sqrt(v) + _as(epsilon, w))

    flat_m = tf.nest.flatten(state['m'])
    flat_v = tf.nest.flatten(state['v'])
    flat_g = tf.nest.flatten(gradients)
    flat_moments = [moments(m, v, g) for m, v, g in zip(flat_m, flat_v, flat_g)]
    new_m = tf.nest.pack_sequence_as(weights, [m for m, _ in flat_moments])
    new_v = tf.nest.pack_sequence_as(weights, [v for _, v in flat_moments])
    new_weights = tf.nest.map_structure(descend, weights, new_m, new_v)
    return {'step': step, 'm': new_m, 'v': new_v}, new_weights

  return Optimizer(
      f'adam(learning_rate={learning_rate}, beta_1={beta_1}, '
      f'beta_2={beta_2}, epsilon={epsilon})', init, apply)


def _as(value, like):
  """`value` (a Python number or scalar tensor) in the dtype of `like`."""
  return tf.cast(value, tf.as_dtype(like.dtype))


def _check_same_structure(weights, gradients):
  try:
    tf.nest.assert_same_structure(weights, gradients)
  except (ValueError, TypeError) as e:
    raise errors.InvalidValueError(
        f'Gradients do not have the structure of the weights: {e}') from None


def _check_non_negative(name, value):
  if isinstance(value, numbers.Number) and not value >= 0:
    raise errors.InvalidValueError(f'{name} must be non-negative, got {value}.')


def _check_positive(optimizer, name, value):
  if not value > 0:
    raise errors.InvalidValueError(
        f'{optimizer}: {name} must be positive, got {value}.')


def _check_fraction(name, value):
  if isinstance(value, numbers.Number) and not 0 <= value < 1:
    raise errors.InvalidValueError(f'{name} must be in [0, 1), got {value}.')
