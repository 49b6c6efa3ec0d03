"""DP-FedAvg through secure aggregation
(`aggregators.build_dp_secure_mean_process`):
clipped, rotated, conditionally rounded levels summed under masks, noise
once on the decoded sum; every client's contribution stays within Delta."""

import numpy as np
import pytest
import tensorflow as tf

import canonical as cf
from canonical import aggregators
from canonical.executors import local as local_runner
from canonical.executors import reference

import example_processes

SPEC = {'kernel': tf.TensorSpec([40, 10], tf.float32),
        'bias': tf.TensorSpec([10], tf.float32)}
SIZE = 410


def _process(**kwargs):
  kwargs.setdefault('expected_clients', 8)
  mean = aggregators.build_dp_secure_mean_process(SPEC, **kwargs)
  return mean, example_processes.mean_process(mean, SPEC)


def _clipped_sum(clients, clip):
  total = np.zeros(SIZE)
  for value, weight in clients:
    if weight > 0:
      flat = np.concatenate([np.ravel(value['bias']),
                             np.ravel(value['kernel'])])
      total += flat * min(1.0, clip / np.linalg.norm(flat))
  return total


def _flat(mean):
  return np.concatenate([np.ravel(mean['bias']), np.ravel(mean['kernel'])])


def test_without_noise_the_mean_is_the_clipped_sum_over_expected_clients():
  mean, process = _process(noise_multiplier=0.0, clip=0.5, bits=10)
  form = cf.compile(process)
  clients = example_processes.weighted_clients(SPEC, 6, 0.1)  # Norms ~2.
  _, result = local_runner.run_round(form, form.initialize(), clients)
  expected = _clipped_sum(clients, 0.5) / 8  # Not / 6: a fixed denominator.
  error = np.abs(_flat(result) - expected).max()
  step = 0.5 * 4.0 / np.sqrt(SIZE) / 511  # clip * range_stddevs / ... / K.
  assert error < 3 * step  # Six clients' rounding, over 8.
  assert np.abs(_flat(result)).max() > 10 * error
  assert [s.kind for s in form.secure_sums] == [
      'federated_secure_modular_sum']


def test_no_clients_contribution_is_longer_than_the_sensitivity():
  """Adversarial updates (huge, tiny, every coordinate on a half step, NaN)
  decode to at most Delta each: the noise's calibration holds."""
  mean, process = _process(noise_multiplier=0.0, clip=1.0, bits=3, tries=2,
                           expected_clients=1)
  form = cf.compile(process)
  rng = np.random.default_rng(1)
  step = 1.0 * 4 / np.sqrt(SIZE) / 3
  updates = [
      {'kernel': np.full([40, 10], 1e6, np.float32),
       'bias': np.zeros([10], np.float32)},
      {'kernel': np.full([40, 10], step / 2, np.float32),
       'bias': np.full([10], step / 2, np.float32)},
      {'kernel': rng.normal(0, 1, [40, 10]).astype(np.float32),
       'bias': np.full([10], np.nan, np.float32)},
  ] + [{'kernel': rng.normal(0, 0.05, [40, 10]).astype(np.float32),
        'bias': rng.normal(0, 0.05, [10]).astype(np.float32)}
       for _ in range(20)]
  state = form.initialize()
  for update in updates:
    _, result = local_runner.run_round(form, state, [(update, np.float32(1))])
    assert np.linalg.norm(_flat(result)) <= mean.sensitivity * (1 + 1e-5)
  assert 1.0 < mean.sensitivity < 1.5


def test_the_noise_has_the_calibrated_stddev_and_replays():
  mean, process = _process(noise_multiplier=2.0, clip=0.1, seed=7)
  form = cf.compile(process)
  clients = example_processes.weighted_clients(SPEC, 4, 0.01)
  state = form.initialize()
  _, noisy = local_runner.run_round(form, state, clients)
  _, again = local_runner.run_round(form, state, clients)
  np.testing.assert_array_equal(_flat(noisy), _flat(again))  # Pure.
  quiet = cf.compile(_process(noise_multiplier=0.0, clip=0.1)[1])
  _, exact = local_runner.run_round(quiet, quiet.initialize(), clients)
  noise = (_flat(noisy) - _flat(exact)) * 8
  assert np.std(noise) == pytest.approx(2.0 * mean.sensitivity, rel=0.15)
  next_state, _ = local_runner.run_round(form, state, clients)
  _, later = local_runner.run_round(form, next_state, clients)
  assert not np.allclose(_flat(later), _flat(noisy))  # New noise a round.


def test_the_runners_agree_with_the_reference():
  _, process = _process(noise_multiplier=1.0, clip=0.2, seed=3)
  form = cf.compile(process)
  clients = example_processes.weighted_clients(SPEC, 5, 0.05, seed=2)
  state = form.initialize()
  _, by_form = local_runner.run_round(form, state, clients, secure_seed=1)
  _, by_reference = reference.run_round(process, process.initialize.invoke(),
                                        clients)
  np.testing.assert_allclose(_flat(by_form), _flat(by_reference), atol=1e-6)


@pytest.mark.parametrize('kwargs, match', [
    ({'noise_multiplier': -1.0, 'clip': 1.0}, 'noise_multiplier must be'),
    ({'noise_multiplier': 1.0, 'clip': 0.0}, 'clip must be a positive'),
    ({'noise_multiplier': 1.0, 'clip': 1.0, 'bits': 1}, 'bits must be'),
    ({'noise_multiplier': 1.0, 'clip': 1.0, 'tries': 0}, 'tries must be'),
    ({'noise_multiplier': 1.0, 'clip': 1.0, 'bits': 16,
      'expected_clients': 10**5}, 'modulus above 2\\*\\*31'),
])
def test_bad_arguments_are_refused(kwargs, match):
  kwargs.setdefault('expected_clients', 8)
  with pytest.raises(ValueError, match=match):
    aggregators.build_dp_secure_mean_process(SPEC, **kwargs)
