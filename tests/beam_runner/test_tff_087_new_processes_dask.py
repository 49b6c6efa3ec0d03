"""Issue 36's new processes on a Dask cluster: one of each family (Mime
Lite, k-means, Federated Reconstruction, a FunctionalModel written as TFF's
docs write one, a rotation aggregator over secure sums, heavy hitters),
compiled, saved and run by the Beam runner on a local Dask cluster of two
workers, with the results of their local run (`process.next`); and TFF's
FedAvg with error feedback, each client's residual kept by the workers. Their
in-process Beam runs are in the tests beside this one."""

import numpy as np
import pytest
import tensorflow as tf

import analytics_examples
import beam_runner
from beam_runner import engines
from beam_runner import testing
import canonical as tff
import error_feedback_examples
import functional_model_examples
import tff_087_examples as example

import test_tff_087_aggregators_beam as aggregators_beam
import test_tff_087_algorithms_on_beam as algorithms_beam
import test_tff_087_analytics_beam as analytics_beam

SGDM = tff.learning.optimizers.build_sgdm


def _kmeans_points():
  rng = np.random.default_rng(1)
  return [tf.data.Dataset.from_tensor_slices(
      rng.normal(size=(n, 2)).astype(np.float32)) for n in (6, 4, 5)]


def _heavy_hitters():
  computation = tff.analytics.heavy_hitters.iblt.build_iblt_computation(
      capacity=10, string_max_bytes=10)
  return analytics_beam._once(computation)  # pylint: disable=protected-access


PROCESSES = {
    'weighted_mime_lite': (algorithms_beam.BUILDERS['weighted_mime_lite'],
                           example.client_data),
    'fed_kmeans': (algorithms_beam.BUILDERS['fed_kmeans'], _kmeans_points),
    'fed_recon': (algorithms_beam.BUILDERS['fed_recon'], example.recon_data),
    'functional_model_fed_avg': (
        lambda: tff.learning.algorithms.build_weighted_fed_avg(
            functional_model_examples.linear_regression(), SGDM(0.1),
            SGDM(1.0)),
        lambda: list(functional_model_examples.REGRESSION)),
    'weighted_dft_secure': (aggregators_beam.LEARNING['weighted_dft_secure'],
                            example.client_data),
    'heavy_hitters': (_heavy_hitters, analytics_examples.word_datasets),
}


@pytest.fixture(scope='module')
def cluster():
  started = engines.start_local_cluster(2, lifetime='15 minutes')
  yield started
  started.close()


def _local_rounds(process, data, rounds):
  state = process.initialize()
  for _ in range(rounds):
    output = process.next(state, data)
    state = output[0]
  return state, output[1]


@pytest.mark.slow
@pytest.mark.parametrize('name', sorted(PROCESSES))
def test_new_processes_on_dask_match_their_local_rounds(name, cluster,
                                                        tmp_path):
  make_process, make_data = PROCESSES[name]
  process, data = make_process(), make_data()
  rounds = 1 if name == 'heavy_hitters' else 2
  form_path = str(tmp_path / 'form.pb')
  tff.save(tff.compile(process), form_path)
  beam_runner.write_client_data(tmp_path / 'shards',
                                {f'c{i}': d for i, d in enumerate(data)})
  result = beam_runner.run(
      form_path, str(tmp_path / 'shards'), rounds=rounds,
      clients_per_round=len(data), output_dir=str(tmp_path / 'dask'), seed=0,
      pipeline_options={'runner': 'DaskRunner',
                        'dask_client_address': cluster.scheduler_address})
  assert result.outcomes[0]['engine'].startswith('DaskRunner')
  metrics = result.outcomes[-1]['metrics']
  if name == 'heavy_hitters':  # Strings and counts; its clock differs.
    found = dict(zip(metrics['1'], zip(metrics['2'], metrics['3'])))
    assert found == {w.decode(): c for w, c in
                     analytics_examples.HEAVY_HITTERS.items()}
    return
  state, local_metrics = _local_rounds(process, data, rounds)
  # Dask merges each worker's partial sums: floats re-associate.
  for dask, local in zip(tf.nest.flatten(result.state),
                         tf.nest.flatten(state)):
    np.testing.assert_allclose(dask, local, rtol=1e-5, atol=1e-6)
  assert metrics == aggregators_beam._flat(local_metrics)  # pylint: disable=protected-access


@pytest.mark.slow
def test_fed_avg_with_error_feedback_on_dask_keeps_each_residual(cluster,
                                                                tmp_path):
  testing.assert_rounds_match(
      error_feedback_examples.fed_avg(), error_feedback_examples.client_data(),
      rounds=2, clients_per_round=3, output_dir=str(tmp_path / 'run'),
      rtol=1e-5, atol=1e-6, pipeline_options={
          'runner': 'DaskRunner',
          'dask_client_address': cluster.scheduler_address})
