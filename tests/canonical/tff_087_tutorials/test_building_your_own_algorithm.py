"""TFF 0.87's "Building Your Own Federated Learning Algorithm", as its user
writes it, on made-up 28x28 digits (EMNIST's download is refused here).

The federated part runs as written: `initialize_fn` from a server
computation, `next_fn` with broadcast, map, mean and map, a
`tff.templates.IterativeProcess` whose `next` returns only the state. Its
client and server steps do not: the tutorial writes them against TFF's
`VariableModel` (assigning `model.trainable_variables`, a Keras optimizer's
slots) and builds the model inside its computations; pieces here are pure
functions, so that is refused naming the line, and the same steps written
functionally (our `FunctionalModel`, built once; a
`tff.learning.optimizers` optimizer) run and train."""

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


def test_the_tutorials_variable_client_step_is_refused_by_name():

  @tff.tensorflow.computation
  def server_init():
    model = model_fn()  # Builds Keras variables inside the computation.
    return model.trainable_variables

  with pytest.raises(tff.FederatedError, match='server_init.*creates a '
                     'variable'):
    server_init.type_signature  # pylint: disable=pointless-statement


# The client and server steps, functionally: the model is built once, its
# weights go in and out as tensors.
model = model_fn()
client_optimizer = tff.learning.optimizers.build_sgdm(learning_rate=0.5)


@tf.function
def client_update(model, dataset, server_weights, client_optimizer):
  """Trains from the server's weights over the client's batches."""
  non_trainable = tuple(model.initial_weights.non_trainable)
  optimizer_state = client_optimizer.initialize(
      tf.nest.map_structure(tf.TensorSpec.from_tensor, server_weights))

  def train(state, batch):
    weights, optimizer_state = state
    with tf.GradientTape() as tape:
      tape.watch(weights)
      loss = model.loss_and_metrics(
          tff.learning.models.ModelWeights(weights, non_trainable),
          batch).loss
    grads = tape.gradient(loss, weights)
    optimizer_state, weights = client_optimizer.next(optimizer_state,
                                                     weights, grads)
    return tuple(weights), optimizer_state

  weights, _ = dataset.reduce((tuple(server_weights), optimizer_state),
                              train)
  return weights


@tf.function
def server_update(model, mean_client_weights):
  del model  # The tutorial's server takes the mean as its new model.
  return mean_client_weights


@tff.tensorflow.computation
def server_init():
  return tuple(model.initial_weights.trainable)


@tff.federated_computation
def initialize_fn():
  return tff.federated_value(server_init(), tff.SERVER)


tf_dataset_type = tff.SequenceType(model.batch_spec)
model_weights_type = server_init.type_signature.result


@tff.tensorflow.computation(tf_dataset_type, model_weights_type)
def client_update_fn(tf_dataset, server_weights):
  return client_update(model, tf_dataset, server_weights, client_optimizer)


@tff.tensorflow.computation(model_weights_type)
def server_update_fn(mean_client_weights):
  return server_update(model, mean_client_weights)


federated_server_type = tff.FederatedType(model_weights_type, tff.SERVER)
federated_dataset_type = tff.FederatedType(tf_dataset_type, tff.CLIENTS)


@tff.federated_computation(federated_server_type, federated_dataset_type)
def next_fn(server_weights, federated_dataset):
  server_weights_at_client = tff.federated_broadcast(server_weights)
  client_weights = tff.federated_map(
      client_update_fn, (federated_dataset, server_weights_at_client))
  mean_client_weights = tff.federated_mean(client_weights)
  server_weights = tff.federated_map(server_update_fn, mean_client_weights)
  return server_weights


def evaluate(server_state):
  keras_model = create_keras_model()
  keras_model.compile(loss=keras.losses.SparseCategoricalCrossentropy(),
                      metrics=[keras.metrics.SparseCategoricalAccuracy()])
  keras_model.set_weights([np.asarray(w) for w in server_state])
  x, y = next(iter(preprocess(_client_data(99)).unbatch().batch(30)))
  return keras_model.evaluate(x, y, verbose=0)


def test_the_federated_algorithm_trains_and_compiles():
  assert str(next_fn.type_signature) == (
      '(<server_weights=<float32[784,10],float32[10]>@SERVER,'
      'federated_dataset={<float32[?,784],int32[?,1]>*}@CLIENTS> -> '
      '<float32[784,10],float32[10]>@SERVER)')
  federated_algorithm = tff.templates.IterativeProcess(
      initialize_fn=initialize_fn, next_fn=next_fn)
  assert str(federated_algorithm.initialize.type_signature) == (
      '( -> <float32[784,10],float32[10]>@SERVER)')
  server_state = federated_algorithm.initialize()
  before = evaluate(server_state)
  for _ in range(5):
    server_state = federated_algorithm.next(server_state,
                                            federated_train_data)
  after = evaluate(server_state)
  assert after[0] < before[0] and after[1] > before[1], (before, after)
  # The same process compiles to a form, whose round is the same round.
  form = tff.compile(federated_algorithm)
  state, _ = tff.run_round(form, form.initialize(), federated_train_data)
  local = federated_algorithm.next(federated_algorithm.initialize(),
                                   federated_train_data)
  for a, b in zip(state, local):
    np.testing.assert_allclose(a, b, atol=1e-6)
