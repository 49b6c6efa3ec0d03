"""TFF 0.87's models and metrics aggregators in processes compiled and run
on Beam: a FunctionalModel written as TFF's docs write it, one from
`functional_model_from_keras` (with a Keras metric the compiler lowers),
one loaded from `save_functional_model`, `model_from_functional`'s, and
the client work's training metrics by `sum_then_finalize`,
`secure_sum_then_finalize` and `finalize_then_sample`. Each runs the rounds
of its local run (whose numbers, TFF 0.87's, are checked in
tests/canonical/learning/test_tff_087_models.py)."""

import collections

import numpy as np
import pytest
import tensorflow as tf

import beam_runner
import canonical as tff
import functional_model_examples as examples

SGDM = tff.learning.optimizers.build_sgdm


def _saved_and_loaded(tmp_path):
  path = str(tmp_path / 'model.fedcanon')
  tff.learning.models.save_functional_model(examples.functional_classifier(),
                                            path)
  return tff.learning.models.load_functional_model(path)


PROCESSES = {
    'fed_avg of a FunctionalModel': (
        lambda tmp: tff.learning.algorithms.build_weighted_fed_avg(
            examples.linear_regression(), SGDM(0.1), SGDM(1.0)),
        examples.REGRESSION),
    'fed_avg of functional_model_from_keras': (
        lambda tmp: tff.learning.algorithms.build_weighted_fed_avg(
            examples.functional_classifier(
                lambda: collections.OrderedDict(
                    top2=tf.keras.metrics.SparseTopKCategoricalAccuracy(k=2),
                    loss=tf.keras.metrics.SparseCategoricalCrossentropy())),
            SGDM(0.1)),
        examples.CLASSIFICATION),
    'fed_avg of a loaded FunctionalModel': (
        lambda tmp: tff.learning.algorithms.build_weighted_fed_avg(
            _saved_and_loaded(tmp), SGDM(0.1)),
        examples.CLASSIFICATION),
    'fed_avg of model_from_functional': (
        lambda tmp: tff.learning.algorithms.build_weighted_fed_avg(
            lambda: tff.learning.models.model_from_functional(
                examples.linear_regression(),
                (tf.keras.metrics.MeanSquaredError,)), SGDM(0.1)),
        examples.REGRESSION),
    'sum_then_finalize': (
        lambda tmp: examples.training_process(
            tff.learning.metrics.sum_then_finalize),
        examples.CLASSIFICATION),
    'secure_sum_then_finalize': (
        lambda tmp: examples.training_process(
            tff.learning.metrics.secure_sum_then_finalize),
        examples.CLASSIFICATION),
}


def _flat(metrics, prefix=''):
  flat = {}
  for key, value in metrics.items():
    if isinstance(value, dict):
      flat.update(_flat(value, f'{prefix}{key}/'))
    elif not isinstance(value, tuple):
      flat[f'{prefix}{key}'] = pytest.approx(float(value), rel=1e-5)
  return flat


@pytest.mark.slow
@pytest.mark.parametrize('name', sorted(PROCESSES))
def test_model_processes_on_beam_match_their_local_rounds(name, tmp_path):
  build, data = PROCESSES[name]
  process = build(tmp_path)
  form_path = str(tmp_path / 'form.pb')
  tff.save(tff.compile(process), form_path)
  clients = dict(zip('abc', data))
  result = beam_runner.run(form_path, clients, rounds=2, clients_per_round=3,
                           output_dir=str(tmp_path / 'run'), seed=0)
  state = process.initialize()
  for _ in range(2):
    output = process.next(state, data)
    state = output.state
  for beam, local in zip(result.state.global_model_weights.trainable,
                         state.global_model_weights.trainable):
    np.testing.assert_allclose(beam, local, atol=1e-6)
  assert result.outcomes[-1]['metrics'] == _flat(output.metrics)


@pytest.mark.slow
def test_finalize_then_sample_on_beam_samples_as_the_local_loop(tmp_path):
  # Each sampled client's metrics, in the sample's order (the priorities'
  # secret is the form's), as the local loop gives them.
  process = examples.training_process(
      lambda finalizers, unfinalized_type=None: (
          tff.learning.metrics.finalize_then_sample(
              finalizers, unfinalized_type, sample_size=2)))
  form = tff.compile(process)
  form_path = str(tmp_path / 'form.pb')
  tff.save(form, form_path)
  result = beam_runner.run(form_path, dict(zip('abc', examples.CLASSIFICATION)),
                           rounds=1, clients_per_round=3,
                           output_dir=str(tmp_path / 'run'), seed=0)
  _, metrics = tff.run_round(form, form.initialize(), examples.CLASSIFICATION)
  train = metrics['client_work']['train']
  beam = result.outcomes[-1]['metrics']
  for name in train:
    np.testing.assert_allclose(beam[f'client_work/train/{name}'], train[name],
                               rtol=1e-6)
