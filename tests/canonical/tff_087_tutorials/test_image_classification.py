"""TFF 0.87's "Federated Learning for Image Classification", its cells
written as a TFF user writes them, with only the import line changed: the
Keras model trained with `build_weighted_fed_avg`, its metrics logged with
`tf.summary`, then the tutorial's own `VariableModel` (`MnistModel`)
trained and evaluated with `build_fed_eval`.

What differs from the tutorial's cells, and why:
- EMNIST (`emnist.load_data()`, a download) is `emnist.get_synthetic()`,
  TFF's own two synthetic clients, for training and test; 3 rounds where it
  runs 11. Its summaries go under the test's directory, not /tmp/logs.
- Its optimizers (`lambda: tf.keras.optimizers.SGD(...)`) are refused by
  TFF 0.87 itself ('function' object has no attribute 'initialize'): they
  are `tff.learning.optimizers.build_sgdm(...)` at the same rates.
- Left out: the `!pip install` cell, the Colab magics (`%load_ext`,
  `%tensorboard`, `!ls`) and the cells that only draw with matplotlib.

Each test runs the cells from the data on, so its datasets are fresh, as the
tutorial's are when it runs top to bottom. Numbers are TFF 0.87's.

TFF 0.87 iterates a copy of a dataset given to `next` at every call, so a
`shuffle(seed=1)` yields the same order every round: so here (the later
rounds and the evaluation give TFF 0.87's numbers).
"""

import collections
from collections.abc import Callable

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff

np.random.seed(0)

emnist_train, emnist_test = (tff.simulation.datasets.emnist.get_synthetic(),
                             tff.simulation.datasets.emnist.get_synthetic())

example_dataset = emnist_train.create_tf_dataset_for_client(
    emnist_train.client_ids[0])


NUM_CLIENTS = 10
NUM_EPOCHS = 5
BATCH_SIZE = 20
SHUFFLE_BUFFER = 100
PREFETCH_BUFFER = 10

def preprocess(dataset):

  def batch_format_fn(element):
    """Flatten a batch `pixels` and return the features as an `OrderedDict`."""
    return collections.OrderedDict(
        x=tf.reshape(element['pixels'], [-1, 784]),
        y=tf.reshape(element['label'], [-1, 1]))

  return dataset.repeat(NUM_EPOCHS).shuffle(SHUFFLE_BUFFER, seed=1).batch(
      BATCH_SIZE).map(batch_format_fn).prefetch(PREFETCH_BUFFER)


def make_federated_data(client_data, client_ids):
  return [
      preprocess(client_data.create_tf_dataset_for_client(x))
      for x in client_ids
  ]


def create_keras_model():
  return tf.keras.models.Sequential([
      tf.keras.layers.InputLayer(input_shape=(784,)),
      tf.keras.layers.Dense(10, kernel_initializer='zeros'),
      tf.keras.layers.Softmax(),
  ])


preprocessed_example_dataset = preprocess(example_dataset)


def model_fn():
  # We _must_ create a new model here, and _not_ capture it from an external
  # scope. TFF will call this within different graph contexts.
  keras_model = create_keras_model()
  return tff.learning.models.from_keras_model(
      keras_model,
      input_spec=preprocessed_example_dataset.element_spec,
      loss=tf.keras.losses.SparseCategoricalCrossentropy(),
      metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])


MnistVariables = collections.namedtuple(
    'MnistVariables', 'weights bias num_examples loss_sum accuracy_sum')


def create_mnist_variables():
  return MnistVariables(
      weights=tf.Variable(
          lambda: tf.zeros(dtype=tf.float32, shape=(784, 10)),
          name='weights',
          trainable=True),
      bias=tf.Variable(
          lambda: tf.zeros(dtype=tf.float32, shape=(10)),
          name='bias',
          trainable=True),
      num_examples=tf.Variable(0.0, name='num_examples', trainable=False),
      loss_sum=tf.Variable(0.0, name='loss_sum', trainable=False),
      accuracy_sum=tf.Variable(0.0, name='accuracy_sum', trainable=False))


def predict_on_batch(variables, x):
  return tf.nn.softmax(tf.matmul(x, variables.weights) + variables.bias)

def mnist_forward_pass(variables, batch):
  y = predict_on_batch(variables, batch['x'])
  predictions = tf.cast(tf.argmax(y, 1), tf.int32)

  flat_labels = tf.reshape(batch['y'], [-1])
  loss = -tf.reduce_mean(
      tf.reduce_sum(tf.one_hot(flat_labels, 10) * tf.math.log(y), axis=[1]))
  accuracy = tf.reduce_mean(
      tf.cast(tf.equal(predictions, flat_labels), tf.float32))

  num_examples = tf.cast(tf.size(batch['y']), tf.float32)

  variables.num_examples.assign_add(num_examples)
  variables.loss_sum.assign_add(loss * num_examples)
  variables.accuracy_sum.assign_add(accuracy * num_examples)

  return loss, predictions


def get_local_unfinalized_metrics(variables):
  return collections.OrderedDict(
      num_examples=[variables.num_examples],
      loss=[variables.loss_sum, variables.num_examples],
      accuracy=[variables.accuracy_sum, variables.num_examples])


def get_metric_finalizers():
  return collections.OrderedDict(
      num_examples=tf.function(func=lambda x: x[0]),
      loss=tf.function(func=lambda x: x[0] / x[1]),
      accuracy=tf.function(func=lambda x: x[0] / x[1]))


class MnistModel(tff.learning.models.VariableModel):

  def __init__(self):
    self._variables = create_mnist_variables()

  @property
  def trainable_variables(self):
    return [self._variables.weights, self._variables.bias]

  @property
  def non_trainable_variables(self):
    return []

  @property
  def local_variables(self):
    return [
        self._variables.num_examples, self._variables.loss_sum,
        self._variables.accuracy_sum
    ]

  @property
  def input_spec(self):
    return collections.OrderedDict(
        x=tf.TensorSpec([None, 784], tf.float32),
        y=tf.TensorSpec([None, 1], tf.int32))

  @tf.function
  def predict_on_batch(self, x, training=True):
    del training
    return predict_on_batch(self._variables, x)

  @tf.function
  def forward_pass(self, batch, training=True):
    del training
    loss, predictions = mnist_forward_pass(self._variables, batch)
    num_exmaples = tf.shape(batch['x'])[0]
    return tff.learning.models.BatchOutput(
        loss=loss, predictions=predictions, num_examples=num_exmaples)

  @tf.function
  def report_local_unfinalized_metrics(
      self) -> collections.OrderedDict[str, list[tf.Tensor]]:
    """Creates an `OrderedDict` of metric names to unfinalized values."""
    return get_local_unfinalized_metrics(self._variables)

  def metric_finalizers(
      self) -> collections.OrderedDict[str, Callable[[list[tf.Tensor]], tf.Tensor]]:
    """Creates an `OrderedDict` of metric names to finalizers."""
    return get_metric_finalizers()

  @tf.function
  def reset_metrics(self):
    """Resets metrics variables to initial value."""
    for var in self.local_variables:
      var.assign(tf.zeros_like(var))


@pytest.fixture
def federated_train_data():
  sample_clients = emnist_train.client_ids[0:NUM_CLIENTS]

  federated_train_data = make_federated_data(emnist_train, sample_clients)

  print(f'Number of client datasets: {len(federated_train_data)}')
  print(f'First dataset: {federated_train_data[0]}')
  return federated_train_data


def test_hello_world():
  assert tff.federated_computation(lambda: 'Hello, World!')() == (
      b'Hello, World!')


def test_the_data(capsys):
  print(len(emnist_train.client_ids))
  print(emnist_train.element_type_structure)
  example_element = next(iter(example_dataset))

  print(example_element['label'].numpy())
  sample_batch = tf.nest.map_structure(
      lambda x: x.numpy(), next(iter(preprocessed_example_dataset)))
  # As TFF 0.87 prints them:
  assert capsys.readouterr().out == (
      "2\nOrderedDict([('label', TensorSpec(shape=(), dtype=tf.int32, "
      "name=None)), ('pixels', TensorSpec(shape=(28, 28), dtype=tf.float32, "
      "name=None))])\n0\n")
  assert sample_batch['x'].shape == (20, 784)
  assert sample_batch['y'].shape == (20, 1)


def test_the_federated_data(capsys, federated_train_data):
  assert capsys.readouterr().out == (
      'Number of client datasets: 2\n'
      "First dataset: <_PrefetchDataset element_spec=OrderedDict([('x', "
      "TensorSpec(shape=(None, 784), dtype=tf.float32, name=None)), ('y', "
      "TensorSpec(shape=(None, 1), dtype=tf.int32, name=None))])>\n")


def _train_metrics(printed_line):
  return printed_line.split("('train', OrderedDict(")[1].split(')]))')[0]


def test_training_the_keras_model(federated_train_data, tmp_path, capsys):
  training_process = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.02),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=1.0))
  print(training_process.initialize.type_signature.formatted_representation())
  train_state = training_process.initialize()
  result = training_process.next(train_state, federated_train_data)
  train_state = result.state
  train_metrics = result.metrics
  print('round  1, metrics={}'.format(train_metrics))
  train_metrics = result.metrics['client_work']['train']
  # From TFF 0.87:
  assert list(train_metrics) == ['sparse_categorical_accuracy', 'loss',
                                 'num_examples', 'num_batches']
  assert train_metrics['sparse_categorical_accuracy'] == pytest.approx(0.06)
  assert train_metrics['loss'] == pytest.approx(2.6509814, rel=1e-6)
  assert train_metrics['num_examples'] == 100
  assert train_metrics['num_batches'] == 6
  assert result.metrics['finalizer']['update_non_finite'] == 0
  out = capsys.readouterr().out
  assert out.startswith('( -> <\n  global_model_weights=<\n    trainable=<\n'
                        '      float32[784,10],\n      float32[10]\n')
  assert out.splitlines()[-1].startswith(
      "round  1, metrics=OrderedDict([('distributor', ()), ('client_work', "
      "OrderedDict([('train', OrderedDict([('sparse_categorical_accuracy', ")

  NUM_ROUNDS = 3
  for round_num in range(2, NUM_ROUNDS):
    result = training_process.next(train_state, federated_train_data)
    train_state = result.state
    train_metrics = result.metrics
    print('round {:2d}, metrics={}'.format(round_num, train_metrics))
  logdir = str(tmp_path / "logs/scalars/training/")
  try:
    tf.io.gfile.rmtree(logdir)  # delete any previous results
  except tf.errors.NotFoundError as e:
    pass # Ignore if the directory didn't previously exist.
  summary_writer = tf.summary.create_file_writer(logdir)
  train_state = training_process.initialize()
  with summary_writer.as_default():
    for round_num in range(1, NUM_ROUNDS):
      result = training_process.next(train_state, federated_train_data)
      train_state = result.state
      train_metrics = result.metrics
      for name, value in train_metrics['client_work']['train'].items():
        tf.summary.scalar(name, value, step=round_num)
  summary_writer.flush()
  steps = [event.step for path in tf.io.gfile.glob(f'{logdir}/events.*')
           for event in tf.compat.v1.train.summary_iterator(path)
           for value in event.summary.value if value.tag == 'loss']
  assert steps == [1, 2]


def test_the_second_round_trains_on_the_same_order_as_tffs(
    federated_train_data):
  training_process = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=0.02),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=1.0))
  train_state = training_process.initialize()
  for _ in range(2):
    result = training_process.next(train_state, federated_train_data)
    train_state = result.state
  # From TFF 0.87:
  assert result.metrics['client_work']['train']['loss'] == pytest.approx(
      3.938584, rel=1e-5)


def test_training_the_variable_model(federated_train_data):
  training_process = tff.learning.algorithms.build_weighted_fed_avg(
      MnistModel,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.02))
  train_state = training_process.initialize()
  result = training_process.next(train_state, federated_train_data)
  train_state = result.state
  metrics = result.metrics
  print('round  1, metrics={}'.format(metrics))
  # From TFF 0.87:
  assert metrics['client_work']['train'] == collections.OrderedDict(
      num_examples=100.0, loss=pytest.approx(2.6509814, rel=1e-6),
      accuracy=pytest.approx(0.06))
  form = tff.compile(training_process)
  assert form is not None


def test_training_and_evaluating_the_variable_model(federated_train_data,
                                                    capsys):
  training_process = tff.learning.algorithms.build_weighted_fed_avg(
      MnistModel,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.02))
  train_state = training_process.initialize()
  result = training_process.next(train_state, federated_train_data)
  train_state = result.state
  metrics = result.metrics
  print('round  1, metrics={}'.format(metrics))
  for round_num in range(2, 4):
    result = training_process.next(train_state, federated_train_data)
    train_state = result.state
    metrics = result.metrics
    print('round {:2d}, metrics={}'.format(round_num, metrics))
  evaluation_process = tff.learning.algorithms.build_fed_eval(MnistModel)
  print(evaluation_process.next.type_signature.formatted_representation())
  evaluation_state = evaluation_process.initialize()
  model_weights = training_process.get_model_weights(train_state)
  evaluation_state = evaluation_process.set_model_weights(evaluation_state, model_weights)
  evaluation_output = evaluation_process.next(evaluation_state, federated_train_data)
  # From TFF 0.87:
  assert metrics['client_work']['train']['loss'] == pytest.approx(
      2.7219532, rel=1e-5)
  eval_metrics = evaluation_output.metrics['client_work']['eval']
  assert eval_metrics['current_round_metrics'] == collections.OrderedDict(
      num_examples=100.0, loss=pytest.approx(3.8724892, rel=1e-5),
      accuracy=pytest.approx(0.1))
  sample_clients = emnist_train.client_ids[0:NUM_CLIENTS]
  federated_test_data = make_federated_data(emnist_test, sample_clients)

  assert len(federated_test_data) == 2
  evaluation_output = evaluation_process.next(evaluation_state, federated_test_data)
  assert evaluation_output.metrics['client_work']['eval'][
      'current_round_metrics']['loss'] == pytest.approx(3.8724892, rel=1e-5)
