"""TFF's `build_adafactor` (Shazeer and Stern, 2018), with TFF 0.87's steps,
and a state that works inside the learning algorithms.

A weight of rank 2 or more keeps factored second moments: `r`, the running
mean of `g^2 + epsilon_1` over its last axis, and `c`, over its second to
last; its preconditioner is `v = r c / mean(r)`. A weight of lower rank
keeps `v` itself. With step `t` (from 1), `beta_2 = 1 - t^beta_2_decay`,
the step is `-alpha u / max(1, rms(u) / clip_threshold)` for `u = g /
sqrt(v)` and `alpha = max(epsilon_2, rms(w)) rho`, where `rho = min(lr,
sqrt(t))` and, with `relative_step`, `lr` is first capped at `1 /
sqrt(t)`. These are TFF 0.87's formulas, numbers included.

TFF 0.87's own optimizer fails inside its algorithms: its step count starts
as an int and becomes a float (a server optimizer's state changes type),
and its `set_hparams` returns the hyperparameters instead of the state (a
client optimizer loses its slots: `KeyError 'steps'`). Here the count is a
float32 from the start and `set_hparams` returns the state.
"""

import collections
import functools
from typing import NamedTuple

import tensorflow as tf

from canonical import errors
from canonical.learning.optimizers import base

_HPARAMS = (base.LEARNING_RATE_KEY, 'beta_2_decay', 'epsilon_1', 'epsilon_2',
            'clip_threshold', 'relative_step')


class AdafactorMoment(NamedTuple):
  """One weight's second moments: `r` and `c` factored (empty for a weight
  of rank below 2), `v` the preconditioner."""
  r: tf.Tensor
  c: tf.Tensor
  v: tf.Tensor


def _rms(t):
  return tf.sqrt(tf.reduce_mean(tf.square(t)))


def _cast_like(tensor, value):
  return tf.cast(value, tensor.dtype)


class _Adafactor(base.Optimizer):
  """Adafactor's state: `steps` (float32), `moments` (an `AdafactorMoment`
  per weight, in `tf.nest.flatten` order) and `hparams`."""

  def __init__(self, text, hparams):
    self._text = text
    self._hparams = hparams

  def __repr__(self):
    return self._text

  def initialize(self, specs):

    def moment(spec):
      shape = tf.TensorShape(spec.shape)
      if shape.rank < 2:
        r_shape = c_shape = [0]
      else:
        r_shape, c_shape = shape[:-1], shape[:-2].concatenate(shape[-1:])
      return AdafactorMoment(tf.zeros(r_shape, spec.dtype),
                             tf.zeros(c_shape, spec.dtype),
                             tf.zeros(shape, spec.dtype))

    hparams = collections.OrderedDict(
        (key, tf.constant(value, tf.bool if key == 'relative_step'
                          else tf.float32))
        for key, value in self._hparams.items())
    return collections.OrderedDict(
        steps=tf.constant(0.0, tf.float32),
        moments=tuple(moment(spec) for spec in tf.nest.flatten(specs)),
        hparams=hparams)

  def next(self, state, weights, gradients):
    state = self._checked(state)
    gradients = base.handle_indexed_slices_gradients(gradients)
    base.check_weights_gradients_match(weights, gradients)
    hparams = state['hparams']
    step = tf.cast(state['steps'], tf.float32) + 1.0
    rate = tf.cast(hparams[base.LEARNING_RATE_KEY], tf.float32)
    relative = hparams['relative_step']
    capped = tf.minimum(rate, tf.math.rsqrt(step))
    if isinstance(relative, bool):
      rate = capped if relative else rate
    else:
      rate = tf.where(tf.cast(relative, tf.bool), capped, rate)
    rho = tf.minimum(rate, 1.0 / tf.math.rsqrt(step))
    beta_2 = 1.0 - tf.pow(step, tf.cast(hparams['beta_2_decay'], tf.float32))

    def update(moment, weight, gradient):
      if gradient is None:
        return moment, weight
      weight = tf.convert_to_tensor(weight)
      gradient = tf.convert_to_tensor(gradient)
      like = functools.partial(_cast_like, weight)
      alpha = tf.maximum(like(hparams['epsilon_2']), _rms(weight)) * like(rho)
      squared = tf.square(gradient) + like(hparams['epsilon_1'])
      b = like(beta_2)
      if weight.shape.rank < 2:
        moment = AdafactorMoment(moment.r, moment.c,
                                 b * moment.v + (1.0 - b) * squared)
      else:
        r = b * moment.r + (1.0 - b) * tf.reduce_mean(squared, axis=-1)
        c = b * moment.c + (1.0 - b) * tf.reduce_mean(squared, axis=-2)
        v = (tf.expand_dims(r / tf.reduce_mean(r, axis=-1, keepdims=True),
                            -1) * tf.expand_dims(c, -2))
        moment = AdafactorMoment(r, c, v)
      u = gradient * tf.math.rsqrt(moment.v)
      u = u / tf.maximum(like(1.0), _rms(u) / like(hparams['clip_threshold']))
      return moment, weight + -alpha * u

    flat_weights = tf.nest.flatten(weights)
    flat_gradients = tf.nest.flatten(gradients)
    if len(state['moments']) != len(flat_weights):
      raise errors.InvalidValueError(
          f'{self._text}: the state has moments for '
          f'{len(state["moments"])} weights, but {len(flat_weights)} '
          'weights were given; was it made by initialize for these?')
    updated = [update(AdafactorMoment(*m), w, g) for m, w, g in zip(
        state['moments'], flat_weights, flat_gradients)]
    new_weights = tf.nest.pack_sequence_as(weights, [w for _, w in updated])
    return collections.OrderedDict(
        steps=step, moments=tuple(m for m, _ in updated),
        hparams=hparams), new_weights

  def get_hparams(self, state):
    return collections.OrderedDict(self._checked(state)['hparams'])

  def set_hparams(self, state, hparams):
    state = self._checked(state)
    unknown = [key for key in hparams if key not in _HPARAMS]
    if unknown:
      raise errors.InvalidValueError(
          f'{self._text}: set_hparams got {unknown}, but Adafactor\'s '
          f'hyperparameters are {list(_HPARAMS)}.')
    new_hparams = collections.OrderedDict(state['hparams'])
    for key, value in hparams.items():
      new_hparams[key] = tf.cast(value, new_hparams[key].dtype)
    return collections.OrderedDict(state, hparams=new_hparams)

  def _checked(self, state):
    if not isinstance(state, dict) or any(
        key not in state for key in ('steps', 'moments', 'hparams')):
      raise errors.InvalidValueError(
          f'{self._text}: the state must hold steps, moments and hparams '
          'as its initialize made it, got '
          f'{list(state) if isinstance(state, dict) else type(state)}.')
    return state


def build_adafactor(learning_rate, *, beta_2_decay=-0.8, epsilon_1=1e-30,
                    epsilon_2=1e-3, clip_threshold=1.0, relative_step=True):
  """TFF's `build_adafactor`: the optimizer above; its hyperparameters live
  in the state (`get_hparams` / `set_hparams`)."""
  base.check_builder_args('build_adafactor',
                          non_negative=dict(learning_rate=learning_rate))
  if not isinstance(relative_step, bool):
    raise errors.InvalidTypeError(
        f'build_adafactor: relative_step must be a bool, got '
        f'{relative_step!r}.')
  hparams = collections.OrderedDict(
      learning_rate=learning_rate, beta_2_decay=beta_2_decay,
      epsilon_1=epsilon_1, epsilon_2=epsilon_2,
      clip_threshold=clip_threshold, relative_step=relative_step)
  text = 'build_adafactor(' + ', '.join(
      f'{key}={value}' for key, value in hparams.items()) + ')'
  return _Adafactor(text, hparams)
