"""A small Keras model and two clients' data, as TFF 0.87's tutorials write
them; TFF 0.87's own results on them are recorded in
tests/canonical/learning/test_tff_087_fed_avg.py."""

import keras
import numpy as np
import tensorflow as tf

import canonical as tff


def model_fn():
  keras_model = keras.Sequential([
      keras.Input(shape=(4,)),
      keras.layers.Dense(3, kernel_initializer='zeros')])
  return tff.learning.models.from_keras_model(
      keras_model,
      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=(tf.TensorSpec([None, 4], tf.float32),
                  tf.TensorSpec([None], tf.int32)),
      metrics=[keras.metrics.SparseCategoricalAccuracy()])


def client_data():
  rng = np.random.default_rng(0)

  def dataset(n):
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(2)

  return [dataset(5), dataset(3)]
