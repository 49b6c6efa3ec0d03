"""TFF 0.87's "Building Your Own Federated Learning Algorithm", as its user
writes it, on made-up 28x28 digits (EMNIST's download is refused here).

Every cell runs as the tutorial writes it: the client and server steps
assign a `VariableModel`'s variables (`from_keras_model`), train with a
Keras SGD inside `tf.function`s and build the model inside their
computations (the compiler lowers those call-local variables into values);
`initialize_fn` from a server computation, `next_fn` with broadcast, map,
mean and map, a `tff.templates.IterativeProcess` whose `next` returns only
the state. The numbers were printed by TFF 0.87 running the same cells on
the same data, from the same starting weights (Keras 3 and Keras 2 may
draw the tutorial's initial weights differently)."""

import collections

import keras
import numpy as np
import pytest
import tensorflow as tf

import canonical as tff

NUM_CLIENTS = 5
BATCH_SIZE = 10


def _client_data(seed):
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, 10, size=30).astype(np.int32)
  pixels = (rng.random((30, 28, 28)) * 0.2).astype(np.float32)
  pixels[np.arange(30), labels * 2, :] += 0.8
  return tf.data.Dataset.from_tensor_slices(
      collections.OrderedDict(label=labels, pixels=pixels))


def preprocess(dataset):

  def batch_format_fn(element):
    return (tf.reshape(element['pixels'], [-1, 784]),
            tf.reshape(element['label'], [-1, 1]))

  return dataset.batch(BATCH_SIZE).map(batch_format_fn)


federated_train_data = [preprocess(_client_data(i)) for i in range(NUM_CLIENTS)]


def create_keras_model():
  initializer = keras.initializers.GlorotNormal(seed=0)
  return keras.models.Sequential([
      keras.layers.Input(shape=(784,)),
      keras.layers.Dense(10, kernel_initializer=initializer),
      keras.layers.Softmax(),
  ])


def model_fn():
  keras_model = create_keras_model()
  return tff.learning.models.from_keras_model(
      keras_model,
      input_spec=federated_train_data[0].element_spec,
      loss=keras.losses.SparseCategoricalCrossentropy(),
      metrics=[keras.metrics.SparseCategoricalAccuracy()])


@tf.function
def client_update(model, dataset, server_weights, client_optimizer):
  """Performs training (using the server model weights) on the client's dataset."""
  # Initialize the client model with the current server weights.
  client_weights = model.trainable_variables
  # Assign the server weights to the client model.
  tf.nest.map_structure(lambda x, y: x.assign(y),
                        client_weights, server_weights)

  # Use the client_optimizer to update the local model.
  for batch in dataset:
    with tf.GradientTape() as tape:
      # Compute a forward pass on the batch of data
      outputs = model.forward_pass(batch)

    # Compute the corresponding gradient
    grads = tape.gradient(outputs.loss, client_weights)
    grads_and_vars = zip(grads, client_weights)

    # Apply the gradient using a client optimizer.
    client_optimizer.apply_gradients(grads_and_vars)

  return client_weights


@tf.function
def server_update(model, mean_client_weights):
  """Updates the server model weights as the average of the client model weights."""
  model_weights = model.trainable_variables
  # Assign the mean client weights to the server model.
  tf.nest.map_structure(lambda x, y: x.assign(y),
                        model_weights, mean_client_weights)
  return model_weights


@tff.tensorflow.computation
def server_init():
  model = model_fn()
  return model.trainable_variables


@tff.federated_computation
def initialize_fn():
  return tff.federated_value(server_init(), tff.SERVER)


whimsy_model = model_fn()
tf_dataset_type = tff.SequenceType(
    tff.types.tensorflow_to_type(whimsy_model.input_spec))
model_weights_type = server_init.type_signature.result


@tff.tensorflow.computation(tf_dataset_type, model_weights_type)
def client_update_fn(tf_dataset, server_weights):
  model = model_fn()
  client_optimizer = keras.optimizers.SGD(learning_rate=0.01)
  return client_update(model, tf_dataset, server_weights, client_optimizer)


@tff.tensorflow.computation(model_weights_type)
def server_update_fn(mean_client_weights):
  model = model_fn()
  return server_update(model, mean_client_weights)


federated_server_type = tff.FederatedType(model_weights_type, tff.SERVER)
federated_dataset_type = tff.FederatedType(tf_dataset_type, tff.CLIENTS)


@tff.federated_computation(federated_server_type, federated_dataset_type)
def next_fn(server_weights, federated_dataset):
  # Broadcast the server weights to the clients.
  server_weights_at_client = tff.federated_broadcast(server_weights)

  # Each client computes their updated weights.
  client_weights = tff.federated_map(
      client_update_fn, (federated_dataset, server_weights_at_client))

  # The server averages these updates.
  mean_client_weights = tff.federated_mean(client_weights)

  # The server updates its model.
  server_weights = tff.federated_map(server_update_fn, mean_client_weights)

  return server_weights


federated_algorithm = tff.templates.IterativeProcess(
    initialize_fn=initialize_fn,
    next_fn=next_fn
)


def evaluate(server_state):
  keras_model = create_keras_model()
  keras_model.compile(
      loss=keras.losses.SparseCategoricalCrossentropy(),
      metrics=[keras.metrics.SparseCategoricalAccuracy()]
  )
  keras_model.set_weights([np.asarray(w) for w in server_state])
  x, y = next(iter(preprocess(_client_data(99)).unbatch().batch(30)))
  return keras_model.evaluate(x, y, verbose=0)


def _start_state():
  """Starting weights both TFF 0.87 and this test train from."""
  rng = np.random.default_rng(7)
  return [(rng.normal(size=(784, 10)) * 0.05).astype(np.float32),
          np.zeros([10], np.float32)]


# TFF 0.87: three rounds of `federated_algorithm.next` from `_start_state()`.
TFF_BIAS = [0.001512812334112823, -0.0010802295291796327,
            -0.0015672616427764297, -0.0012373129138723016,
            -0.0031110127456486225, 0.001058183261193335,
            0.0007136859931051731, -0.004437663592398167,
            0.005634264089167118, 0.0025145343970507383]
TFF_KERNEL_ROW_0 = [0.0073477523401379585, 0.014101964421570301,
                    -0.014950426295399666, -0.04516949504613876,
                    -0.024256011471152306, -0.05033901333808899,
                    0.0023565758019685745, 0.06565724313259125,
                    -0.024698272347450256, -0.031220009550452232]
TFF_KERNEL_COLUMN_SUMS = [-1.2163509130477905, -0.748257577419281,
                          0.437909334897995, -1.8830187320709229,
                          1.6564491987228394, -1.0444127321243286,
                          -0.28856977820396423, -0.2431340217590332,
                          -1.6009353399276733, -3.5884952545166016]
TFF_EVALUATE = [2.347163200378418, 0.06666667014360428]


def test_the_tutorials_types_are_tffs():
  assert str(tf_dataset_type) == '<float32[?,784],int32[?,1]>*'
  assert str(model_weights_type) == '<float32[784,10],float32[10]>'
  assert str(federated_algorithm.initialize.type_signature) == (
      '( -> <float32[784,10],float32[10]>@SERVER)')
  assert str(federated_algorithm.next.type_signature) == (
      '(<server_weights=<float32[784,10],float32[10]>@SERVER,'
      'federated_dataset={<float32[?,784],int32[?,1]>*}@CLIENTS> -> '
      '<float32[784,10],float32[10]>@SERVER)')
  kernel, bias = federated_algorithm.initialize()
  assert np.asarray(kernel).shape == (784, 10)
  np.testing.assert_array_equal(bias, np.zeros(10))


@pytest.mark.slow
def test_the_federated_algorithm_trains_with_tffs_numbers_and_compiles():
  server_state = _start_state()
  for _ in range(3):
    server_state = federated_algorithm.next(server_state,
                                            federated_train_data)
  kernel, bias = server_state
  np.testing.assert_allclose(bias, TFF_BIAS, rtol=1e-5, atol=1e-9)
  np.testing.assert_allclose(kernel[0], TFF_KERNEL_ROW_0, rtol=1e-5)
  np.testing.assert_allclose(np.sum(kernel, axis=0), TFF_KERNEL_COLUMN_SUMS,
                             rtol=1e-5)
  np.testing.assert_allclose(evaluate(server_state), TFF_EVALUATE, rtol=1e-5)
  # The same process compiles to a form, whose round is the same round.
  form = tff.compile(federated_algorithm)
  state, _ = tff.run_round(form, _start_state(), federated_train_data)
  local = federated_algorithm.next(_start_state(), federated_train_data)
  for a, b in zip(state, local):
    np.testing.assert_allclose(a, b, atol=1e-6)
