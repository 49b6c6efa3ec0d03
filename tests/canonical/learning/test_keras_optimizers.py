"""Keras optimizers translated into pure ones update exactly as Keras does."""

import numpy as np
import pytest
import tensorflow as tf

from canonical import learning
from canonical.learning import algorithms
from canonical.learning import keras_optimizers
from canonical.learning import models


def _keras_steps(optimizer, weights, gradients):
  variables = [tf.Variable(w) for w in weights]
  for step in gradients:
    optimizer.apply_gradients(zip(step, variables))
  return [v.numpy() for v in variables]


def _pure_steps(optimizer, weights, gradients):
  weights = tuple(tf.constant(w) for w in weights)
  state = optimizer.init(weights)
  for step in gradients:
    state, weights = optimizer.apply(state, weights,
                                     tuple(tf.constant(g) for g in step))
  return [w.numpy() for w in weights]


@pytest.mark.parametrize('make', [
    lambda: tf.keras.optimizers.SGD(0.1),
    lambda: tf.keras.optimizers.SGD(0.1, momentum=0.9),
    lambda: tf.keras.optimizers.SGD(0.05, momentum=0.8, nesterov=True),
    lambda: tf.keras.optimizers.Adam(0.01),
    lambda: tf.keras.optimizers.Adam(0.01, beta_1=0.5, epsilon=1e-3),
    lambda: tf.keras.optimizers.Adagrad(0.1),
    lambda: tf.keras.optimizers.Adagrad(0.1, initial_accumulator_value=0.5),
    lambda: tf.keras.optimizers.RMSprop(0.01),
    lambda: tf.keras.optimizers.RMSprop(0.01, momentum=0.5, centered=True),
], ids=['sgd', 'momentum', 'nesterov', 'adam', 'adam_options', 'adagrad',
        'adagrad_accumulator', 'rmsprop', 'rmsprop_momentum_centered'])
def test_translated_optimizers_take_keras_steps(make):
  rng = np.random.default_rng(0)
  weights = [rng.normal(size=[3, 2]).astype(np.float32),
             rng.normal(size=[2]).astype(np.float32)]
  gradients = [[rng.normal(size=w.shape).astype(np.float32) for w in weights]
               for _ in range(5)]
  expected = _keras_steps(make(), weights, gradients)
  pure = keras_optimizers.from_keras(make())
  for got, want in zip(_pure_steps(pure, weights, gradients), expected):
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize('make, message', [
    (lambda: tf.keras.optimizers.Adamax(), 'Keras Adamax has no pure'),
    (lambda: tf.keras.optimizers.Adam(amsgrad=True), 'amsgrad=True'),
    (lambda: tf.keras.optimizers.SGD(0.1, weight_decay=0.01),
     'weight_decay=0.01'),
    (lambda: tf.keras.optimizers.SGD(0.1, clipnorm=1.0), 'clipnorm=1.0'),
    (lambda: tf.keras.optimizers.SGD(
        tf.keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.9)),
     'learning-rate schedule \\(ExponentialDecay\\)'),
])
def test_what_has_no_pure_counterpart_is_refused_by_name(make, message):
  with pytest.raises(ValueError, match=message):
    keras_optimizers.from_keras(make(), 'client_optimizer_fn')


def test_federated_averaging_takes_keras_optimizers():
  model = learning.KerasFunctionalModel.from_keras(models.small_8x8)
  process = algorithms.build_federated_averaging_process(
      model,
      client_optimizer_fn=lambda: tf.keras.optimizers.SGD(learning_rate=0.02),
      server_optimizer_fn=lambda: tf.keras.optimizers.SGD(
          learning_rate=1.0, momentum=0.9))
  state = process.initialize.invoke()
  assert 'velocity' in state.finalizer
  with pytest.raises(ValueError, match='server_optimizer_fn: Keras Nadam'):
    algorithms.build_federated_averaging_process(
        model, client_optimizer_fn=lambda: learning.sgd(0.1),
        server_optimizer_fn=lambda: tf.keras.optimizers.Nadam())
