"""Ready Keras model builders: each call makes a fresh model with fixed input shape.

`num_classes` sizes the last layer (10 by default, as MNIST-style data has).
"""

import keras


def cnn_28x28(num_classes=10):
  """The CNN of TFF's compression tutorial (EMNIST): 1,663,370 parameters with 10 classes."""
  return keras.Sequential([
      keras.Input(shape=(28, 28, 1)),
      keras.layers.Conv2D(32, 5, padding='same', activation='relu'),
      keras.layers.MaxPooling2D(2),
      keras.layers.Conv2D(64, 5, padding='same', activation='relu'),
      keras.layers.MaxPooling2D(2),
      keras.layers.Flatten(),
      keras.layers.Dense(512, activation='relu'),
      keras.layers.Dense(num_classes),
  ], name='cnn_28x28')


def small_8x8(num_classes=10):
  """A small CNN for 8x8 digits (scikit-learn's): 4,538 parameters with 10 classes.

  Small enough that tests and quick runs train it in a fraction of a second.
  """
  return keras.Sequential([
      keras.Input(shape=(8, 8, 1)),
      keras.layers.Conv2D(8, 3, padding='same', activation='relu'),
      keras.layers.MaxPooling2D(2),
      keras.layers.Flatten(),
      keras.layers.Dense(32, activation='relu'),
      keras.layers.Dense(num_classes),
  ], name='small_8x8')
