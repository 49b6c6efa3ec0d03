"""Issue 36's `tff.aggregators` and measured-process compositions compiled,
saved, loaded and run on Beam in process: the same rounds as their local run
(whose numbers are TFF 0.87's, recorded in tests/canonical/aggregators/).

Aggregators run inside TFF's learning algorithms, and on their own as one
step of a round, with one client per Beam element so that the aggregation
tier merges partial accumulators (the reservoirs of a sample included)."""

import collections

import numpy as np
import pytest

import beam_runner
from beam_runner import testing as beam_testing
import canonical as tff
import tff_087_examples as example

import aggregator_rounds

A = tff.aggregators


def _sgd():
  return tff.learning.optimizers.build_sgdm(learning_rate=0.1)


LEARNING = {
    'fed_sgd_dp': lambda: tff.learning.algorithms.build_fed_sgd(
        example.model_fn, model_aggregator=A.as_weighted_aggregator(
            A.DifferentiallyPrivateFactory.gaussian_fixed(0.1, 2, 1.0,
                                                          seed=3))),
    'unweighted_hadamard': lambda: (
        tff.learning.algorithms.build_unweighted_fed_avg(
            example.model_fn, _sgd(), model_aggregator=A.UnweightedMeanFactory(
                A.HadamardTransformFactory(seed=1)))),
    'weighted_dft_secure': lambda: (
        tff.learning.algorithms.build_weighted_fed_avg(
            example.model_fn, _sgd(), model_aggregator=A.MeanFactory(
                A.DiscreteFourierTransformFactory(A.SecureSumFactory(4.0),
                                                  seed=1)))),
    'weighted_concat_measured': lambda: (
        tff.learning.algorithms.build_weighted_fed_avg(
            example.model_fn, _sgd(), model_aggregator=A.add_measurements(
                A.concat_factory(A.MeanFactory()),
                client_measurement_fn=lambda v, w: collections.OrderedDict(
                    total_weight=tff.federated_sum(w))))),
    'unweighted_modular_count': lambda: (
        tff.learning.algorithms.build_unweighted_fed_avg(
            example.model_fn, _sgd(), model_aggregator=A.UnweightedMeanFactory(
                count_sum_factory=A.SecureModularSumFactory(1000)))),
}


def _flat(metrics, prefix=''):
  flat = {}
  for key, value in metrics.items():
    if isinstance(value, dict):
      flat.update(_flat(value, f'{prefix}{key}/'))
    elif not isinstance(value, tuple):
      flat[f'{prefix}{key}'] = pytest.approx(float(value), rel=1e-5)
  return flat


@pytest.mark.parametrize('name', [
    name if name == 'unweighted_hadamard' else
    pytest.param(name, marks=pytest.mark.slow) for name in sorted(LEARNING)])
def test_learning_with_these_aggregators_on_beam_matches_local(name,
                                                               tmp_path):
  process = LEARNING[name]()
  data = example.client_data()
  form_path = str(tmp_path / 'form.pb')
  tff.save(tff.compile(process), form_path)
  result = beam_runner.run(form_path, {'a': data[0], 'b': data[1]}, rounds=2,
                           clients_per_round=2,
                           output_dir=str(tmp_path / 'run'), seed=0)
  state = process.initialize()
  for _ in range(2):
    output = process.next(state, data)
    state = output.state
  for beam, local in zip(result.state.global_model_weights.trainable,
                         state.global_model_weights.trainable):
    np.testing.assert_allclose(beam, local, atol=1e-6)
  assert result.outcomes[-1]['metrics'] == _flat(output.metrics)


F = tff.TensorType(np.float32)
V = collections.OrderedDict(a=tff.TensorType(np.float32, [3]), b=F)
I3 = tff.TensorType(np.int32, [3])
_RNG = np.random.default_rng(5)
VALUES = {f'c{i}': collections.OrderedDict(
    a=_RNG.normal(size=3).astype(np.float32), b=np.float32(i))
          for i in range(6)}
INTS = {f'c{i}': _RNG.integers(-9, 9, size=3).astype(np.int32)
        for i in range(4)}


def _saved(process, tmp_path):
  path = str(tmp_path / 'form.pb')
  tff.save(tff.compile(process), path)
  return tff.load(path)


@pytest.mark.parametrize('make, value_type, data', [
    (lambda: A.UnweightedReservoirSamplingFactory(
        3, return_sampling_metadata=True, seed=4), V, VALUES),
    (lambda: A.SecureModularSumFactory(5, symmetric_range=True), I3, INTS),
    pytest.param(lambda: A.HadamardTransformFactory(A.SecureSumFactory(40.0),
                                                    seed=2), V, VALUES,
                 marks=pytest.mark.slow),
], ids=['reservoir', 'modular_symmetric', 'hadamard_of_secure_sum'])
def test_aggregators_on_beam_match_the_reference(make, value_type, data,
                                                 tmp_path):
  process = aggregator_rounds.as_round(make().create(value_type))
  beam_testing.assert_rounds_match(process, data, rounds=2,
                                   form=_saved(process, tmp_path),
                                   clients_per_element=1)


@tff.federated_computation(tff.type_at_server(tff.TensorType(np.int32)),
                           tff.type_at_clients(V))
def _sample_and_quantized_sum(state, value):
  sample = A.federated_sample(value, 2)
  total = A.secure_quantized_sum(value, np.float32(-1.0), np.float32(5.0))
  return state, (sample, total)


def test_primitives_on_beam_match_the_reference(tmp_path):
  process = tff.IterativeProcess(
      tff.federated_computation(lambda: tff.federated_value(0, tff.SERVER)),
      _sample_and_quantized_sum)
  beam_testing.assert_rounds_match(process, VALUES, rounds=1,
                                   form=_saved(process, tmp_path),
                                   clients_per_element=1)


def test_composed_measured_processes_on_beam_match_the_reference(tmp_path):
  parts = collections.OrderedDict(
      sum=A.SumFactory().create(tff.TensorType(np.float32, [3])),
      sample=A.UnweightedReservoirSamplingFactory(2, seed=1).create(F))
  concatenated = tff.templates.concatenate_measured_processes(parts)

  @tff.federated_computation(concatenated.state_type, tff.type_at_clients(V))
  def next_fn(state, value):
    output = concatenated.next(state, collections.OrderedDict(
        sum=value['a'], sample=value['b']))
    return output.state, (output.result, output.measurements)

  process = tff.IterativeProcess(concatenated.initialize, next_fn)
  beam_testing.assert_rounds_match(process, VALUES, rounds=2,
                                   form=_saved(process, tmp_path),
                                   clients_per_element=1)
