"""TFF 0.87's model and metrics API as its users write it:
`tff.learning.models.FunctionalModel` built from pure functions,
`functional_model_from_keras` with an OrderedDict of metric constructors,
`model_from_functional`, `save_functional_model` / `load_functional_model`,
`ModelWeights`' methods, `ReconstructionModel`, and `tff.learning.metrics`'
aggregators and factories in the builders.

Every number compared comes from TFF 0.87 running the same program on the
same data (scripts under "TFF 0.87:" comments were run with
/work/peers/venv-tff; the Keras models get fixed weights, since Keras 2's
and Keras 3's initializers draw differently).
"""

import collections
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

import canonical as tff
from canonical import errors
import functional_model_examples as examples

SGDM = tff.learning.optimizers.build_sgdm
CLASSIFICATION = examples.CLASSIFICATION
REGRESSION = examples.REGRESSION
WEIGHTS = examples.WEIGHTS
_keras_classifier = examples.keras_classifier
_functional_classifier = examples.functional_classifier
_linear_regression = examples.linear_regression
training_process = examples.training_process


def _rounds(process, data, rounds=2):
  state = process.initialize()
  for _ in range(rounds):
    output = process.next(state, data)
    state = output.state
  return output


def _values(metrics):
  return {k: pytest.approx(float(v), rel=1e-6) for k, v in metrics.items()}


# TFF 0.87: the linear regression above, two rounds of each builder.
_LINEAR_AFTER_FED_AVG = [[[0.123551, -0.164887, -0.005787]], [-0.011286]]
_LINEAR_BUILDERS = {
    'build_weighted_fed_avg': (
        lambda m: tff.learning.algorithms.build_weighted_fed_avg(
            m, client_optimizer_fn=SGDM(0.1),
            server_optimizer_fn=SGDM(1.0)),
        {'mae': 0.5472571}, _LINEAR_AFTER_FED_AVG),
    'build_unweighted_fed_avg': (
        lambda m: tff.learning.algorithms.build_unweighted_fed_avg(
            m, client_optimizer_fn=SGDM(0.1),
            server_optimizer_fn=SGDM(1.0)),
        {'mae': 0.5472571}, _LINEAR_AFTER_FED_AVG),
    'build_fed_sgd': (
        lambda m: tff.learning.algorithms.build_fed_sgd(
            m, server_optimizer_fn=SGDM(0.5)),
        {'mae': 0.5329979}, [[[0.267934, -0.310309, 0.004269]], [0.017627]]),
}


@pytest.mark.parametrize('builder', sorted(_LINEAR_BUILDERS))
def test_a_functional_model_written_as_tffs_docs_write_it_trains(builder):
  build, metrics, weights = _LINEAR_BUILDERS[builder]
  output = _rounds(build(_linear_regression()), REGRESSION)
  assert output.metrics['client_work']['train'] == _values(metrics)
  for ours, theirs in zip(output.state.global_model_weights.trainable,
                          weights):
    np.testing.assert_allclose(ours, theirs, atol=2e-6)


def test_functional_model_members_are_tffs():
  model = _linear_regression()
  trainable, non_trainable = model.initial_weights
  assert [w.shape for w in trainable] == [(1, 3), (1,)]
  assert non_trainable == ()
  assert model.input_spec == REGRESSION[0].element_spec
  x, y = next(iter(REGRESSION[0]))
  output = model.predict_on_batch(model.initial_weights, x, training=False)
  np.testing.assert_allclose(output, np.zeros((3, 1)))
  assert float(model.loss(output=output, label=y)) == pytest.approx(
      float(np.mean(y.numpy()**2)), rel=1e-6)
  state = model.update_metrics_state(
      model.initialize_metrics_state(), labels=y,
      batch_output=tff.learning.models.BatchOutput(predictions=output,
                                                   num_examples=3))
  assert float(model.finalize_metrics(state)['mae']) == pytest.approx(
      float(np.mean(np.abs(y.numpy()))), rel=1e-6)


def test_batch_output_is_tffs():
  output = tff.learning.models.BatchOutput(predictions=1)
  assert output == (None, 1, None)
  assert tff.learning.models.BatchOutput._fields == (
      'loss', 'predictions', 'num_examples')


def test_a_functional_model_refuses_tensors_as_initial_weights():
  model = _linear_regression()
  with pytest.raises(errors.InvalidTypeError, match='numpy'):
    tff.learning.models.FunctionalModel(
        initial_weights=((tf.constant([1.0]),), ()),
        predict_on_batch_fn=model.predict_on_batch, loss_fn=model.loss,
        input_spec=model.input_spec)
  with pytest.raises(errors.InvalidValueError, match='input_spec'):
    tff.learning.models.FunctionalModel(
        initial_weights=model.initial_weights,
        predict_on_batch_fn=model.predict_on_batch, loss_fn=model.loss,
        input_spec=tf.TensorSpec([None, 3]))


@pytest.mark.slow
def test_functional_model_from_keras_with_metric_constructors():
  model = _functional_classifier()
  assert isinstance(model, tff.learning.models.FunctionalModel)
  np.testing.assert_array_equal(model.initial_weights[0][0], WEIGHTS[0])
  output = _rounds(tff.learning.algorithms.build_weighted_fed_avg(
      model, client_optimizer_fn=SGDM(0.1),
      server_optimizer_fn=SGDM(1.0)), CLASSIFICATION)
  # TFF 0.87: the same program, round 2.
  assert output.metrics['client_work']['train'] == _values(
      {'loss': 1.3258703, 'accuracy': 0.3809524})
  np.testing.assert_allclose(
      output.state.global_model_weights.trainable[1],
      [-0.580071210861206, -0.3836129903793335, -0.41779908537864685],
      atol=1e-6)
  evaluation = tff.learning.algorithms.build_fed_eval(model)
  state = evaluation.set_model_weights(evaluation.initialize(),
                                       output.state.global_model_weights)
  metrics = evaluation.next(state, CLASSIFICATION).metrics
  # TFF 0.87: build_fed_eval at those weights.
  assert metrics['client_work']['eval']['current_round_metrics'] == _values(
      {'loss': 1.2449238, 'accuracy': 0.3809524})


def test_functional_model_from_keras_in_fed_sgd():
  output = _rounds(tff.learning.algorithms.build_fed_sgd(
      _functional_classifier(), server_optimizer_fn=SGDM(0.5)),
                   CLASSIFICATION, rounds=1)
  # TFF 0.87: the same program.
  assert output.metrics['client_work']['train'] == _values(
      {'loss': 1.5001768, 'accuracy': 0.23809524})
  np.testing.assert_allclose(
      output.state.global_model_weights.trainable[1],
      [-0.6478976011276245, -0.3611729145050049, -0.37241289019584656],
      atol=1e-6)


def test_a_keras_metric_without_a_twin_of_ours_runs_itself():
  model = _functional_classifier(lambda: collections.OrderedDict(
      top2=tf.keras.metrics.SparseTopKCategoricalAccuracy(k=2),
      accuracy=tf.keras.metrics.SparseCategoricalAccuracy()))
  output = _rounds(tff.learning.algorithms.build_weighted_fed_avg(
      model, client_optimizer_fn=SGDM(0.1)), CLASSIFICATION)
  # TFF 0.87: the same program, round 2.
  assert output.metrics['client_work']['train'] == _values(
      {'top2': 0.7619048, 'accuracy': 0.3809524})


def test_functional_model_from_keras_refuses_batch_normalization():
  model = tf.keras.Sequential([tf.keras.layers.Input(shape=(4,)),
                               tf.keras.layers.BatchNormalization()])
  with pytest.raises(errors.InvalidValueError, match='BatchNormalization'):
    tff.learning.models.functional_model_from_keras(
        model, tf.keras.losses.MeanSquaredError(),
        CLASSIFICATION[0].element_spec)


def test_create_functional_metric_fns_takes_tffs_forms():
  labels = np.array([[0], [2], [1]], np.int32)
  predictions = np.array([[0.9, 0.05, 0.05], [0.1, 0.2, 0.7],
                          [0.5, 0.3, 0.2]], np.float32)
  batch = tff.learning.models.BatchOutput(predictions=predictions)
  for constructor in (
      collections.OrderedDict(
          accuracy=tf.keras.metrics.SparseCategoricalAccuracy,
          examples=tff.learning.metrics.NumExamplesCounter),
      lambda: collections.OrderedDict(
          accuracy=tf.keras.metrics.SparseCategoricalAccuracy(),
          examples=tff.learning.metrics.NumExamplesCounter())):
    initialize, update, finalize = (
        tff.learning.metrics.create_functional_metric_fns(constructor))
    state = update(initialize(), labels, batch)
    assert tf.nest.map_structure(float, state) == collections.OrderedDict(
        accuracy=(2.0, 3.0), examples=(3.0,))
    result = finalize(state)
    assert float(result['accuracy']) == pytest.approx(2 / 3)
    assert int(result['examples']) == 3
  with pytest.raises(errors.InvalidTypeError, match='Keras metrics'):
    tff.learning.metrics.create_functional_metric_fns(lambda: [1.0])


def test_model_from_functional_trains_with_tffs_metrics():
  model = _linear_regression()
  variable_model = tff.learning.models.model_from_functional(
      model, (tf.keras.metrics.MeanSquaredError,))
  assert isinstance(variable_model, tff.learning.models.VariableModel)
  assert [v.shape for v in variable_model.trainable_variables] == [
      (1, 3), (1,)]
  x, y = next(iter(REGRESSION[0]))
  variable_model.forward_pass((x, y))
  unfinalized = variable_model.report_local_unfinalized_metrics()
  assert list(unfinalized) == ['loss', 'mean_squared_error']
  assert float(unfinalized['loss'][1]) == 3.0
  output = _rounds(tff.learning.algorithms.build_weighted_fed_avg(
      lambda: tff.learning.models.model_from_functional(
          model, (tf.keras.metrics.MeanSquaredError,)),
      client_optimizer_fn=SGDM(0.1)), REGRESSION)
  # TFF 0.87: the same program, round 2.
  assert output.metrics['client_work']['train'] == _values(
      {'loss': 0.42191896, 'mean_squared_error': 0.42191896})
  for ours, theirs in zip(output.state.global_model_weights.trainable,
                          _LINEAR_AFTER_FED_AVG):
    np.testing.assert_allclose(ours, theirs, atol=2e-6)


_SAVED_MODEL_RUN = textwrap.dedent('''
    import sys
    import numpy as np
    import tensorflow as tf
    import canonical as tff
    rng = np.random.default_rng(0)
    data = []
    for _ in range(3):
      x = rng.random((7, 4)).astype(np.float32)
      y = rng.integers(0, 3, (7, 1)).astype(np.int32)
      data.append(tf.data.Dataset.from_tensor_slices((x, y)).batch(3))
    model = tff.learning.models.load_functional_model(sys.argv[1])
    process = tff.learning.algorithms.build_weighted_fed_avg(
        model, tff.learning.optimizers.build_sgdm(0.1),
        tff.learning.optimizers.build_sgdm(1.0))
    state = process.initialize()
    for _ in range(2):
      output = process.next(state, data)
      state = output.state
    metrics = output.metrics['client_work']['train']
    print(list(metrics), float(metrics['loss']), float(metrics['accuracy']))
''')


@pytest.mark.slow
def test_a_saved_functional_model_trains_in_a_fresh_process(tmp_path):
  path = str(tmp_path / 'model.fedcanon')
  tff.learning.models.save_functional_model(_functional_classifier(), path)
  run = subprocess.run(
      [sys.executable, '-c', _SAVED_MODEL_RUN, path], capture_output=True,
      text=True, check=False, timeout=600,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'))
  assert run.returncode == 0, run.stderr
  names, loss, accuracy = run.stdout.strip().rsplit(' ', 2)
  # TFF 0.87: the model before saving, round 2 (the metrics keep their
  # OrderedDict's order through the file).
  assert names == "['loss', 'accuracy']"
  assert float(loss) == pytest.approx(1.3258703, rel=1e-6)
  assert float(accuracy) == pytest.approx(0.3809524, rel=1e-6)


def test_a_loaded_functional_model_has_the_saved_ones_functions(tmp_path):
  model = _functional_classifier()
  path = str(tmp_path / 'model.fedcanon')
  tff.learning.models.save_functional_model(model, path)
  loaded = tff.learning.models.load_functional_model(path)
  assert loaded.input_spec == model.input_spec
  x, y = next(iter(CLASSIFICATION[0]))
  for training in (True, False):
    np.testing.assert_allclose(
        loaded.predict_on_batch(loaded.initial_weights, x, training),
        model.predict_on_batch(model.initial_weights, x, training))
  output = model.predict_on_batch(model.initial_weights, x)
  assert float(loaded.loss(output, y)) == float(model.loss(output, y))
  batch = tff.learning.models.BatchOutput(predictions=output,
                                          loss=model.loss(output, y),
                                          num_examples=3)
  assert tf.nest.map_structure(float, loaded.finalize_metrics(
      loaded.update_metrics_state(loaded.initialize_metrics_state(), y,
                                  batch))) == tf.nest.map_structure(
                                      float, model.finalize_metrics(
                                          model.update_metrics_state(
                                              model.initialize_metrics_state(),
                                              y, batch)))


def test_loading_something_else_is_refused_by_name(tmp_path):
  path = tmp_path / 'not_a_model'
  path.write_bytes(b'hello')
  with pytest.raises(errors.Error, match='not a saved functional model'):
    tff.learning.models.load_functional_model(str(path))


def test_model_weights_methods_are_tffs():
  keras_model = _keras_classifier(softmax=False)
  weights = tff.learning.models.ModelWeights.from_model(keras_model)
  assert all(ours is theirs for ours, theirs in zip(
      weights.trainable, keras_model.trainable_variables))
  arrays = weights.convert_variables_to_arrays()
  np.testing.assert_array_equal(arrays.trainable[0], WEIGHTS[0])
  new = tff.learning.models.ModelWeights(
      trainable=[w + 1.0 for w in WEIGHTS], non_trainable=[])
  new.assign_weights_to(keras_model)
  np.testing.assert_array_equal(keras_model.get_weights()[1], WEIGHTS[1] + 1)
  result = tff.learning.models.ModelWeights.from_tff_result(
      collections.OrderedDict(trainable=(1.0, 2.0), non_trainable=()))
  assert result == tff.learning.models.ModelWeights([1.0, 2.0], [])
  with pytest.raises(errors.InvalidTypeError, match='keras.Model'):
    tff.learning.models.ModelWeights.from_model(object())


def test_a_process_result_assigns_to_a_keras_model():
  # The image classification tutorial's evaluation step.
  process = tff.learning.algorithms.build_weighted_fed_avg(
      _functional_classifier(), client_optimizer_fn=SGDM(0.1))
  state = process.next(process.initialize(), CLASSIFICATION).state
  keras_model = _keras_classifier()
  process.get_model_weights(state).assign_weights_to(keras_model)
  np.testing.assert_array_equal(
      keras_model.get_weights()[1],
      process.get_model_weights(state).trainable[1])


def test_weights_type_from_model():
  weights_type = tff.learning.models.weights_type_from_model(
      _linear_regression())
  assert weights_type == tff.learning.models.ModelWeights(
      (tf.TensorSpec([1, 3], tf.float32), tf.TensorSpec([1], tf.float32)),
      ())


def _reconstruction_model():
  keras_model = keras.Sequential([
      keras.Input(shape=(4,)), keras.layers.Dense(5, name='shared'),
      keras.layers.Dense(3, name='personal')])
  return tff.learning.models.ReconstructionModel.from_keras_model_and_layers(
      keras_model, global_layers=[keras_model.layers[0]],
      local_layers=[keras_model.layers[1]],
      input_spec=CLASSIFICATION[0].element_spec)


def test_a_reconstruction_model_splits_its_weights_and_computes_purely():
  model = _reconstruction_model()
  assert [w.shape for w in model.global_weights_spec.trainable] == [
      (4, 5), (5,)]
  assert [w.shape for w in model.local_weights_spec.trainable] == [
      (5, 3), (3,)]
  assert not tff.learning.models.ReconstructionModel.has_only_global_variables(
      model)
  batch = next(iter(CLASSIFICATION[0]))
  output = model.forward_pass(batch)
  pure, _, _ = model.functional_forward(model.initial_global_weights,
                                        model.initial_local_weights, batch)
  np.testing.assert_allclose(pure.predictions, output.predictions)
  assert int(pure.num_examples) == 3


def test_a_reconstruction_models_variables_must_be_split_exactly():
  keras_model = keras.Sequential([keras.Input(shape=(4,)),
                                  keras.layers.Dense(3)])
  with pytest.raises(errors.InvalidValueError, match='not in any group'):
    tff.learning.models.ReconstructionModel.from_keras_model_and_layers(
        keras_model, global_layers=[], local_layers=[],
        input_spec=CLASSIFICATION[0].element_spec)


def test_the_dataset_split_functions_are_tffs():
  model_class = tff.learning.models.ReconstructionModel
  dataset = tf.data.Dataset.range(5)
  first, second = model_class.simple_dataset_split_fn(dataset)
  assert first is dataset and second is dataset
  split = model_class.build_dataset_split_fn(
      recon_epochs=2, recon_steps_max=5, post_recon_epochs=1,
      split_dataset=True)
  first, second = split(dataset)
  assert list(first.as_numpy_iterator()) == [0, 2, 4, 0, 2]
  assert list(second.as_numpy_iterator()) == [1, 3]


# TFF 0.87: build_model_delta_client_work with a Keras model (from_keras_model,
# SparseCategoricalAccuracy) composed with TFF's blocks, one round, per
# metrics_aggregator.
_SECURE_DEFAULT = collections.OrderedDict(
    secure_upper_clipped_count=0, secure_lower_clipped_count=0,
    secure_upper_threshold=1048575.0, secure_lower_threshold=0.0)
_AGGREGATORS = {
    'sum_then_finalize': (
        tff.learning.metrics.sum_then_finalize,
        collections.OrderedDict(sparse_categorical_accuracy=0.23809524,
                                loss=1.4657618, num_examples=21,
                                num_batches=9)),
    'secure_sum_then_finalize': (
        tff.learning.metrics.secure_sum_then_finalize,
        collections.OrderedDict(
            secure_sum_measurements=collections.OrderedDict([
                ('0.0/1048575.0/float32', _SECURE_DEFAULT),
                ('0/1048575/int64', dict(_SECURE_DEFAULT,
                                         secure_upper_threshold=1048575,
                                         secure_lower_threshold=0))]),
            sparse_categorical_accuracy=0.23809522, loss=1.4657506,
            num_examples=21, num_batches=9)),
    'secure_sum_then_finalize with ranges': (
        lambda finalizers, unfinalized_type=None: (
            tff.learning.metrics.secure_sum_then_finalize(
                finalizers, unfinalized_type,
                metric_value_ranges=collections.OrderedDict(
                    loss=[(0.0, 5.0), None], num_batches=[(0, 10)]))),
        collections.OrderedDict(
            secure_sum_measurements=collections.OrderedDict([
                ('0.0/5.0/float32', dict(_SECURE_DEFAULT,
                                         secure_upper_clipped_count=3,
                                         secure_upper_threshold=5.0)),
                ('0.0/1048575.0/float32', _SECURE_DEFAULT),
                ('0/10/int64', dict(_SECURE_DEFAULT,
                                    secure_upper_threshold=10,
                                    secure_lower_threshold=0)),
                ('0/1048575/int64', dict(_SECURE_DEFAULT,
                                         secure_upper_threshold=1048575,
                                         secure_lower_threshold=0))]),
            sparse_categorical_accuracy=0.23809522, loss=0.7142864,
            num_examples=21, num_batches=9)),
}


def _assert_close(actual, expected):
  """The same keys in the same order, and the same numbers (float32's)."""
  assert _keys(actual) == _keys(expected)
  np.testing.assert_allclose(
      np.array(tf.nest.flatten(actual), np.float64),
      np.array(tf.nest.flatten(expected), np.float64), rtol=1e-6)


def _keys(structure):
  if isinstance(structure, dict):
    return [(k, _keys(v)) for k, v in structure.items()]
  if isinstance(structure, (list, tuple)):
    return [_keys(v) for v in structure]
  return None


@pytest.mark.slow
@pytest.mark.parametrize('name', sorted(_AGGREGATORS))
def test_metrics_aggregators_in_the_client_work_give_tffs_metrics(name):
  aggregator, expected = _AGGREGATORS[name]
  process = training_process(aggregator)
  metrics = process.next(process.initialize(),
                         CLASSIFICATION).metrics['client_work']['train']
  _assert_close(metrics, expected)


def test_a_metrics_aggregator_must_be_a_function():
  with pytest.raises(errors.InvalidTypeError, match='metrics_aggregator'):
    tff.learning.templates.build_functional_model_delta_client_work(
        model=_linear_regression(), optimizer=SGDM(0.1),
        client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES,
        metrics_aggregator='sum')


_UNFINALIZED_TYPE = collections.OrderedDict(
    a=[tf.TensorSpec([], tf.float32), tf.TensorSpec([], tf.float32)],
    b=[tf.TensorSpec([], tf.int64)])
_FINALIZERS = collections.OrderedDict(a=lambda v: v[0] / v[1],
                                      b=lambda v: v[0])
_CLIENT_METRICS = [
    collections.OrderedDict(a=[np.float32(1.5), np.float32(2.0)],
                            b=[np.int64(3)]),
    collections.OrderedDict(a=[np.float32(0.25), np.float32(1.0)],
                            b=[np.int64(4)])]


def test_sum_then_finalize_factory_keeps_the_total_over_rounds():
  process = tff.learning.metrics.SumThenFinalizeFactory(_FINALIZERS).create(
      _UNFINALIZED_TYPE)
  output = process.next(process.initialize(), _CLIENT_METRICS)
  output = process.next(output.state, _CLIENT_METRICS)
  # TFF 0.87: the same two rounds.
  current, total = output.result
  _assert_close(current, {'a': 0.5833333, 'b': 7})
  _assert_close(total, {'a': 0.5833333, 'b': 14})
  _assert_close(output.state[1], {'a': [3.5, 6.0], 'b': [14]})


def test_sum_then_finalize_factory_over_secure_sums():
  process = tff.learning.metrics.SumThenFinalizeFactory(
      _FINALIZERS, initial_unfinalized_metrics=collections.OrderedDict(
          a=[1.0, 1.0], b=[5]),
      inner_summation_factory=tff.learning.metrics.SecureSumFactory(),
  ).create(_UNFINALIZED_TYPE)
  first = process.next(process.initialize(), _CLIENT_METRICS)
  second = process.next(first.state, _CLIENT_METRICS)
  # TFF 0.87: the same two rounds.
  _assert_close(first.result[1], {'a': 0.6875, 'b': 12})
  _assert_close(second.result[1], {'a': 0.64285713, 'b': 19})
  assert list(first.measurements) == [
      'None/default_estimation_process/float32', '0/1048575/int64']
  assert float(first.measurements['None/default_estimation_process/float32'][
      'secure_upper_threshold']) == 100.0


def test_secure_sum_factory_clips_to_the_given_ranges():
  process = tff.learning.metrics.SecureSumFactory(collections.OrderedDict(
      a=[(0.0, 1.0), None])).create(_UNFINALIZED_TYPE)
  output = process.next(process.initialize(), _CLIENT_METRICS)
  # TFF 0.87: the same round.
  _assert_close(output.result, {'a': [1.25, 3.0], 'b': [7]})
  assert list(output.measurements) == [
      '0.0/1.0/float32', 'None/default_estimation_process/float32',
      '0/1048575/int64']
  assert int(output.measurements['0.0/1.0/float32'][
      'secure_upper_clipped_count']) == 1


def test_default_secure_sum_quantization_ranges_are_tffs():
  ranges = tff.learning.metrics.create_default_secure_sum_quantization_ranges(
      _UNFINALIZED_TYPE, use_auto_tuned_bounds_for_float_values=False)
  assert ranges == collections.OrderedDict(
      a=[(0.0, 1048575.0), (0.0, 1048575.0)], b=[(0, 1048575)])
  ranges = tff.learning.metrics.create_default_secure_sum_quantization_ranges(
      _UNFINALIZED_TYPE, lower_bound=-2.5, upper_bound=7.5)
  assert ranges['b'] == [(-2, 7)]
  lower, upper = ranges['a'][0]
  assert lower is None and isinstance(upper, tff.templates.EstimationProcess)
  with pytest.raises(errors.InvalidValueError, match='greater'):
    tff.learning.metrics.create_default_secure_sum_quantization_ranges(
        _UNFINALIZED_TYPE, lower_bound=1, upper_bound=1)


def test_counters_count_examples_and_batches():
  examples = tff.learning.metrics.NumExamplesCounter()
  batches = tff.learning.metrics.NumBatchesCounter()
  for size in (3, 4):
    examples.update_state(np.zeros((size, 1)))
    batches.update_state(np.zeros((size, 1)))
  assert (examples.name, int(examples.result())) == ('num_examples', 7)
  assert (batches.name, int(batches.result())) == ('num_batches', 2)
  assert examples.dtype == 'int64'


def test_finalize_then_sample_factory_keeps_samples_over_rounds():
  process = tff.learning.metrics.FinalizeThenSampleFactory(2).create(
      _FINALIZERS, _UNFINALIZED_TYPE)
  clients = _CLIENT_METRICS + [collections.OrderedDict(
      a=[np.float32(3.0), np.float32(1.0)], b=[np.int64(1)])]
  output = process.next(process.initialize(), clients)
  current, total = output.result
  assert len(current['b']) == len(total['b']) == 2
  assert set(current['b']) <= {1, 3, 4}
  # Each sampled client's metrics are its own, finalized.
  finalized = {3: 0.75, 4: 0.25, 1: 3.0}
  for a, b in zip(current['a'], current['b']):
    assert float(a) == finalized[int(b)]
  assert dict(output.measurements) == {'a': 0, 'b': 0}
  output = process.next(output.state, clients[:1])
  assert list(output.result[0]['b']) == [3]
  assert len(output.result[1]['b']) == 2
  # TFF 0.87: with room for every client, the sample is every client.
  process = tff.learning.metrics.FinalizeThenSampleFactory(5).create(
      _FINALIZERS, _UNFINALIZED_TYPE)
  current, total = process.next(process.initialize(), clients).result
  assert sorted(current['a']) == [0.25, 0.75, 3.0]
  assert sorted(total['b']) == [1, 3, 4]


@pytest.mark.slow
def test_finalize_then_sample_in_the_client_work_samples_clients():
  process = training_process(
      lambda finalizers, unfinalized_type=None: (
          tff.learning.metrics.finalize_then_sample(
              finalizers, unfinalized_type, sample_size=5)))
  form = tff.compile(process)
  _, metrics = tff.run_round(form, form.initialize(), CLASSIFICATION)
  train = metrics['client_work']['train']
  assert list(train) == ['sparse_categorical_accuracy', 'loss',
                         'num_examples', 'num_batches']
  # Every client's own metrics (TFF 0.87 samples every client when there is
  # room for each): 7 examples in 3 batches each.
  assert list(train['num_examples']) == [7, 7, 7]
  assert list(train['num_batches']) == [3, 3, 3]
  with pytest.raises(errors.InvalidValueError, match='sample_size'):
    tff.learning.metrics.finalize_then_sample(_FINALIZERS, sample_size=0)
