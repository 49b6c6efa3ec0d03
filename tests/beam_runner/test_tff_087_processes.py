"""TFF 0.87's learning processes, compiled and run on Beam: the same
rounds as their local run (and as TFF 0.87's, recorded in the learning
tests)."""

import numpy as np
import pytest

import beam_runner
from beam_runner import engines
import canonical as tff
from canonical.learning import optimizers
import tff_087_examples as fed_avg_example


BUILDERS = {
    'weighted_fed_avg': lambda: tff.learning.algorithms.build_weighted_fed_avg(
        fed_avg_example.model_fn, optimizers.build_sgdm(learning_rate=0.1)),
    'unweighted_fed_avg': lambda: (
        tff.learning.algorithms.build_unweighted_fed_avg(
            fed_avg_example.model_fn,
            optimizers.build_sgdm(learning_rate=0.1))),
    'fed_prox': lambda: tff.learning.algorithms.build_weighted_fed_prox(
        fed_avg_example.model_fn, 0.5,
        optimizers.build_sgdm(learning_rate=0.1)),
    'fed_sgd': lambda: tff.learning.algorithms.build_fed_sgd(
        fed_avg_example.model_fn),
    'fed_eval': lambda: tff.learning.algorithms.build_fed_eval(
        fed_avg_example.model_fn),
    'compression_aggregator': lambda: (
        tff.learning.algorithms.build_weighted_fed_avg(
            fed_avg_example.model_fn, optimizers.build_sgdm(learning_rate=0.1),
            model_aggregator=tff.learning.compression_aggregator())),
    'dp_aggregator': lambda: tff.learning.algorithms.build_unweighted_fed_avg(
        fed_avg_example.model_fn, optimizers.build_sgdm(learning_rate=0.1),
        model_aggregator=tff.learning.dp_aggregator(
            noise_multiplier=0.1, clients_per_round=2)),
}


def _flat(metrics, prefix=''):
  flat = {}
  for key, value in metrics.items():
    if isinstance(value, dict):
      flat.update(_flat(value, f'{prefix}{key}/'))
    elif not isinstance(value, tuple):
      flat[f'{prefix}{key}'] = pytest.approx(float(value), rel=1e-5)
  return flat


@pytest.mark.parametrize('name', sorted(BUILDERS))
def test_learning_processes_on_beam_match_their_local_rounds(name, tmp_path):
  process = BUILDERS[name]()
  data = fed_avg_example.client_data()
  tff.save(tff.compile(process), str(tmp_path / 'form.pb'))
  result = beam_runner.run(str(tmp_path / 'form.pb'),
                           {'a': data[0], 'b': data[1]}, rounds=2,
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


@pytest.mark.slow
def test_a_tff_learning_process_on_dask_matches_in_process(tmp_path):
  process = BUILDERS['compression_aggregator']()
  data = fed_avg_example.client_data()
  form_path = str(tmp_path / 'form.pb')
  tff.save(tff.compile(process), form_path)
  beam_runner.write_client_data(tmp_path / 'shards',
                                {'a': data[0], 'b': data[1]})
  expected = beam_runner.run(form_path, str(tmp_path / 'shards'), rounds=2,
                             clients_per_round=2,
                             output_dir=str(tmp_path / 'local'), seed=0)
  cluster = engines.start_local_cluster(2, lifetime='10 minutes')
  try:
    result = beam_runner.run(
        form_path, str(tmp_path / 'shards'), rounds=2, clients_per_round=2,
        output_dir=str(tmp_path / 'dask'), seed=0,
        pipeline_options={'runner': 'DaskRunner',
                          'dask_client_address': cluster.scheduler_address})
  finally:
    cluster.close()
  assert result.outcomes[0]['engine'].startswith('DaskRunner')
  for dask, local in zip(result.state.global_model_weights.trainable,
                         expected.state.global_model_weights.trainable):
    np.testing.assert_allclose(dask, local, atol=1e-6)
  assert result.outcomes[-1]['metrics'] == pytest.approx(
      expected.outcomes[-1]['metrics'])
