"""Processes whose computations make their own `tf.Variable`s (lowered into
values, canonical/core/local_variables.py), compiled, saved, and run on Beam
in process: the same rounds as their local run."""

import collections
import importlib.util
import os
import tempfile

import keras
import numpy as np
import pytest
import tensorflow as tf

import beam_runner
import canonical as tff
import variable_model_examples

_TUTORIALS = os.path.join(os.path.dirname(__file__), '..', 'canonical',
                          'tff_087_tutorials')


def _tutorial(name):
  """A ported tutorial's module (its cells as the tutorial writes them)."""
  spec = importlib.util.spec_from_file_location(
      name, os.path.join(_TUTORIALS, f'{name}.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _variable_model_fed_avg():
  process = tff.learning.algorithms.build_weighted_fed_avg(
      variable_model_examples.MnistModel,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1))
  return process, variable_model_examples.client_data()


def _keras_metrics_fed_avg():
  """`from_keras_model` with Keras metrics that have no pure twin."""

  def model_fn():
    keras_model = keras.Sequential([
        keras.Input(shape=(4,)),
        keras.layers.Dense(1, activation='sigmoid',
                           kernel_initializer='zeros')])
    return tff.learning.models.from_keras_model(
        keras_model, loss=keras.losses.BinaryCrossentropy(),
        input_spec=collections.OrderedDict(
            x=tf.TensorSpec([None, 4], tf.float32),
            y=tf.TensorSpec([None, 1], tf.float32)),
        metrics=[keras.metrics.AUC(num_thresholds=20),
                 keras.metrics.Precision()])

  rng = np.random.default_rng(1)

  def dataset(n):
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.float32)[:, None]
    return tf.data.Dataset.from_tensor_slices(
        collections.OrderedDict(x=x, y=y)).batch(4)

  process = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn, tff.learning.optimizers.build_sgdm(learning_rate=0.5))
  return process, [dataset(9), dataset(6)]


def _loaded_model_fed_avg():
  """A `VariableModel` saved and loaded (`tff.learning.models.load` inside
  each computation)."""
  path = tempfile.mkdtemp()
  tff.learning.models.save(variable_model_examples.MnistModel(), path)
  process = tff.learning.algorithms.build_weighted_fed_avg(
      lambda: tff.learning.models.load(path),
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1))
  return process, variable_model_examples.client_data()


def _building_your_own_algorithm():
  tutorial = _tutorial('test_building_your_own_algorithm')
  return (tutorial.federated_algorithm,
          tutorial.federated_train_data[:2])


PROCESSES = {
    'variable_model_fed_avg': _variable_model_fed_avg,
    'keras_metrics_fed_avg': _keras_metrics_fed_avg,
    'loaded_model_fed_avg': _loaded_model_fed_avg,
    'building_your_own_algorithm': _building_your_own_algorithm,
}


def _flat(metrics, prefix=''):
  flat = {}
  for key, value in metrics.items():
    if isinstance(value, dict):
      flat.update(_flat(value, f'{prefix}{key}/'))
    elif not isinstance(value, tuple):
      flat[f'{prefix}{key}'] = pytest.approx(float(value), rel=1e-5)
  return flat


def _weights(state):
  if hasattr(state, 'global_model_weights'):
    return state.global_model_weights.trainable
  return state


@pytest.mark.slow
@pytest.mark.parametrize('name', sorted(PROCESSES))
def test_processes_on_beam_match_their_local_rounds(name, tmp_path):
  process, data = PROCESSES[name]()
  form = tff.compile(process)
  assert form.work.unrolled() is not None  # Batched work can take it.
  tff.save(form, str(tmp_path / 'form.pb'))
  result = beam_runner.run(str(tmp_path / 'form.pb'),
                           {'a': data[0], 'b': data[1]}, rounds=2,
                           clients_per_round=2,
                           output_dir=str(tmp_path / 'run'), seed=0)
  state, metrics = process.initialize(), None
  for _ in range(2):
    output = process.next(state, data)
    state, metrics = (output.state, output.metrics) if hasattr(
        output, 'state') else (output, None)
  for beam, local in zip(_weights(result.state), _weights(state)):
    np.testing.assert_allclose(beam, local, atol=1e-6)
  if metrics is not None:
    assert result.outcomes[-1]['metrics'] == _flat(metrics)
