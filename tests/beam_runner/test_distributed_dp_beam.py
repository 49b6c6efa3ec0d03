"""Distributed DP on the Beam runner: without noise, `DistributedDpSumFactory`
rounds summed by the masking protocol give the reference's and the local
loop's results bit for bit, round after round (the adaptive clip moving the
scale and bounds between them); with noise, each client's noise comes from
its own secret, of the variance the round states."""

import numpy as np
import pytest

from beam_runner import runner
from beam_runner import testing as beam_testing
import canonical as tff

import aggregator_rounds


def test_two_distributed_dp_rounds_on_beam_are_the_local_ones(tmp_path):
  rng = np.random.default_rng(11)
  data = {f'c{i}': (rng.normal(size=12) * 0.05 * (i + 1)).astype(np.float32)
          for i in range(6)}
  # Noise 0 for the values (each client's own noise is secret, so no two
  # runtimes draw the same); the clip count is noised at the server.
  factory = tff.aggregators.DistributedDpSumFactory(
      0.0, 4, 16, 0.1, auto_l2_clip=True, auto_l2_clip_count_stddev=0.5)
  process = aggregator_rounds.as_round(
      factory.create(tff.TensorType(np.float32, [12])))
  result = beam_testing.assert_rounds_match(
      process, data, rounds=2, clients_per_round=4, seed=3, rtol=0, atol=0,
      clients_per_element=1, output_dir=tmp_path / 'run')
  for outcome in result.outcomes:  # Metrics: (result, measurements).
    assert outcome['secure_aggregation']['contributors'] == 4
    assert outcome['metrics']['1/actual_num_clients'] == 4
  # The adaptive clip moved, so round 2 ran with new parameters.
  first, second = (o['metrics'] for o in result.outcomes)
  for key in ('1/l2_clip', '1/scale_factor'):
    assert first[key] != second[key]


def test_each_clients_noise_on_beam_comes_from_its_own_secret(tmp_path):
  dim, n = 256, 6
  rng = np.random.default_rng(12)
  data = {f'c{i}': (rng.normal(size=dim) * 1e-3).astype(np.float32)
          for i in range(n)}  # Norms well below the clip: none is clipped.
  factory = tff.aggregators.DistributedDpSumFactory(
      2.0, n, 20, 0.1, modclip_prob=1e-9, mechanism='distributed_dgauss')
  form = tff.compile(aggregator_rounds.as_round(
      factory.create(tff.TensorType(np.float32, [dim]))))
  errors = []
  for run in ('one', 'two'):  # The same form and clients.
    result = runner.run(form, data, 1, n, str(tmp_path / run), seed=3,
                        progress=lambda line: None)
    outcome = result.outcomes[0]
    assert outcome['secure_aggregation']['contributors'] == n
    metrics = outcome['metrics']
    total = np.asarray(metrics['0'], np.float64)
    errors.append(total - np.sum(list(data.values()), axis=0))
    scale = metrics['1/scale_factor']
    expected = n * np.ceil(metrics['1/scaled_local_stddev'])**2 / scale**2
    # 256 coordinates: the sample variance is within ~9% of the true one.
    assert np.var(errors[-1]) == pytest.approx(expected, rel=0.35)
  # Two runs' clients hold other secrets: other noise, though the form,
  # its secrets and the values are the same.
  assert abs(np.corrcoef(errors[0], errors[1])[0, 1]) < 0.3
