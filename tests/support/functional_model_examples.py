"""TFF 0.87 models as its users write them, and small data for them: a
linear regression written as `FunctionalModel`'s docstring writes it, a
Keras classifier with fixed weights (for `functional_model_from_keras` and
`from_keras_model`), and FedAvg composed around the model-delta client work
with a given `metrics_aggregator`. TFF 0.87's results on them are recorded
in tests/canonical/learning/test_tff_087_models.py."""

import collections

import numpy as np
import tensorflow as tf

import canonical as tff

SGDM = tff.learning.optimizers.build_sgdm


def _classification_data():
  rng = np.random.default_rng(0)
  data = []
  for _ in range(3):
    x = rng.random((7, 4)).astype(np.float32)
    y = rng.integers(0, 3, (7, 1)).astype(np.int32)
    data.append(tf.data.Dataset.from_tensor_slices((x, y)).batch(3))
  return data


CLASSIFICATION = _classification_data()
_WEIGHTS = np.random.default_rng(1)
WEIGHTS = [_WEIGHTS.normal(size=(4, 3)).astype(np.float32),
           _WEIGHTS.normal(size=(3,)).astype(np.float32)]


def keras_classifier(softmax=True):
  model = tf.keras.Sequential(
      [tf.keras.layers.Input(shape=(4,)), tf.keras.layers.Dense(3)] +
      ([tf.keras.layers.Softmax()] if softmax else []))
  model.set_weights(WEIGHTS)
  return model


def functional_classifier(metrics_constructor=collections.OrderedDict(
    loss=tf.keras.metrics.SparseCategoricalCrossentropy,
    accuracy=tf.keras.metrics.SparseCategoricalAccuracy)):
  return tff.learning.models.functional_model_from_keras(
      keras_classifier(),
      loss_fn=tf.keras.losses.SparseCategoricalCrossentropy(),
      input_spec=CLASSIFICATION[0].element_spec,
      metrics_constructor=metrics_constructor)


def _regression_data():
  rng = np.random.default_rng(0)
  data = []
  for _ in range(3):
    x = rng.random((7, 3)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.3).astype(
        np.float32)
    data.append(tf.data.Dataset.from_tensor_slices((x, y)).batch(3))
  return data


REGRESSION = _regression_data()


def linear_regression():
  """The linear regression of TFF's `FunctionalModel` docstring, with a
  mean absolute error metric written as pure functions."""
  w, b = np.zeros(shape=[1, 3], dtype=np.float32), np.zeros([1], np.float32)

  @tf.function
  def predict_on_batch(model_weights, x, training):
    del training
    trainable, _ = model_weights
    w, b = trainable
    return tf.matmul(x, w, transpose_b=True) + b

  def loss(output, label, sample_weight=None):
    del sample_weight
    return tf.math.reduce_mean(tf.math.pow(output - label, 2.))

  def initialize():
    return collections.OrderedDict(error=(tf.constant(0.0), tf.constant(0.0)))

  def update(state, labels, batch_output, sample_weight=None):
    del sample_weight
    error = tf.reduce_sum(tf.abs(batch_output.predictions - labels))
    count = tf.cast(batch_output.num_examples, tf.float32)
    return collections.OrderedDict(
        error=(state['error'][0] + error, state['error'][1] + count))

  def finalize(state):
    return collections.OrderedDict(mae=state['error'][0] / state['error'][1])

  return tff.learning.models.FunctionalModel(
      initial_weights=((w, b), ()), predict_on_batch_fn=predict_on_batch,
      loss_fn=loss, metrics_fns=(tf.function(initialize), tf.function(update),
                                 tf.function(finalize)),
      input_spec=REGRESSION[0].element_spec)


def keras_model_fn():
  keras_model = keras_classifier(softmax=False)
  return tff.learning.models.from_keras_model(
      keras_model,
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=CLASSIFICATION[0].element_spec,
      metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])


def training_process(metrics_aggregator):
  """FedAvg composed from TFF's blocks around the model-delta client work
  with `metrics_aggregator`."""
  client_work = tff.learning.templates.build_model_delta_client_work(
      keras_model_fn, SGDM(0.1), tff.learning.ClientWeighting.NUM_EXAMPLES,
      metrics_aggregator=metrics_aggregator)

  @tff.tensorflow.computation
  def initial_weights():
    return tff.learning.models.ModelWeights(
        [tf.constant(w) for w in WEIGHTS], [])

  weights_type = initial_weights.type_signature.result
  return tff.learning.templates.compose_learning_process(
      initial_weights,
      tff.learning.templates.build_broadcast_process(weights_type),
      client_work,
      tff.aggregators.MeanFactory().create(weights_type.trainable,
                                           tff.TensorType(np.float32)),
      tff.learning.templates.build_apply_optimizer_finalizer(
          SGDM(1.0), weights_type))
