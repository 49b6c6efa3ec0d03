"""TFF's EMNIST baselines (`tff.simulation.baselines.emnist`): character
recognition (three models) and an autoencoder, on EMNIST read by
`tff.simulation.datasets.emnist` (or its synthetic version).

The Keras 3 models have TFF's layers and shapes (TFF 0.87 builds them with
tf.keras 2).
"""

import enum

import keras
import tensorflow as tf

from canonical import errors
from canonical.learning import models as learning_models
from canonical.simulation.baselines import seeded
from canonical.simulation.baselines import task as task_lib
from canonical.simulation.datasets import emnist as emnist_data

_MAX_CLIENT_DATASET_SIZE = 418  # The largest EMNIST client's examples.


class CharacterRecognitionModel(enum.Enum):
  """The character recognition models, by TFF's ids."""
  CNN_DROPOUT = 'cnn_dropout'
  CNN = 'cnn'
  TWO_LAYER_DNN = '2nn'


def _outputs(only_digits):
  return 10 if only_digits else 62


def create_conv_dropout_model(only_digits=True, debug_seed=None):
  """Two 3x3 convolutions (32, 64), max pooling, dropout 0.25, a Dense layer
  of 128 with dropout 0.5, and softmax outputs."""
  init = seeded.glorot_uniform(debug_seed)
  return keras.Sequential([
      keras.Input(shape=(28, 28, 1)),
      keras.layers.Conv2D(32, (3, 3), activation='relu',
                          kernel_initializer=init()),
      keras.layers.Conv2D(64, (3, 3), activation='relu',
                          kernel_initializer=init()),
      keras.layers.MaxPool2D(pool_size=(2, 2)),
      keras.layers.Dropout(0.25),
      keras.layers.Flatten(),
      keras.layers.Dense(128, activation='relu', kernel_initializer=init()),
      keras.layers.Dropout(0.5),
      keras.layers.Dense(_outputs(only_digits), activation=tf.nn.softmax,
                         kernel_initializer=init()),
  ])


def create_original_fedavg_cnn_model(only_digits=True, debug_seed=None):
  """The CNN of the FedAvg paper (McMahan et al. 2017): two 5x5
  convolutions (32, 64), each max-pooled, a Dense layer of 512, softmax."""
  init = seeded.glorot_uniform(debug_seed)

  def conv(filters):
    return keras.layers.Conv2D(filters, 5, padding='same',
                               activation=tf.nn.relu,
                               kernel_initializer=init())

  def pool():
    return keras.layers.MaxPooling2D(pool_size=(2, 2), padding='same')

  return keras.Sequential([
      keras.Input(shape=(28, 28, 1)),
      conv(32), pool(), conv(64), pool(),
      keras.layers.Flatten(),
      keras.layers.Dense(512, activation=tf.nn.relu,
                         kernel_initializer=init()),
      keras.layers.Dense(_outputs(only_digits), activation=tf.nn.softmax,
                         kernel_initializer=init()),
  ])


def create_two_hidden_layer_model(only_digits=True, hidden_units=200,
                                  debug_seed=None):
  """Two Dense layers of `hidden_units` (ReLU) on the 784 pixels, and
  softmax outputs."""
  if hidden_units < 1:
    raise errors.InvalidValueError(
        f'hidden_units must be a positive integer, got {hidden_units}.')
  init = seeded.glorot_uniform(debug_seed)
  return keras.Sequential([
      keras.Input(shape=(28, 28, 1)),
      keras.layers.Reshape(target_shape=(28 * 28,)),
      keras.layers.Dense(hidden_units, activation=tf.nn.relu,
                         kernel_initializer=init()),
      keras.layers.Dense(hidden_units, activation=tf.nn.relu,
                         kernel_initializer=init()),
      keras.layers.Dense(_outputs(only_digits), activation=tf.nn.softmax,
                         kernel_initializer=init()),
  ])


def create_autoencoder_model(debug_seed=None):
  """A bottleneck autoencoder of 784 pixels: Dense 1000-500-250 (sigmoid),
  a linear code of 30, then 250-500-1000-784 (sigmoid)."""
  init = seeded.glorot_uniform(debug_seed)
  sizes = [(1000, 'sigmoid'), (500, 'sigmoid'), (250, 'sigmoid'),
           (30, 'linear'), (250, 'sigmoid'), (500, 'sigmoid'),
           (1000, 'sigmoid'), (784, 'sigmoid')]
  return keras.Sequential(
      [keras.Input(shape=(784,))] +
      [keras.layers.Dense(units, activation=activation,
                          kernel_initializer=init())
       for units, activation in sizes])


def _for_character_recognition(element):
  return tf.expand_dims(element['pixels'], axis=-1), element['label']


def _for_autoencoder(element):
  x = 1 - tf.reshape(element['pixels'], (-1, 28 * 28))
  return x, x


def create_preprocess_fn(spec, emnist_task='character_recognition',
                         debug_seed=None):
  """Dataset -> dataset for `spec`: shuffle, repeat, take, batch, then
  (pixels, label) pairs, or (1 - pixels, 1 - pixels) for the autoencoder."""
  mappings = {'character_recognition': _for_character_recognition,
              'autoencoder': _for_autoencoder}
  if emnist_task not in mappings:
    raise errors.InvalidValueError(
        f'emnist_task must be one of {sorted(mappings)}, got '
        f'{emnist_task!r}.')

  def preprocess_fn(dataset):
    dataset = task_lib.shuffle_repeat_take(
        dataset, spec, _MAX_CLIENT_DATASET_SIZE, seed=debug_seed)
    return dataset.batch(spec.batch_size).map(
        mappings[emnist_task], num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=debug_seed is not None)

  return preprocess_fn


def _eval_spec(eval_client_spec, batch_size=64):
  if eval_client_spec is not None:
    return eval_client_spec
  return task_lib.ClientSpec(num_epochs=1, batch_size=batch_size,
                             shuffle_buffer_size=1)


def _character_model(model_id, only_digits, debug_seed):
  try:
    model = CharacterRecognitionModel(model_id)
  except ValueError:
    raise errors.InvalidValueError(
        'model_id must be one of '
        f'{[m.value for m in CharacterRecognitionModel]}, got '
        f'{model_id!r}.') from None
  builder = {
      CharacterRecognitionModel.CNN_DROPOUT: create_conv_dropout_model,
      CharacterRecognitionModel.CNN: create_original_fedavg_cnn_model,
      CharacterRecognitionModel.TWO_LAYER_DNN: create_two_hidden_layer_model,
  }[model]
  return builder(only_digits=only_digits, debug_seed=debug_seed)


def _data(only_digits, cache_dir, use_synthetic_data):
  if use_synthetic_data:
    synthetic = emnist_data.get_synthetic()
    return synthetic, synthetic
  return emnist_data.load_data(only_digits=only_digits, cache_dir=cache_dir)


def create_character_recognition_task_from_datasets(
    train_client_spec, eval_client_spec, model_id, only_digits, train_data,
    test_data, debug_seed=None) -> task_lib.BaselineTask:
  """The character recognition task on given EMNIST-like client data."""
  _character_model(model_id, only_digits, debug_seed)  # Check the id now.
  task_datasets = task_lib.BaselineTaskDatasets(
      train_data=train_data, test_data=test_data,
      train_preprocess_fn=create_preprocess_fn(
          train_client_spec, debug_seed=debug_seed),
      eval_preprocess_fn=create_preprocess_fn(
          _eval_spec(eval_client_spec), debug_seed=debug_seed))

  def model_fn():
    return learning_models.from_keras_model(
        _character_model(model_id, only_digits, debug_seed),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        input_spec=task_datasets.element_type_structure,
        metrics=[keras.metrics.SparseCategoricalAccuracy()])

  return task_lib.BaselineTask(task_datasets, model_fn)


def create_character_recognition_task(
    train_client_spec: task_lib.ClientSpec,
    eval_client_spec: task_lib.ClientSpec | None = None,
    model_id: str | CharacterRecognitionModel = 'cnn_dropout',
    only_digits: bool = False, cache_dir: str | None = None,
    use_synthetic_data: bool = False,
    debug_seed: int | None = None) -> task_lib.BaselineTask:
  """TFF's EMNIST character recognition: 10 classes with `only_digits`,
  else 62; `model_id` 'cnn_dropout', 'cnn' or '2nn'; sparse categorical
  cross-entropy and accuracy. Evaluation batches of 64 by default."""
  train, test = _data(only_digits, cache_dir, use_synthetic_data)
  return create_character_recognition_task_from_datasets(
      train_client_spec, eval_client_spec, model_id, only_digits, train,
      test, debug_seed)


def create_autoencoder_task_from_datasets(
    train_client_spec, eval_client_spec, train_data,
    test_data) -> task_lib.BaselineTask:
  """The autoencoder task on given EMNIST-like client data."""
  task_datasets = task_lib.BaselineTaskDatasets(
      train_data=train_data, test_data=test_data,
      train_preprocess_fn=create_preprocess_fn(train_client_spec,
                                               'autoencoder'),
      eval_preprocess_fn=create_preprocess_fn(_eval_spec(eval_client_spec),
                                              'autoencoder'))

  def model_fn():
    return learning_models.from_keras_model(
        create_autoencoder_model(),
        loss=keras.losses.MeanSquaredError(),
        input_spec=task_datasets.element_type_structure,
        metrics=[keras.metrics.MeanSquaredError(),
                 keras.metrics.MeanAbsoluteError()])

  return task_lib.BaselineTask(task_datasets, model_fn)


def create_autoencoder_task(
    train_client_spec: task_lib.ClientSpec,
    eval_client_spec: task_lib.ClientSpec | None = None,
    only_digits: bool = False, cache_dir: str | None = None,
    use_synthetic_data: bool = False) -> task_lib.BaselineTask:
  """TFF's EMNIST autoencoder: reconstruct 1 - pixels, mean squared error
  (and mean absolute error as a metric)."""
  train, test = _data(only_digits, cache_dir, use_synthetic_data)
  return create_autoencoder_task_from_datasets(train_client_spec,
                                               eval_client_spec, train, test)
