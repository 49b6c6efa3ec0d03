"""A small Keras model and two clients' data, as TFF 0.87's tutorials write
them; TFF 0.87's own results on them are recorded in
tests/canonical/learning/test_tff_087_fed_avg.py. Also a small
reconstruction model and three clients' data, whose TFF 0.87 results are in
tests/canonical/learning/test_tff_087_algorithms.py."""

import collections

import keras
import numpy as np
import tensorflow as tf

import canonical as tff


INPUT_SPEC = (tf.TensorSpec([None, 4], tf.float32),
              tf.TensorSpec([None], tf.int32))


def keras_model_fn():
  return keras.Sequential([
      keras.Input(shape=(4,)),
      keras.layers.Dense(3, kernel_initializer='zeros')])


def model_fn():
  return tff.learning.models.from_keras_model(
      keras_model_fn(),
      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=INPUT_SPEC,
      metrics=[keras.metrics.SparseCategoricalAccuracy()])


def functional_model():
  """`model_fn`'s model as a `FunctionalModel`."""
  return tff.learning.models.functional_model_from_keras(
      keras_model_fn(),
      keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      INPUT_SPEC,
      metrics_constructor=collections.OrderedDict(
          sparse_categorical_accuracy=keras.metrics.SparseCategoricalAccuracy))


def client_data():
  rng = np.random.default_rng(0)

  def dataset(n):
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(2)

  return [dataset(5), dataset(3)]


def recon_model_fn():
  """A Keras model whose output adds a global and a local dense layer."""
  x = keras.Input(shape=(4,))
  global_dense = keras.layers.Dense(3, kernel_initializer='zeros')
  local_dense = keras.layers.Dense(3, kernel_initializer='zeros')
  keras_model = keras.Model(
      x, keras.layers.Add()([global_dense(x), local_dense(x)]))
  return tff.learning.models.ReconstructionModel.from_keras_model_and_layers(
      keras_model, global_layers=[global_dense], local_layers=[local_dense],
      input_spec=(tf.TensorSpec([None, 4], tf.float32),
                  tf.TensorSpec([None], tf.int32)))


def recon_data():
  rng = np.random.default_rng(4)

  def dataset(n):
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = ((x[:, 0] + x[:, 1] > 0).astype(np.int32) +
         (x[:, 2] > 1).astype(np.int32))
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(2)

  return [dataset(8), dataset(6), dataset(5)]


def recon_loss():
  return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def recon_metrics():
  return [keras.metrics.SparseCategoricalAccuracy()]

