"""`tff.learning.models` of TFF 0.87: `FunctionalModel` (pure functions of
its weights: `functional`, `functional_from_keras`, `functional_saving`),
`VariableModel` (`variable_model`, `model_from_functional`), `ModelWeights`
(`model_weights`), `ReconstructionModel` (`reconstruction_model`); and
ready Keras model builders: each call makes a fresh model with a fixed
input shape; `num_classes` sizes the last layer (10 by default, as
MNIST-style data has).
"""

import keras

from canonical.learning.functional_from_keras import functional_model_from_keras
from canonical.learning.functional_saving import load_functional_model
from canonical.learning.functional_saving import save_functional_model
from canonical.learning.keras_model import from_keras_model
from canonical.learning.model import BatchOutput
from canonical.learning.model import FunctionalModel
from canonical.learning.model import ModelWeights
from canonical.learning.model_from_functional import model_from_functional
from canonical.learning.weights_type import weights_type_from_model
from canonical.learning.reconstruction_model import ReconstructionDatasetSplitFn
from canonical.learning.reconstruction_model import ReconstructionModel
from canonical.learning.variable_model import VariableModel
from canonical.learning.variable_model_saving import load
from canonical.learning.variable_model_saving import save

__all__ = [
    'BatchOutput', 'FunctionalModel', 'ModelWeights',
    'ReconstructionDatasetSplitFn', 'ReconstructionModel', 'VariableModel',
    'cnn_28x28', 'from_keras_model', 'functional_model_from_keras',
    'load', 'load_functional_model', 'model_from_functional', 'save',
    'save_functional_model', 'small_8x8',
    'weights_type_from_model',
]


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
