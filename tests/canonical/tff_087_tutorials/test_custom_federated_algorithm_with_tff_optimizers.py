"""TFF 0.87's "Use TFF optimizers in custom iterative process", its cells
written as a TFF user writes them, with only the import line changed: FedAvg
built by hand from `tff.learning.optimizers` (SGD with momentum on the
server, SGD on the clients) around a Keras CNN wrapped as a
`tff.learning.models.VariableModel`.

Differences from the tutorial's cells: EMNIST
(`tff.simulation.datasets.emnist.load_data(only_digits)`, a download) is
`emnist.get_synthetic()`, TFF's two synthetic clients; 1 round where the
tutorial runs 20. Left out: the `!pip install` cell.

`server_init` returns the tutorial's attrs class `ServerState`: its type
is a struct whose values are `ServerState`s, as in TFF 0.87 (the state
`initialize` gives back is one, and `tff.structure.update_struct` updates
it inside `server_update`). The client update, a `tf.function` looping over
`iter(dataset)` and assigning the model's call-local variables, trains; the
process compiles and its form runs the round.
"""



from typing import Any
import functools

import attrs
import numpy as np
import pytest
import tensorflow as tf

import canonical as tff

only_digits=True

# Load dataset.
emnist_train, emnist_test = (
    tff.simulation.datasets.emnist.get_synthetic(), None)

# Define preprocessing functions.
def preprocess_fn(dataset, batch_size=16):

  def batch_format_fn(element):
    return (tf.expand_dims(element['pixels'], -1), element['label'])

  return dataset.batch(batch_size).map(batch_format_fn)

# Preprocess and sample clients for prototyping.
train_client_ids = sorted(emnist_train.client_ids)
train_data = emnist_train.preprocess(preprocess_fn)
central_test_data = preprocess_fn(
    emnist_train.create_tf_dataset_for_client(train_client_ids[0]))

# Define model.
def create_keras_model():
  """The CNN model used in https://arxiv.org/abs/1602.05629."""
  data_format = 'channels_last'
  input_shape = [28, 28, 1]

  max_pool = functools.partial(
      tf.keras.layers.MaxPooling2D,
      pool_size=(2, 2),
      padding='same',
      data_format=data_format)
  conv2d = functools.partial(
      tf.keras.layers.Conv2D,
      kernel_size=5,
      padding='same',
      data_format=data_format,
      activation=tf.nn.relu)

  model = tf.keras.models.Sequential([
      conv2d(filters=32, input_shape=input_shape),
      max_pool(),
      conv2d(filters=64),
      max_pool(),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(512, activation=tf.nn.relu),
      tf.keras.layers.Dense(10 if only_digits else 62),
  ])

  return model

# Wrap as `tff.learning.models.VariableModel`.
def model_fn():
  keras_model = create_keras_model()
  return tff.learning.models.from_keras_model(
      keras_model,
      input_spec=central_test_data.element_spec,
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

@tf.function
def client_update(model, dataset, server_weights, client_optimizer):
  """Performs local training on the client's dataset."""
  # Initialize the client model with the current server weights.
  client_weights = model.trainable_variables
  # Assign the server weights to the client model.
  tf.nest.map_structure(lambda x, y: x.assign(y),
                        client_weights, server_weights)
  # Initialize the client optimizer.
  trainable_tensor_specs = tf.nest.map_structure(
          lambda v: tf.TensorSpec(v.shape, v.dtype), client_weights)
  optimizer_state = client_optimizer.initialize(trainable_tensor_specs)
  # Use the client_optimizer to update the local model.
  for batch in iter(dataset):
    with tf.GradientTape() as tape:
      # Compute a forward pass on the batch of data.
      outputs = model.forward_pass(batch)
    # Compute the corresponding gradient.
    grads = tape.gradient(outputs.loss, client_weights)
    # Apply the gradient using a client optimizer.
    optimizer_state, updated_weights = client_optimizer.next(
        optimizer_state, client_weights, grads)
    tf.nest.map_structure(lambda a, b: a.assign(b),
                          client_weights, updated_weights)
  # Return model deltas.
  return tf.nest.map_structure(tf.subtract, client_weights, server_weights)

@attrs.define(eq=False, frozen=True)
class ServerState(object):
  trainable_weights: Any
  optimizer_state: Any

@tf.function
def server_update(server_state, mean_model_delta, server_optimizer):
  """Updates the server model weights."""
  # Use aggregated negative model delta as pseudo gradient.
  negative_weights_delta = tf.nest.map_structure(
      lambda w: -1.0 * w, mean_model_delta)
  new_optimizer_state, updated_weights = server_optimizer.next(
      server_state.optimizer_state, server_state.trainable_weights,
      negative_weights_delta)
  return tff.structure.update_struct(
      server_state,
      trainable_weights=updated_weights,
      optimizer_state=new_optimizer_state)

def build_fedavg_process():
  # 1. Server and client optimizer to be used.
  server_optimizer = tff.learning.optimizers.build_sgdm(
      learning_rate=0.05, momentum=0.9)
  client_optimizer = tff.learning.optimizers.build_sgdm(
      learning_rate=0.01)

  # 2. Functions return initial state on server.
  @tff.tensorflow.computation
  def server_init():
    model = model_fn()
    trainable_tensor_specs = tf.nest.map_structure(
          lambda v: tf.TensorSpec(v.shape, v.dtype), model.trainable_variables)
    optimizer_state = server_optimizer.initialize(trainable_tensor_specs)
    return ServerState(
        trainable_weights=model.trainable_variables,
        optimizer_state=optimizer_state)

  @tff.federated_computation
  def server_init_tff():
    return tff.federated_value(server_init(), tff.SERVER)

  # 3. One round of computation and communication.
  server_state_type = server_init.type_signature.result
  print('server_state_type:\n',
        server_state_type.formatted_representation())
  trainable_weights_type = server_state_type.trainable_weights
  print('trainable_weights_type:\n',
        trainable_weights_type.formatted_representation())

  # 3-1. Wrap server and client TF blocks with `tff.tensorflow.computation`.
  @tff.tensorflow.computation(server_state_type, trainable_weights_type)
  def server_update_fn(server_state, model_delta):
    return server_update(server_state, model_delta, server_optimizer)

  whimsy_model = model_fn()
  tf_dataset_type = tff.SequenceType(tff.types.tensorflow_to_type(whimsy_model.input_spec))
  print('tf_dataset_type:\n',
        tf_dataset_type.formatted_representation())
  @tff.tensorflow.computation(tf_dataset_type, trainable_weights_type)
  def client_update_fn(dataset, server_weights):
    model = model_fn()
    return client_update(model, dataset, server_weights, client_optimizer)

  # 3-2. Orchestration with `tff.federated_computation`.
  federated_server_type = tff.FederatedType(server_state_type, tff.SERVER)
  federated_dataset_type = tff.FederatedType(tf_dataset_type, tff.CLIENTS)
  @tff.federated_computation(federated_server_type, federated_dataset_type)
  def run_one_round(server_state, federated_dataset):
    # Server-to-client broadcast.
    server_weights_at_client = tff.federated_broadcast(
        server_state.trainable_weights)
    # Local client update.
    model_deltas = tff.federated_map(
        client_update_fn, (federated_dataset, server_weights_at_client))
    # Client-to-server upload and aggregation.
    mean_model_delta = tff.federated_mean(model_deltas)
    # Server update.
    server_state = tff.federated_map(
        server_update_fn, (server_state, mean_model_delta))
    return server_state

  # 4. Build the iterative process for FedAvg.
  fedavg_process = tff.templates.IterativeProcess(
      initialize_fn=server_init_tff, next_fn=run_one_round)
  print('type signature of `initialize`:\n',
        fedavg_process.initialize.type_signature.formatted_representation())
  print('type signature of `next`:\n',
        fedavg_process.next.type_signature.formatted_representation())
  return fedavg_process, server_init


def evaluate(server_state):
  keras_model = create_keras_model()
  tf.nest.map_structure(
      lambda var, t: var.assign(t),
      keras_model.trainable_weights, server_state.trainable_weights)
  metric = tf.keras.metrics.SparseCategoricalAccuracy()
  for batch in iter(central_test_data):
    preds = keras_model(batch[0], training=False)
    metric.update_state(y_true=batch[1], y_pred=preds)
  return metric.result().numpy()

def train(fedavg_process):
  global sampled_train_data
  server_state = fedavg_process.initialize()
  acc = evaluate(server_state)
  print('Initial test accuracy', acc)

  # Evaluate after a few rounds
  CLIENTS_PER_ROUND=2
  sampled_clients = train_client_ids[:CLIENTS_PER_ROUND]
  sampled_train_data = [
      train_data.create_tf_dataset_for_client(client)
      for client in sampled_clients]
  for round in range(1):
    server_state = fedavg_process.next(server_state, sampled_train_data)
  acc = evaluate(server_state)
  print('Test accuracy', acc)
  return server_state


WEIGHTS = ('<float32[5,5,1,32],float32[32],float32[5,5,32,64],float32[64],'
           'float32[3136,512],float32[512],float32[512,10],float32[10]>')
# From TFF 0.87:
STATE = (f'<trainable_weights={WEIGHTS},optimizer_state=<learning_rate='
         f'float32,momentum=float32,accumulator={WEIGHTS}>>')

def test_the_data_and_the_keras_model():
  assert train_client_ids == ['synthetic1', 'synthetic2']
  assert str(tff.types.tensorflow_to_type(central_test_data.element_spec)) == (
      '<float32[?,28,28,1],int32[?]>')
  assert create_keras_model().count_params() == 1663370  # As in TFF 0.87.


def test_the_process_has_tffs_types(capsys):
  fedavg_process, _ = build_fedavg_process()
  assert str(fedavg_process.initialize.type_signature) == (
      f'( -> {STATE}@SERVER)')
  assert str(fedavg_process.next.type_signature) == (
      f'(<server_state={STATE}@SERVER,federated_dataset='
      f'{{<float32[?,28,28,1],int32[?]>*}}@CLIENTS> -> {STATE}@SERVER)')
  out = capsys.readouterr().out
  assert out.startswith('server_state_type:\n <\n  trainable_weights=<\n')
  assert 'tf_dataset_type:\n <\n  float32[?,28,28,1],\n  int32[?]\n>*\n' in (
      out)


@pytest.mark.slow
def test_a_round_trains_and_the_process_compiles(capsys):
  fedavg_process, _ = build_fedavg_process()
  server_state = train(fedavg_process)
  assert isinstance(server_state, ServerState)  # As TFF 0.87 gives it.
  out = capsys.readouterr().out.splitlines()
  assert out[-2].startswith('Initial test accuracy ')
  assert out[-1].startswith('Test accuracy ')
  form = tff.compile(fedavg_process)
  state, _ = tff.run_round(form, form.initialize(), sampled_train_data)
  assert [w.shape for w in state.trainable_weights] == [
      w.shape for w in server_state.trainable_weights]
