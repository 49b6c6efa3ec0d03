"""TFF's `tff.simulation.models.mnist`: the Keras models of TFF's MNIST
examples, built with Keras 3 (TFF 0.87 builds them with tf.keras 2): the
same layers and shapes; initial weights drawn by Keras 3 (its seeded
initializers draw other numbers than tf.keras 2's)."""

import collections

import keras
import tensorflow as tf

from canonical.learning import metrics as metrics_lib


def create_simple_keras_model(learning_rate=0.1):
  """A softmax regression on 784 pixels (one Dense layer of 10, zero
  initial weights), compiled with SGD(`learning_rate`), sparse categorical
  cross-entropy and the metrics accuracy and number of examples."""
  model = keras.Sequential([
      keras.Input(shape=(784,)),
      keras.layers.Flatten(),
      keras.layers.Dense(10, activation=tf.nn.softmax,
                         kernel_initializer='zeros'),
  ])
  model.compile(
      loss=keras.losses.SparseCategoricalCrossentropy(),
      optimizer=keras.optimizers.SGD(learning_rate),
      metrics=[keras.metrics.SparseCategoricalAccuracy(),
               metrics_lib.NumExamplesCounter()])
  return model


def keras_dataset_from_emnist(dataset):
  """EMNIST's elements (`label`, `pixels`) as `OrderedDict(x=784 pixels,
  y=label)`, what `create_simple_keras_model` takes."""
  return dataset.map(lambda example: collections.OrderedDict(
      x=tf.reshape(example['pixels'], [-1]), y=example['label']))


def create_keras_model(compile_model=False):
  """TensorFlow's MNIST convolutional network on 784 pixels: two 5x5
  convolutions (32 and 64 filters, each max-pooled 2x2), a Dense layer of
  1024 with dropout 0.4, and 10 logits; each initializer RandomNormal with
  its own fixed seed (1 to 4), as TFF seeds them. `compile_model` compiles
  it as TFF does: SGD(0.1) and SparseCategoricalCrossentropy() (which, as
  in TFF, reads the logits as probabilities)."""
  seeds = iter(range(1, 5))

  def initializer():
    return keras.initializers.RandomNormal(seed=next(seeds))

  def max_pool():
    return keras.layers.MaxPooling2D((2, 2), (2, 2), padding='same',
                                     data_format='channels_last')

  def conv(filters):
    return keras.layers.Conv2D(filters, 5, padding='same',
                               data_format='channels_last',
                               activation=tf.nn.relu,
                               kernel_initializer=initializer())

  model = keras.Sequential([
      keras.Input(shape=(28 * 28,)),
      keras.layers.Reshape(target_shape=(28, 28, 1)),
      conv(32),
      max_pool(),
      conv(64),
      max_pool(),
      keras.layers.Flatten(),
      keras.layers.Dense(1024, activation=tf.nn.relu,
                         kernel_initializer=initializer()),
      keras.layers.Dropout(0.4, seed=1),
      keras.layers.Dense(10, kernel_initializer=initializer()),
  ])
  if compile_model:
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(),
                  optimizer=keras.optimizers.SGD(learning_rate=0.1))
  return model
