"""TFF 0.87's "High-performance simulations with TFF" on accelerators
(`simulations_with_accelerators`), on the CPU: TFF's own CPU path of the
same program (this machine, CI's and the developers' have no GPU). Its
cells are written as a TFF user writes them, with the import line changed.

Left out: the cell that requires a GPU (it raises ValueError without one,
and splits it into logical devices), the `!pip install` cell and the
`%load_ext` / `%tensorboard` Colab magics.

What differs from the tutorial's cells, and why:
- EMNIST (`emnist.load_data(only_digits=True)`, a download) is
  `emnist.get_synthetic()` (TFF's own two synthetic clients) for training
  and test; the tutorial's runs are made small: 1 block of width 1, 2
  rounds of 2 clients, evaluated every round.
- Lines that fail on TFF 0.87 itself are written as TFF 0.87's users must:
  `logging.info(...)` needs `import logging` (the notebook never imports
  it: NameError); `build_weighted_fed_avg(..., use_experimental_simulation_
  loop=True)` with Keras optimizer functions is TFF 0.87's
  `loop_implementation=tff.learning.LoopImplementation.DATASET_ITERATOR`
  with `tff.learning.optimizers.build_sgdm(...)` at the same rates;
  `max_concurrent_computation_calls=16/2` is `16//2` (TFF 0.87's worker
  refuses "Illegal value '8.0'"); `tf.keras.mixed_precision.experimental`
  is gone from TensorFlow 2.14: `Policy` and `set_global_policy`.
- Two lines fail under Keras 3 (TensorFlow 2.21's Keras, which this project
  runs on), not in this runtime: a TensorFlow op on a Keras tensor
  (`tf.image.per_image_standardization(x)` in `create_cnn` is wrapped in a
  `tf.keras.layers.Lambda`) and `metric.reset_states()` (Keras 3's
  `reset_state()`).

The models start from Keras's random initializers and the tutorial's
shuffle has no seed, so TFF 0.87's losses differ from run to run (2.4-3.4
after a round here); the tests check what does not vary: the examples and
batches each round trains on, the printed lines, and the accuracy's range.
"""

import logging


import collections
import time

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff


emnist_train, emnist_test = (tff.simulation.datasets.emnist.get_synthetic(),
                             tff.simulation.datasets.emnist.get_synthetic())


def preprocess_emnist_dataset(client_epochs_per_round, batch_size, test_batch_size):

  def element_fn(element):
    return collections.OrderedDict(
        x=tf.expand_dims(element['pixels'], -1), y=element['label'])

  def preprocess_train_dataset(dataset):
    # Use buffer_size same as the maximum client dataset size,
    # 418 for Federated EMNIST
    return dataset.map(element_fn).shuffle(buffer_size=418).repeat(
        count=client_epochs_per_round).batch(batch_size, drop_remainder=False)

  def preprocess_test_dataset(dataset):
    return dataset.map(element_fn).batch(test_batch_size, drop_remainder=False)

  train_set = emnist_train.preprocess(preprocess_train_dataset)
  test_set = preprocess_test_dataset(
      emnist_test.create_tf_dataset_from_all_clients())
  return train_set, test_set


def _conv_3x3(input_tensor, filters, strides):
  """2D Convolutional layer with kernel size 3x3."""

  x = tf.keras.layers.Conv2D(
      filters=filters,
      strides=strides,
      kernel_size=3,
      padding='same',
      kernel_initializer='he_normal',
      use_bias=False,
  )(input_tensor)
  return x


def _basic_block(input_tensor, filters, strides):
  """A block of two 3x3 conv layers."""

  x = input_tensor
  x = _conv_3x3(x, filters, strides)
  x = tf.keras.layers.Activation('relu')(x)

  x = _conv_3x3(x, filters, 1)
  x = tf.keras.layers.Activation('relu')(x)
  return x


def _vgg_block(input_tensor, size, filters, strides):
  """A stack of basic blocks."""
  x = _basic_block(input_tensor, filters, strides=strides)
  for _ in range(size - 1):
      x = _basic_block(x, filters, strides=1)
  return x


def create_cnn(num_blocks, conv_width_multiplier=1, num_classes=10):
  """Create a VGG-like CNN model.

  The CNN has (6*num_blocks + 2) layers.
  """
  input_shape = (28, 28, 1)  # channels_last
  img_input = tf.keras.layers.Input(shape=input_shape)
  x = img_input
  x = tf.keras.layers.Lambda(tf.image.per_image_standardization)(x)

  x = _conv_3x3(x, 16 * conv_width_multiplier, 1)
  x = _vgg_block(x, size=num_blocks, filters=16 * conv_width_multiplier, strides=1)
  x = _vgg_block(x, size=num_blocks, filters=32 * conv_width_multiplier, strides=2)
  x = _vgg_block(x, size=num_blocks, filters=64 * conv_width_multiplier, strides=2)

  x = tf.keras.layers.GlobalAveragePooling2D()(x)
  x = tf.keras.layers.Dense(num_classes)(x)

  model = tf.keras.models.Model(
      img_input,
      x,
      name='cnn-{}-{}'.format(6 * num_blocks + 2, conv_width_multiplier))
  return model


# What each run built and trained (for the tests).
processes = []
results = []


def keras_evaluate(model, test_data, metric):
  metric.reset_state()
  for batch in test_data:
    preds = model(batch['x'], training=False)
    metric.update_state(y_true=batch['y'], y_pred=preds)
  return metric.result()


def run_federated_training(client_epochs_per_round,
                           train_batch_size,
                           test_batch_size,
                           cnn_num_blocks,
                           conv_width_multiplier,
                           server_learning_rate,
                           client_learning_rate,
                           total_rounds,
                           clients_per_round,
                           rounds_per_eval,
                           logdir='logdir'):

  train_data, test_data = preprocess_emnist_dataset(
      client_epochs_per_round, train_batch_size, test_batch_size)
  data_spec = test_data.element_spec

  def _model_fn():
    keras_model = create_cnn(cnn_num_blocks, conv_width_multiplier)
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return tff.learning.models.from_keras_model(
        keras_model, input_spec=data_spec, loss=loss)

  def _server_optimizer_fn():
    return tf.keras.optimizers.SGD(learning_rate=server_learning_rate)

  def _client_optimizer_fn():
    return tf.keras.optimizers.SGD(learning_rate=client_learning_rate)

  learning_process = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn=_model_fn,
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(
          server_learning_rate),
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          client_learning_rate),
      loop_implementation=tff.learning.LoopImplementation.DATASET_ITERATOR)

  metric = tf.keras.metrics.SparseCategoricalAccuracy(name='test_accuracy')
  eval_model = create_cnn(cnn_num_blocks, conv_width_multiplier)
  logging.info(eval_model.summary())

  results.clear()
  processes.append(learning_process)
  server_state = learning_process.initialize()
  start_time = time.time()
  for round_num in range(total_rounds):
    sampled_clients = np.random.choice(
        train_data.client_ids,
        size=clients_per_round,
        replace=False)
    sampled_train_data = [
        train_data.create_tf_dataset_for_client(client)
        for client in sampled_clients
    ]
    if round_num == total_rounds-1:
      with tf.profiler.experimental.Profile(logdir):
        result = learning_process.next(
            server_state, sampled_train_data)
    else:
      result = learning_process.next(
            server_state, sampled_train_data)
    results.append(result)
    server_state = result.state
    train_metrics = result.metrics['client_work']['train']
    print(f'Round {round_num} training loss: {train_metrics["loss"]}, '
     f'time: {(time.time()-start_time)/(round_num+1.)} secs')
    if round_num % rounds_per_eval == 0 or round_num == total_rounds-1:
      model_weights = learning_process.get_model_weights(server_state)
      model_weights.assign_weights_to(eval_model)
      accuracy = keras_evaluate(eval_model, test_data, metric)
      print(f'Round {round_num} validation accuracy: {accuracy * 100.0}')


def _check_the_run(out):
  lines = out.splitlines()
  rounds = [l for l in lines if ' training loss: ' in l]
  evals = [l for l in lines if ' validation accuracy: ' in l]
  assert [l.split(' training')[0] for l in rounds] == ['Round 0', 'Round 1']
  assert [l.split(' validation')[0] for l in evals] == ['Round 0', 'Round 1']
  for line in evals:
    assert 0.0 <= float(line.split(': ')[1]) <= 100.0
  assert len(results) == 2
  for result in results:
    train_metrics = result.metrics['client_work']['train']
    # As in TFF 0.87: both clients' 10 examples, in batches of 16.
    assert train_metrics['num_examples'] == 20
    assert train_metrics['num_batches'] == 2
    assert np.isfinite(train_metrics['loss'])


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)  # The profiler writes to ./logdir.
  yield
  tff.backends.native.set_sync_local_cpp_execution_context()


def test_hello_world():
  @tff.federated_computation
  def hello_world():
    return 'Hello, World!'

  assert hello_world() == b'Hello, World!'


@pytest.mark.slow
def test_federated_training(tmp_path, capsys):
  run_federated_training(
      client_epochs_per_round=1,
      train_batch_size=16,
      test_batch_size=128,
      cnn_num_blocks=1,
      conv_width_multiplier=1,
      server_learning_rate=1.0,
      client_learning_rate=0.01,
      total_rounds=2,
      clients_per_round=2,
      rounds_per_eval=1,
      )
  _check_the_run(capsys.readouterr().out)
  assert (tmp_path / 'logdir').is_dir()  # The last round's profile.


@pytest.mark.slow
def test_federated_training_with_limited_concurrency(capsys):
  # Control concurrency by `max_concurrent_computation_calls`.
  tff.backends.native.set_sync_local_cpp_execution_context(
      max_concurrent_computation_calls=16//2)

  run_federated_training(
      client_epochs_per_round=1,
      train_batch_size=16,
      test_batch_size=128,
      cnn_num_blocks=1,
      conv_width_multiplier=1,
      server_learning_rate=1.0,
      client_learning_rate=0.01,
      total_rounds=2,
      clients_per_round=2,
      rounds_per_eval=1,
      )
  _check_the_run(capsys.readouterr().out)


@pytest.mark.slow
def test_mixed_precision_training(capsys):
  try:
    # Mixed precision training.
    tff.backends.native.set_sync_local_cpp_execution_context()
    policy = tf.keras.mixed_precision.Policy('mixed_float16')
    tf.keras.mixed_precision.set_global_policy(policy)

    run_federated_training(
        client_epochs_per_round=1,
        train_batch_size=16,
        test_batch_size=128,
        cnn_num_blocks=1,
        conv_width_multiplier=1,
        server_learning_rate=1.0,
        client_learning_rate=0.01,
        total_rounds=2,
        clients_per_round=2,
        rounds_per_eval=1,
        logdir='mixed'
        )
    _check_the_run(capsys.readouterr().out)
  finally:
    tf.keras.mixed_precision.set_global_policy('float32')


@pytest.mark.slow
def test_the_learning_process_compiles(capsys):
  run_federated_training(
      client_epochs_per_round=1,
      train_batch_size=16,
      test_batch_size=128,
      cnn_num_blocks=1,
      conv_width_multiplier=1,
      server_learning_rate=1.0,
      client_learning_rate=0.01,
      total_rounds=1,
      clients_per_round=2,
      rounds_per_eval=1,
      )
  form = tff.compile(processes[-1])
  client_data = [emnist_train.create_tf_dataset_for_client(c).map(
      lambda e: collections.OrderedDict(x=tf.expand_dims(e['pixels'], -1),
                                        y=e['label'])).batch(16)
                 for c in emnist_train.client_ids]
  state, metrics = tff.run_round(form, form.initialize(), client_data)
  assert int(metrics['client_work']['train']['num_examples']) == 20
