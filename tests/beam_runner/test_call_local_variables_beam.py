"""Processes whose computations make their own `tf.Variable`s (lowered into
values, canonical/core/local_variables.py), compiled, saved, and run on Beam
in process: the same rounds as their local run."""

import numpy as np
import pytest

import beam_runner
import canonical as tff
import variable_model_examples


def _variable_model_fed_avg():
  return tff.learning.algorithms.build_weighted_fed_avg(
      variable_model_examples.MnistModel,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1))


PROCESSES = {'variable_model_fed_avg': (_variable_model_fed_avg,
                                        variable_model_examples.client_data)}


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
def test_processes_on_beam_match_their_local_rounds(name, tmp_path):
  make_process, make_data = PROCESSES[name]
  process, data = make_process(), make_data()
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
