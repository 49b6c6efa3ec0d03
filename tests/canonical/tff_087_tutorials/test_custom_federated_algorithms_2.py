"""TFF 0.87's "Custom Federated Algorithms, Part 2: Implementing Federated
Averaging", written as its user writes it, on small made-up MNIST-shaped
data. `batch_train` builds `tf.Variable`s and a Keras SGD inside a
computation, as the tutorial writes it: the compiler lowers those call-local
variables into values (canonical/core/local_variables.py), with TFF 0.87's
numbers. One cell cannot run here, by design, and is refused by name:
`dataset.type_signature` (a value inside a computation at one place is
TensorFlow's own: a dataset has `element_spec`)."""

import collections

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff

BATCH_SPEC = collections.OrderedDict(
    x=tf.TensorSpec(shape=[None, 784], dtype=np.float32),
    y=tf.TensorSpec(shape=[None], dtype=np.int32))
BATCH_TYPE = tff.types.tensorflow_to_type(BATCH_SPEC)
MODEL_SPEC = collections.OrderedDict(
    weights=tf.TensorSpec(shape=[784, 10], dtype=np.float32),
    bias=tf.TensorSpec(shape=[10], dtype=np.float32))
MODEL_TYPE = tff.types.tensorflow_to_type(MODEL_SPEC)
LOCAL_DATA_TYPE = tff.SequenceType(BATCH_TYPE)
SERVER_MODEL_TYPE = tff.FederatedType(MODEL_TYPE, tff.SERVER)
SERVER_FLOAT_TYPE = tff.FederatedType(np.float32, tff.SERVER)
CLIENT_DATA_TYPE = tff.FederatedType(LOCAL_DATA_TYPE, tff.CLIENTS)


def _client_batches(seed, batches=3):
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, 10, size=batches * 8).astype(np.int32)
  images = (rng.normal(size=(batches * 8, 784)) * 0.1 +
            np.eye(10, 784)[labels]).astype(np.float32)
  return tf.data.Dataset.from_tensor_slices(
      collections.OrderedDict(x=images, y=labels)).batch(8)


federated_train_data = [_client_batches(seed) for seed in range(3)]
initial_model = collections.OrderedDict(
    weights=np.zeros([784, 10], dtype=np.float32),
    bias=np.zeros([10], dtype=np.float32))


@tf.function
def forward_pass(model, batch):
  predicted_y = tf.nn.softmax(
      tf.matmul(batch['x'], model['weights']) + model['bias'])
  return -tf.reduce_mean(tf.reduce_sum(
      tf.one_hot(batch['y'], 10) * tf.math.log(predicted_y), axis=[1]))


@tff.tensorflow.computation(MODEL_TYPE, BATCH_TYPE)
def batch_loss(model, batch):
  return forward_pass(model, batch)


def test_batch_loss_is_tffs():
  assert str(batch_loss.type_signature) == (
      '(<model=<weights=float32[784,10],bias=float32[10]>,'
      'batch=<x=float32[?,784],y=int32[?]>> -> float32)')
  sample_batch = next(iter(federated_train_data[0]))
  assert batch_loss(initial_model, sample_batch) == pytest.approx(2.3025854)


@tff.tensorflow.computation(MODEL_TYPE, BATCH_TYPE, np.float32)
def batch_train(initial_model, batch, learning_rate):
  # Define a group of model variables and set them to `initial_model`. Must
  # be defined outside the @tf.function.
  model_vars = collections.OrderedDict([
      (name, tf.Variable(name=name, initial_value=value))
      for name, value in initial_model.items()
  ])
  optimizer = tf.keras.optimizers.SGD(learning_rate)

  @tf.function
  def _train_on_batch(model_vars, batch):
    # Perform one step of gradient descent using loss from `batch_loss`.
    with tf.GradientTape() as tape:
      loss = forward_pass(model_vars, batch)
    grads = tape.gradient(loss, model_vars)
    optimizer.apply_gradients(
        zip(tf.nest.flatten(grads), tf.nest.flatten(model_vars)))
    return model_vars

  return _train_on_batch(model_vars, batch)


def test_the_tutorials_batch_train_gives_tffs_numbers():
  assert str(batch_train.type_signature) == (
      '(<initial_model=<weights=float32[784,10],bias=float32[10]>,'
      'batch=<x=float32[?,784],y=int32[?]>,learning_rate=float32> -> '
      '<weights=float32[784,10],bias=float32[10]>)')
  sample_batch = next(iter(federated_train_data[0]))
  model, losses = initial_model, []
  for _ in range(5):
    model = batch_train(model, sample_batch, 0.1)
    losses.append(batch_loss(model, sample_batch))
  # Recorded from TFF 0.87 running the tutorial's cells on this data.
  np.testing.assert_allclose(losses, [
      2.180047035217285, 2.061495065689087, 1.94722580909729,
      1.8375086784362793, 1.7325737476348877], rtol=1e-6)
  np.testing.assert_allclose(model['bias'], [
      0.12963998317718506, -0.04764851555228233, 0.012150045484304428,
      0.012159580364823341, -0.04764851555228233, 0.012018367648124695,
      0.012456579133868217, -0.04764851555228233, 0.012169534340500832,
      -0.04764851555228233], rtol=1e-6)
  np.testing.assert_allclose(model['weights'][0, :3], [
      0.18784472346305847, -0.020328430458903313, -0.019005756825208664],
                             rtol=1e-6)


@tff.federated_computation(MODEL_TYPE, np.float32, LOCAL_DATA_TYPE)
def local_train(initial_model, learning_rate, all_batches):

  @tff.tensorflow.computation(LOCAL_DATA_TYPE, np.float32)
  def _insert_learning_rate_to_sequence(dataset, learning_rate):
    return dataset.map(lambda x: (x, learning_rate))

  batches_with_learning_rate = _insert_learning_rate_to_sequence(
      all_batches, learning_rate)

  @tff.tensorflow.computation(
      MODEL_TYPE, batches_with_learning_rate.element_spec)
  def batch_fn(model, batch_with_lr):
    batch, lr = batch_with_lr
    return batch_train(model, batch, lr)

  return tff.sequence_reduce(batches_with_learning_rate, initial_model,
                             batch_fn)


@tff.federated_computation(MODEL_TYPE, LOCAL_DATA_TYPE)
def local_eval(model, all_batches):

  @tff.tensorflow.computation(MODEL_TYPE, LOCAL_DATA_TYPE)
  def _insert_model_to_sequence(model, dataset):
    return dataset.map(lambda x: (model, x))

  model_plus_data = _insert_model_to_sequence(model, all_batches)

  @tff.tensorflow.computation(np.float32, batch_loss.type_signature.result)
  def tff_add(accumulator, arg):
    return accumulator + arg

  return tff.sequence_reduce(
      tff.sequence_map(batch_loss, model_plus_data), 0.0, tff_add)


@tff.federated_computation(SERVER_MODEL_TYPE, CLIENT_DATA_TYPE)
def federated_eval(model, data):
  return tff.federated_mean(tff.federated_map(
      local_eval, [tff.federated_broadcast(model), data]))


@tff.federated_computation(SERVER_MODEL_TYPE, SERVER_FLOAT_TYPE,
                           CLIENT_DATA_TYPE)
def federated_train(model, learning_rate, data):
  return tff.federated_mean(tff.federated_map(local_train, [
      tff.federated_broadcast(model), tff.federated_broadcast(learning_rate),
      data]))


def test_a_dataset_inside_a_computation_is_tensorflows_own():

  @tff.federated_computation(LOCAL_DATA_TYPE)
  def uses_type_signature(all_batches):
    return all_batches.type_signature

  with pytest.raises(tff.FederatedError, match='type_signature'):
    uses_type_signature(federated_train_data[0])


def test_federated_averaging_of_the_tutorial_trains():
  assert str(federated_train.type_signature) == (
      '(<model=<weights=float32[784,10],bias=float32[10]>@SERVER,'
      'learning_rate=float32@SERVER,'
      'data={<x=float32[?,784],y=int32[?]>*}@CLIENTS> -> '
      '<weights=float32[784,10],bias=float32[10]>@SERVER)')
  model = initial_model
  learning_rate = 0.1
  losses = [federated_eval(model, federated_train_data)]
  for _ in range(5):
    model = federated_train(model, learning_rate, federated_train_data)
    learning_rate *= 0.9
    losses.append(federated_eval(model, federated_train_data))
  assert losses[0] == pytest.approx(3 * 2.3025854)  # 3 batches a client.
  assert all(b < a for a, b in zip(losses, losses[1:])), losses
  local = local_train(initial_model, 0.1, federated_train_data[0])
  assert local_eval(local, federated_train_data[0]) < local_eval(
      initial_model, federated_train_data[0])
