"""DP-FedAvg's aggregation: whole-update L2 clipping, one Gaussian draw on the
sum, a fixed denominator; adaptive clipping through the encoding stage."""

import numpy as np
import pytest
import tensorflow as tf

from beam_runner import testing
import canonical as cf
from canonical import aggregators
from canonical.executors import local as local_runner
from canonical import privacy

import example_processes
import tff_087_examples

SPEC = {'kernel': tf.TensorSpec([50, 20], tf.float32),
        'bias': tf.TensorSpec([20], tf.float32)}


def _process(**kwargs):
  mean = aggregators.build_dp_mean_process(SPEC, **kwargs)
  return example_processes.mean_process(mean, SPEC), mean


def _clients(n, scale, seed=0):
  return example_processes.weighted_clients(SPEC, n, scale, seed)


def _flat(value):
  return np.concatenate([np.ravel(value[k]) for k in sorted(value)])


def test_without_noise_it_is_the_clipped_sum_over_expected_clients():
  process, _ = _process(noise_multiplier=0.0, clip=0.5, expected_clients=8)
  clients = _clients(6, 0.05)  # Norms ~1.6: all clipped to 0.5.
  data = {f'c{i}': c for i, c in enumerate(clients)}
  testing.assert_rounds_match(process, data, rounds=1, clients_per_round=6)
  form = cf.compile(process)
  _, mean = local_runner.run_round(form, form.initialize(), clients)
  expected = sum(_flat(v) * min(1.0, 0.5 / np.linalg.norm(_flat(v)))
                 for v, _ in clients) / 8
  np.testing.assert_allclose(_flat(mean), expected, rtol=1e-5, atol=1e-7)


def test_the_noise_is_one_gaussian_draw_of_z_times_clip_on_the_sum():
  process, _ = _process(noise_multiplier=2.0, clip=0.5, expected_clients=8,
                        seed=1)
  form = cf.compile(process)
  zeros = [({k: np.zeros(s.shape, np.float32) for k, s in SPEC.items()},
            np.float32(1))] * 4
  state = form.initialize()
  new_state, mean = local_runner.run_round(form, state, zeros)
  noise = _flat(mean) * 8  # The sum's noise: N(0, (2 * 0.5)**2).
  assert abs(noise.std() - 1.0) < 0.05 and abs(noise.mean()) < 0.1
  # Pure: the round replayed gives the same bits; the next round new ones.
  _, again = local_runner.run_round(form, state, zeros)
  np.testing.assert_array_equal(_flat(mean), _flat(again))
  _, later = local_runner.run_round(form, new_state, zeros)
  assert np.corrcoef(_flat(mean), _flat(later))[0, 1] < 0.1


def test_a_client_of_weight_zero_adds_nothing():
  process, _ = _process(noise_multiplier=0.0, clip=10.0, expected_clients=4)
  form = cf.compile(process)
  clients = _clients(3, 0.01)
  dropped = [(clients[0][0], np.float32(0))] + clients[1:]
  _, with_it = local_runner.run_round(form, form.initialize(), clients)
  _, without = local_runner.run_round(form, form.initialize(), dropped)
  np.testing.assert_allclose(
      _flat(with_it) - _flat(without), _flat(clients[0][0]) / 4, atol=1e-7)


def test_adaptive_clipping_moves_the_clip_toward_the_median_norm():
  process, mean = _process(noise_multiplier=0.5, clip=0.01,
                           expected_clients=10, adaptive=True,
                           learning_rate=1.0, seed=2)
  form = cf.compile(process)
  state = form.initialize()
  clients = _clients(10, 0.05)  # Norms ~1.6.
  for _ in range(15):
    state, _ = local_runner.run_round(form, state, clients)
  assert 0.5 < float(state['clip_norm']) < 5.0
  # Accounting: the update's noise and the count's (stddev 10 / 10 = 1).
  assert mean.noise_multiplier == pytest.approx(
      privacy.combined_noise_multiplier([0.5, 1.0]))
  assert 'adaptive L2 clip' in repr(mean.encoders[0])


def test_bad_arguments_are_refused():
  with pytest.raises(ValueError, match='noise_multiplier'):
    aggregators.build_dp_mean_process(SPEC, noise_multiplier=-1.0, clip=1.0,
                                 expected_clients=5)
  with pytest.raises(ValueError, match='initial_clip'):
    aggregators.build_dp_mean_process(SPEC, noise_multiplier=1.0, clip=0.0,
                                 expected_clients=5)
  with pytest.raises(ValueError, match='expected_clients'):
    aggregators.build_dp_mean_process(SPEC, noise_multiplier=1.0, clip=1.0,
                                 expected_clients=0)


def test_the_private_means_are_factories_tffs_fed_avg_takes():
  """`DPMeanFactory` and `DPSecureMeanFactory` are TFF weighted factories
  (the older builders are their views): TFF's FedAvg takes them as its
  model aggregator, and their processes say their round's noise."""
  model_fn = tff_087_examples.model_fn
  sgdm = cf.learning.optimizers.build_sgdm
  made = aggregators.DPMeanFactory(0.5, 1.0, 10, adaptive=True, seed=3)
  process = made.create(tf.TensorSpec([3], tf.float32),
                        tf.TensorSpec([], tf.float32))
  assert process.noise_multiplier == pytest.approx(
      aggregators.round_noise_multiplier(0.5, 10, True))
  fed_avg = cf.learning.algorithms.build_weighted_fed_avg(
      model_fn, sgdm(0.1), model_aggregator=made)
  assert cf.compile(fed_avg).initialize() is not None
  secure = aggregators.DPSecureMeanFactory(0.5, 1.0, 10, seed=3)
  assert secure.create(tf.TensorSpec([3], tf.float32),
                       tf.TensorSpec([], tf.float32)).sensitivity > 1.0
  fed_avg = cf.learning.algorithms.build_weighted_fed_avg(
      model_fn, sgdm(0.1), model_aggregator=secure)
  assert cf.compile(fed_avg).has_secure_sums
