"""TFF 0.87's learning processes, compiled and run on Beam: the same
rounds as their local run (and as TFF 0.87's, recorded in the learning
tests)."""

import numpy as np
import pytest

import beam_runner
import canonical as tff
from canonical.learning import optimizers
import tff_087_examples as fed_avg_example


@pytest.mark.parametrize('build', ['weighted', 'unweighted'])
def test_fed_avg_on_beam_matches_its_local_rounds(build, tmp_path):
  if build == 'weighted':
    process = tff.learning.algorithms.build_weighted_fed_avg(
        fed_avg_example.model_fn, optimizers.build_sgdm(learning_rate=0.1))
  else:
    process = tff.learning.algorithms.build_unweighted_fed_avg(
        fed_avg_example.model_fn, optimizers.build_sgdm(learning_rate=0.1))
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
  train = output.metrics['client_work']['train']
  assert result.outcomes[-1]['metrics'] == {
      'client_work/train/loss': pytest.approx(float(train['loss'])),
      'client_work/train/num_batches': 5,
      'client_work/train/num_examples': 8,
      'client_work/train/sparse_categorical_accuracy': pytest.approx(
          float(train['sparse_categorical_accuracy'])),
      'finalizer/update_non_finite': 0}
