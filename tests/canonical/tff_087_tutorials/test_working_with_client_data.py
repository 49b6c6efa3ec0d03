"""TFF 0.87's "Working with tff's ClientData", written as its user writes it,
on `TestClientData` (the tutorial's EMNIST download is refused here):
preprocessing client data, training on datasets made in Python, and on
datasets that the clients make themselves from their ids
(`dataset_computation` composed into the learning process)."""

import collections

import keras
import numpy as np
import tensorflow as tf

import canonical as tff

BATCH_SIZE = 8


def _client_data():
  rng = np.random.default_rng(2)
  clients = {}
  for i in range(5):
    labels = rng.integers(0, 3, size=16).astype(np.int32)
    pixels = (rng.random((16, 4, 4)) * 0.1).astype(np.float32)
    pixels[np.arange(16), labels, 0] += 1.0
    clients[f'client_{i}'] = collections.OrderedDict(label=labels,
                                                     pixels=pixels)
  return tff.simulation.datasets.TestClientData(clients)


def preprocess_and_shuffle(dataset):

  def map_fn(element):
    return collections.OrderedDict(
        x=tf.reshape(element['pixels'], shape=(-1, 16)),
        y=tf.reshape(element['label'], shape=(-1, 1)))

  return dataset.shuffle(16, seed=3).batch(BATCH_SIZE).map(map_fn)


def model_fn(element_spec):

  def build():
    keras_model = keras.Sequential([
        keras.Input(shape=(16,)),
        keras.layers.Dense(3, kernel_initializer='zeros')])
    return tff.learning.models.from_keras_model(
        keras_model, input_spec=element_spec,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy()])

  return build


def test_preprocessed_client_data_trains_from_python_and_from_client_ids():
  client_data = _client_data()
  assert client_data.client_ids == [f'client_{i}' for i in range(5)]
  assert client_data.element_type_structure['pixels'].shape == [4, 4]
  preprocessed = client_data.preprocess(preprocess_and_shuffle)
  example = preprocessed.create_tf_dataset_for_client('client_0')
  assert example.element_spec['x'].shape.as_list() == [None, 16]
  process = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn(example.element_spec),
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.5))

  # Datasets made in Python.
  state = process.initialize()
  ids = client_data.client_ids[:3]
  for _ in range(3):
    output = process.next(
        state, [preprocessed.create_tf_dataset_for_client(c) for c in ids])
    state = output.state
  in_python = process.get_model_weights(state)
  assert output.metrics['client_work']['train']['num_examples'] == 48

  # The same rounds, each client making its data from its id.
  trainer = tff.simulation.compose_dataset_computation_with_learning_process(
      preprocessed.dataset_computation, process)
  state = trainer.initialize()
  for _ in range(3):
    output = trainer.next(state, ids)
    state = output.state
  from_ids = trainer.get_model_weights(state)
  for a, b in zip(in_python.trainable, from_ids.trainable):
    np.testing.assert_allclose(a, b, atol=1e-6)
  assert output.metrics['client_work']['train'][
      'sparse_categorical_accuracy'] > 0.5

  # The process compiles; its form runs a round on the clients' datasets.
  form = tff.compile(process)
  _, metrics = tff.run_round(
      form, form.initialize(),
      [preprocessed.create_tf_dataset_for_client(c) for c in ids])
  assert float(metrics['client_work']['train']['num_examples']) == 48
