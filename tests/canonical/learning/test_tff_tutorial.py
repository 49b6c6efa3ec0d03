"""TFF's compression tutorial runs under `import canonical as tff`.

TUTORIAL is the tutorial's code (its CNN ending in a softmax,
`tff.learning.from_keras_model` with Keras's loss and metric, the encoder
functions, `tff.learning.framework` builders, Keras optimizers, and the
`initialize()` / `next(state, data)` loop) with its import lines changed and
small random client datasets in place of EMNIST.
"""

import numpy as np
import pytest
import tensorflow as tf

import canonical
from canonical import learning
from canonical.learning import losses

TUTORIAL = """import collections, functools
import numpy as np
import tensorflow as tf
import canonical as tff
import encoders as te

def create_original_fedavg_cnn_model(only_digits=True):
  data_format = 'channels_last'
  max_pool = functools.partial(tf.keras.layers.MaxPooling2D, pool_size=(2, 2), padding='same', data_format=data_format)
  conv2d = functools.partial(tf.keras.layers.Conv2D, kernel_size=5, padding='same', data_format=data_format, activation=tf.nn.relu)
  model = tf.keras.models.Sequential([
      tf.keras.layers.InputLayer(input_shape=(28, 28, 1)),
      conv2d(filters=32), max_pool(), conv2d(filters=64), max_pool(),
      tf.keras.layers.Flatten(), tf.keras.layers.Dense(512, activation=tf.nn.relu),
      tf.keras.layers.Dense(10 if only_digits else 62), tf.keras.layers.Softmax(),
  ])
  return model

rng = np.random.default_rng(0)
def client_dataset(n):
  x = rng.random([n, 28, 28, 1]).astype(np.float32)
  y = rng.integers(0, 10, [n, 1]).astype(np.int32)
  return tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=x, y=y)).batch(20)
federated_train_data = [client_dataset(40) for _ in range(3)]
input_spec = federated_train_data[0].element_spec

def tff_model_fn():
  keras_model = create_original_fedavg_cnn_model()
  return tff.learning.from_keras_model(
      keras_model=keras_model, input_spec=input_spec,
      loss=tf.keras.losses.SparseCategoricalCrossentropy(),
      metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])

def broadcast_encoder_fn(value):
  spec = tf.TensorSpec(value.shape, value.dtype)
  if value.shape.num_elements() > 10000:
    return te.encoders.as_simple_encoder(te.encoders.uniform_quantization(bits=8), spec)
  else:
    return te.encoders.as_simple_encoder(te.encoders.identity(), spec)

def mean_encoder_fn(value):
  spec = tf.TensorSpec(value.shape, value.dtype)
  if value.shape.num_elements() > 10000:
    return te.encoders.as_gather_encoder(te.encoders.uniform_quantization(bits=8), spec)
  else:
    return te.encoders.as_gather_encoder(te.encoders.identity(), spec)

encoded_broadcast_process = tff.learning.framework.build_encoded_broadcast_process_from_model(tff_model_fn, broadcast_encoder_fn)
encoded_mean_process = tff.learning.framework.build_encoded_mean_process_from_model(tff_model_fn, mean_encoder_fn)
federated_averaging_with_compression = tff.learning.build_federated_averaging_process(
    tff_model_fn,
    client_optimizer_fn=lambda: tf.keras.optimizers.SGD(learning_rate=0.02),
    server_optimizer_fn=lambda: tf.keras.optimizers.SGD(learning_rate=1.0),
    broadcast_process=encoded_broadcast_process,
    aggregation_process=encoded_mean_process)
state = federated_averaging_with_compression.initialize()
history = []
for round_num in range(2):
  state, metrics = federated_averaging_with_compression.next(state, federated_train_data)
  print('round {:2d}, metrics={}'.format(round_num, metrics))
  history.append(metrics)
"""


@pytest.fixture(scope='module')
def tutorial():
  scope = {}
  exec(compile(TUTORIAL, 'tutorial.py', 'exec'), scope)  # pylint: disable=exec-used
  return scope


def test_the_tutorial_runs_with_tffs_metrics(tutorial):
  history = tutorial['history']
  assert len(history) == 2
  for metrics in history:
    assert list(metrics) == ['broadcast', 'aggregation', 'train']
    assert metrics['broadcast'] == () and metrics['aggregation'] == ()
    assert list(metrics['train']) == ['sparse_categorical_accuracy', 'loss']
    assert 0.0 <= float(metrics['train']['sparse_categorical_accuracy']) <= 1
  # Ten random classes: the loss starts near log(10) and goes down.
  losses_seen = [float(m['train']['loss']) for m in history]
  assert abs(losses_seen[0] - np.log(10)) < 0.2
  assert losses_seen[1] < losses_seen[0]


def test_the_tutorials_process_compiles_and_runs_alike(tutorial):
  process = tutorial['federated_averaging_with_compression']
  form = canonical.compile(process)
  state = process.initialize()
  data = tutorial['federated_train_data']
  _, metrics = canonical.run_round(form, state, data)
  _, expected = process.next(state, data)
  np.testing.assert_allclose(float(metrics['train']['loss']),
                             float(expected['train']['loss']), rtol=1e-4)
  assert any('uniform' in text.lower() for text in form.encoders.values())


def test_sparse_crossentropy_on_probabilities_is_kerass():
  rng = np.random.default_rng(1)
  probabilities = tf.nn.softmax(rng.normal(size=[6, 5]).astype(np.float32))
  probabilities = tf.tensor_scatter_nd_update(probabilities, [[0, 2]], [0.0])
  labels = np.array([[2], [0], [4], [1], [3], [2]], np.int32)
  keras_loss = tf.keras.losses.SparseCategoricalCrossentropy(
      reduction=None)(labels, probabilities)
  ours = losses.from_keras_loss(
      tf.keras.losses.SparseCategoricalCrossentropy()).per_example(
          labels, probabilities)
  np.testing.assert_allclose(ours, keras_loss, rtol=1e-5)


def _model():
  return tf.keras.Sequential([tf.keras.Input(shape=(4,)),
                              tf.keras.layers.Dense(3)])


@pytest.mark.parametrize('kwargs, message', [
    ({'input_spec': {'x': tf.TensorSpec([None, 5])}},
     'input_spec must have two parts'),
    ({'input_spec': {'x': tf.TensorSpec([None, 5]),
                     'z': tf.TensorSpec([None], tf.int32)}},
     'must have keys x and y'),
    ({'loss': 'sparse_categorical_crossentropy'}, 'must be a Keras loss'),
])
def test_what_is_not_tffs_is_refused_by_name(kwargs, message):
  arguments = dict(
      keras_model=_model(),
      input_spec={'x': tf.TensorSpec([None, 4]),
                  'y': tf.TensorSpec([None], tf.int32)},
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])
  arguments.update(kwargs)
  with pytest.raises((ValueError, TypeError), match=message):
    learning.from_keras_model(**arguments)


def test_any_keras_loss_and_metric_make_a_model():
  # They run as the Keras objects themselves (the model's variables are
  # lowered inside computations): tests/canonical/learning/
  # test_keras_variable_model.py trains such models with TFF's numbers.
  model = learning.from_keras_model(
      _model(), input_spec={'x': tf.TensorSpec([None, 4]),
                            'y': tf.TensorSpec([None, 3])},
      loss=tf.keras.losses.Huber(), metrics=[tf.keras.metrics.AUC()])
  assert isinstance(model, canonical.learning.models.VariableModel)
  assert list(model.metric_finalizers()) == ['auc', 'loss', 'num_examples',
                                             'num_batches']
