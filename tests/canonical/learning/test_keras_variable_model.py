"""TFF 0.87's `tff.learning.models.from_keras_model` (a `VariableModel`)
with any Keras metric, and `tff.learning.metrics.
create_keras_metric_finalizer`. The expected numbers were printed by TFF
0.87 (tf.keras 2) running the same programs on the same data."""

import collections

import keras
import numpy as np
import pytest
import tensorflow as tf

import canonical as tff


def _multiclass_data():
  rng = np.random.default_rng(0)

  def dataset(n):
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 0.5).astype(np.int32)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(3)

  return [dataset(7), dataset(5)]


def _binary_data():
  rng = np.random.default_rng(1)

  def dataset(n):
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 2] > 0).astype(np.float32)[:, None]
    return tf.data.Dataset.from_tensor_slices(
        collections.OrderedDict(x=x, y=y)).batch(4)

  return [dataset(9), dataset(6)]


def multiclass_model_fn():
  keras_model = keras.Sequential([
      keras.Input(shape=(4,)),
      keras.layers.Dense(3, kernel_initializer='zeros')])
  return tff.learning.models.from_keras_model(
      keras_model,
      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=(tf.TensorSpec([None, 4], tf.float32),
                  tf.TensorSpec([None], tf.int32)),
      metrics=[keras.metrics.SparseCategoricalAccuracy(),
               keras.metrics.SparseTopKCategoricalAccuracy(k=2)])


def binary_model_fn():
  keras_model = keras.Sequential([
      keras.Input(shape=(4,)),
      keras.layers.Dense(1, activation='sigmoid',
                         kernel_initializer='zeros')])
  return tff.learning.models.from_keras_model(
      keras_model,
      loss=keras.losses.BinaryCrossentropy(),
      input_spec=collections.OrderedDict(
          x=tf.TensorSpec([None, 4], tf.float32),
          y=tf.TensorSpec([None, 1], tf.float32)),
      metrics=[keras.metrics.AUC(num_thresholds=20),
               keras.metrics.BinaryAccuracy(),
               keras.metrics.Precision(), keras.metrics.Recall()])


# TFF 0.87: three rounds of build_weighted_fed_avg(model_fn, sgdm(0.5)),
# then build_fed_eval at the weights they reach.
TFF = {
    'multiclass': dict(
        train=[
            dict(sparse_categorical_accuracy=0.5833333134651184,
                 sparse_top_k_categorical_accuracy=1.0,
                 loss=1.0239341259002686),
            dict(sparse_categorical_accuracy=0.9166666865348816,
                 sparse_top_k_categorical_accuracy=1.0,
                 loss=0.7184256911277771),
            dict(sparse_categorical_accuracy=0.9166666865348816,
                 sparse_top_k_categorical_accuracy=1.0,
                 loss=0.5773196220397949)],
        counts=dict(num_examples=12, num_batches=5),
        kernel=[-0.646803081035614, 0.5182422399520874, 0.12856096029281616,
                -0.4639436900615692, 0.5508631467819214,
                -0.08691945672035217, -0.17631889879703522,
                0.17017479240894318, 0.006144116632640362,
                0.15480691194534302, -0.021620143204927444,
                -0.13318680226802826],
        bias=[0.13144120573997498, 0.6569686532020569, -0.7884098887443542],
        eval=dict(sparse_categorical_accuracy=0.9166666865348816,
                  sparse_top_k_categorical_accuracy=1.0,
                  loss=0.5010767579078674)),
    'binary': dict(
        train=[
            dict(auc=0.5, binary_accuracy=0.46666666865348816, precision=0.5,
                 recall=0.25, loss=0.7010623812675476),
            dict(auc=0.8660714030265808, binary_accuracy=0.7333333492279053,
                 precision=0.75, recall=0.75, loss=0.6061258912086487),
            dict(auc=0.9017857313156128, binary_accuracy=0.7333333492279053,
                 precision=0.75, recall=0.75, loss=0.5383519530296326)],
        counts=dict(num_examples=15, num_batches=5),
        kernel=[0.9643148183822632, -0.4024985432624817, 0.1340513527393341,
                -0.4082021415233612],
        bias=[-0.07613875716924667],
        eval=dict(auc=0.9196428656578064, binary_accuracy=0.6666666865348816,
                  precision=0.6666666865348816, recall=0.75,
                  loss=0.48370182514190674)),
}
PROGRAMS = {'multiclass': (multiclass_model_fn, _multiclass_data),
            'binary': (binary_model_fn, _binary_data)}


def _approx(expected, counts):
  # Keras 3's BinaryCrossentropy clips as Keras 2's does, rounding otherwise
  # in the last bits: losses agree to 1e-6, the rest exactly.
  metrics = collections.OrderedDict(
      (k, pytest.approx(v, rel=1e-6)) for k, v in expected.items())
  metrics.update(counts)
  return metrics


def test_it_is_a_variable_model_reporting_every_metric():
  model = binary_model_fn()
  assert isinstance(model, tff.learning.models.VariableModel)
  unfinalized = model.report_local_unfinalized_metrics()
  assert list(unfinalized) == ['auc', 'binary_accuracy', 'precision',
                               'recall', 'loss', 'num_examples',
                               'num_batches']
  assert list(model.metric_finalizers()) == list(unfinalized)
  assert [np.shape(v) for v in unfinalized['auc']] == [(20,)] * 4
  assert unfinalized['num_examples'][0].dtype == tf.int64


@pytest.mark.slow
@pytest.mark.parametrize('name', sorted(PROGRAMS))
def test_fed_avg_and_fed_eval_give_tffs_numbers(name):
  model_fn, make_data = PROGRAMS[name]
  expected, data = TFF[name], make_data()
  process = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn, tff.learning.optimizers.build_sgdm(learning_rate=0.5))
  state = process.initialize()
  for metrics in expected['train']:
    output = process.next(state, data)
    state = output.state
    assert output.metrics['client_work']['train'] == _approx(
        metrics, expected['counts'])
  weights = process.get_model_weights(state)
  np.testing.assert_allclose(np.ravel(weights.trainable[0]),
                             expected['kernel'], rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(weights.trainable[1], expected['bias'],
                             rtol=1e-5, atol=1e-7)
  evaluation = tff.learning.algorithms.build_fed_eval(model_fn)
  eval_state = evaluation.set_model_weights(evaluation.initialize(), weights)
  metrics = evaluation.next(eval_state, data).metrics
  assert metrics['client_work']['eval']['current_round_metrics'] == _approx(
      expected['eval'], expected['counts'])


def test_metric_constructors_and_several_weighted_losses():
  inputs = keras.Input(shape=(2,))
  keras_model = keras.Model(inputs, [keras.layers.Dense(1)(inputs),
                                     keras.layers.Dense(1)(inputs)])
  model = tff.learning.models.from_keras_model(
      keras_model,
      loss=[keras.losses.MeanSquaredError(), keras.losses.MeanAbsoluteError()],
      loss_weights=[1.0, 0.5],
      input_spec=(tf.TensorSpec([None, 2], tf.float32),
                  (tf.TensorSpec([None, 1], tf.float32),
                   tf.TensorSpec([None, 1], tf.float32))),
      metrics=[lambda: tff.learning.metrics.NumBatchesCounter(name='calls')])
  x = tf.constant([[1.0, 2.0]])
  y = (tf.constant([[1.0]]), tf.constant([[0.0]]))
  output = model.forward_pass((x, y))
  first, second = keras_model(x)
  want = (keras.losses.MeanSquaredError()(y[0], first) +
          0.5 * keras.losses.MeanAbsoluteError()(y[1], second))
  np.testing.assert_allclose(output.loss, want, rtol=1e-6)
  assert list(model.metric_finalizers()) == ['calls', 'loss', 'num_examples',
                                             'num_batches']
  with pytest.raises(ValueError, match='loss_weights weighs a list'):
    tff.learning.models.from_keras_model(
        keras_model, keras.losses.MeanSquaredError(),
        input_spec=(x, y), loss_weights=[1.0])


def test_a_compiled_model_is_refused():
  keras_model = keras.Sequential([keras.Input(shape=(2,)),
                                  keras.layers.Dense(1)])
  keras_model.compile(loss='mse')
  with pytest.raises(ValueError, match='must not be compiled'):
    tff.learning.models.from_keras_model(
        keras_model, keras.losses.MeanSquaredError(),
        input_spec=(tf.TensorSpec([None, 2]), tf.TensorSpec([None, 1])))


def test_a_keras_metric_finalizer_gives_its_result():
  auc = keras.metrics.AUC(num_thresholds=5)
  auc.update_state([0.0, 1.0, 1.0, 0.0], [0.1, 0.8, 0.4, 0.6])
  finalizer = tff.learning.metrics.create_keras_metric_finalizer(auc)
  values = [tf.convert_to_tensor(v) for v in auc.variables]
  assert float(finalizer(values)) == float(auc.result())

  @tff.tensorflow.computation
  def finalized():
    return finalizer([tf.constant(v.numpy()) for v in values])

  assert float(finalized()) == float(auc.result())
  top_k = tff.learning.metrics.create_keras_metric_finalizer(
      lambda: keras.metrics.SparseTopKCategoricalAccuracy(k=2))
  assert float(top_k([tf.constant(3.0), tf.constant(4.0)])) == 0.75
  with pytest.raises(ValueError, match='has 2 variables; its finalizer was '
                     'given 1'):
    top_k([tf.constant(3.0)])
  with pytest.raises(TypeError, match='made a int, not a Keras metric'):
    tff.learning.metrics.create_keras_metric_finalizer(lambda: 3)
