"""TFF 0.87's "Federated Learning for Image Classification", written as its
user writes it. The tutorial downloads EMNIST (`tff.simulation.datasets.
emnist.load_data()`), which is refused here (nothing is downloaded at run
time); the same program runs on `TestClientData` of made-up 28x28 digits."""

import collections

import keras
import numpy as np
import pytest
import tensorflow as tf

import canonical as tff

NUM_CLIENTS = 4
NUM_EPOCHS = 2
BATCH_SIZE = 10
SHUFFLE_BUFFER = 20
PREFETCH_BUFFER = 10


def _emnist_like_client_data():
  rng = np.random.default_rng(1)
  clients = {}
  for i in range(6):
    labels = rng.integers(0, 10, size=24).astype(np.int32)
    pixels = (rng.random((24, 28, 28)) * 0.2).astype(np.float32)
    pixels[np.arange(24), labels * 2, :] += 0.8  # A row per class.
    clients[f'f{i:04d}_00'] = collections.OrderedDict(
        label=labels, pixels=pixels)
  return tff.simulation.datasets.TestClientData(clients)


def preprocess(dataset):

  def batch_format_fn(element):
    return collections.OrderedDict(
        x=tf.reshape(element['pixels'], [-1, 784]),
        y=tf.reshape(element['label'], [-1, 1]))

  return dataset.repeat(NUM_EPOCHS).shuffle(SHUFFLE_BUFFER, seed=1).batch(
      BATCH_SIZE).map(batch_format_fn).prefetch(PREFETCH_BUFFER)


def make_federated_data(client_data, client_ids):
  return [preprocess(client_data.create_tf_dataset_for_client(x))
          for x in client_ids]


def create_keras_model():
  return keras.models.Sequential([
      keras.layers.InputLayer(input_shape=(784,)),
      keras.layers.Dense(10, kernel_initializer='zeros'),
      keras.layers.Softmax(),
  ])


def test_emnist_download_is_refused_by_name():
  with pytest.raises(AttributeError, match='TestClientData'):
    tff.simulation.datasets.emnist.load_data()


def test_the_tutorials_training_and_evaluation_run_and_learn():
  emnist_train = _emnist_like_client_data()
  assert len(emnist_train.client_ids) == 6
  sample_clients = emnist_train.client_ids[0:NUM_CLIENTS]
  federated_train_data = make_federated_data(emnist_train, sample_clients)
  preprocessed_example_dataset = federated_train_data[0]

  def model_fn():
    keras_model = create_keras_model()
    return tff.learning.models.from_keras_model(
        keras_model,
        input_spec=preprocessed_example_dataset.element_spec,
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=[keras.metrics.SparseCategoricalAccuracy()])

  training_process = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=0.02),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=1.0))
  assert str(training_process.initialize.type_signature).startswith(
      '( -> <global_model_weights=<trainable=<float32[784,10],float32[10]>,'
      'non_trainable=<>>')
  train_state = training_process.initialize()
  losses = []
  for _ in range(6):
    result = training_process.next(train_state, federated_train_data)
    train_state = result.state
    train_metrics = result.metrics['client_work']['train']
    losses.append(train_metrics['loss'])
    assert train_metrics['num_examples'] == NUM_CLIENTS * 24 * NUM_EPOCHS
  assert losses[-1] < losses[0], losses

  evaluation_process = tff.learning.algorithms.build_fed_eval(model_fn)
  evaluation_state = evaluation_process.initialize()
  model_weights = training_process.get_model_weights(train_state)
  evaluation_state = evaluation_process.set_model_weights(
      evaluation_state, model_weights)
  evaluation_output = evaluation_process.next(
      evaluation_state, make_federated_data(emnist_train,
                                            emnist_train.client_ids[4:]))
  metrics = evaluation_output.metrics['client_work']['eval'][
      'current_round_metrics']
  assert metrics['num_examples'] == 2 * 24 * NUM_EPOCHS
  assert metrics['sparse_categorical_accuracy'] > 0.5
