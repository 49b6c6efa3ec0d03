"""TFF 0.87's analytics compiled, saved and run on Beam (in process): the
same results as their local runs, and TFF's."""

import numpy as np
import pytest
import tensorflow as tf

import analytics_examples as examples
import beam_runner
import canonical as tff

TIMESTAMP = 5  # ServerOutput's round_timestamp: the clock, not compared.


def _on_beam(process, datasets, tmp_path):
  """The first round's outcome on Beam, from the saved and loaded form."""
  path = str(tmp_path / 'form.pb')
  tff.save(tff.compile(process), path)
  data = {f'client{i}': ds for i, ds in enumerate(datasets)}
  return beam_runner.run(tff.load(path), data, rounds=1,
                         clients_per_round=len(data),
                         output_dir=str(tmp_path / 'run'), seed=0)


def _once(computation):
  """A process whose round's metrics are `computation`'s result."""

  @tff.federated_computation()
  def initialize():
    return tff.federated_value((), tff.SERVER)

  @tff.federated_computation(initialize.type_signature.result,
                             computation.type_signature.parameter)
  def next_fn(state, client_data):
    return state, computation(client_data)

  return tff.templates.IterativeProcess(initialize, next_fn)


@pytest.mark.slow
@pytest.mark.parametrize('secure_sum_bitwidth', [None, 20])
def test_heavy_hitters_on_beam(secure_sum_bitwidth, tmp_path):
  computation = tff.analytics.heavy_hitters.iblt.build_iblt_computation(
      capacity=10, string_max_bytes=10,
      secure_sum_bitwidth=secure_sum_bitwidth)
  metrics = _on_beam(_once(computation), examples.word_datasets(),
                     tmp_path).outcomes[-1]['metrics']
  local = computation(examples.word_datasets())
  for i, value in enumerate(local):
    if i != TIMESTAMP:
      expected = np.asarray(value).tolist()
      if i == 1:
        expected = [w.decode() for w in expected]
      assert metrics[str(i)] == expected
  found = dict(zip(metrics['1'], zip(metrics['2'], metrics['3'])))
  assert found == {w.decode(): c for w, c in examples.HEAVY_HITTERS.items()}


@pytest.mark.slow
def test_a_noised_hierarchical_histogram_on_beam(tmp_path):
  process = tff.analytics.build_hierarchical_histogram_process(
      0.0, 10.0, 10, max_records_per_user=3, dp_mechanism='central-gaussian',
      noise_multiplier=0.5, seed=7)
  state = _on_beam(process, examples.record_datasets(), tmp_path).state
  local, _ = process.next(process.initialize(), examples.record_datasets())
  # Round 1 starts from the initial state (timestamp 0), so its sampling
  # and noise are the local run's, bit for bit.
  beam = state.aggregated_hierarchical_histogram
  ours = local.aggregated_hierarchical_histogram
  np.testing.assert_array_equal(beam['flat_values'], ours['flat_values'])
  np.testing.assert_array_equal(beam['nested_row_splits'][0],
                                examples.SPLITS_ARITY_2)
  assert state.round_timestamp > 0


@pytest.mark.slow
def test_hyperloglog_on_beam(tmp_path):
  computation = (tff.analytics.count_distinct
                 .create_federated_hyperloglog_computation(use_secagg=True))
  words = [[f'w{i}'.encode() for i in range(k, k + 40)]
           for k in (0, 25, 50, 300)]
  datasets = [tf.data.Dataset.from_tensor_slices(w) for w in words]
  metrics = _on_beam(_once(computation), datasets,
                     tmp_path).outcomes[-1]['metrics']
  assert metrics == {'value': 111}  # TFF 0.87's estimate.
