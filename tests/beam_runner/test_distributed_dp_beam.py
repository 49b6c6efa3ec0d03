"""Distributed DP on the Beam runner: a `DistributedDpSumFactory` round,
its noised client values summed by the masking protocol, gives the
reference's and the local loop's results bit for bit, round after round
(the adaptive clip moving the scale and bounds between them)."""

import numpy as np

from beam_runner import testing as beam_testing
import canonical as tff

import aggregator_rounds


def test_two_distributed_dp_rounds_on_beam_are_the_local_ones(tmp_path):
  rng = np.random.default_rng(11)
  data = {f'c{i}': (rng.normal(size=12) * 0.05 * (i + 1)).astype(np.float32)
          for i in range(6)}
  factory = tff.aggregators.DistributedDpSumFactory(
      0.5, 4, 16, 0.1, auto_l2_clip=True, auto_l2_clip_count_stddev=0.5,
      seed=9)
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
  for key in ('1/l2_clip', '1/scale_factor', '1/scaled_local_stddev'):
    assert first[key] != second[key]
