"""What a run spends when its noise is not independent Gaussian noise each
round: DP-FTRL's tree and banded matrices (one Gaussian mechanism over the
run, its sensitivity computed from how clients take part) and distributed
DP's discrete noises (zCDP rounds)."""

import math

import dp_accounting
from dp_accounting import rdp
import numpy as np
import pytest

from canonical import errors
from canonical import privacy
from canonical.core import privacy_releases as releases
from canonical.privacy import banded
from canonical.privacy import correlated
from canonical.privacy import distributed
from canonical.privacy import spending
from canonical.simulation import sampling as sampling_lib


def _spent(release_list, rounds, sampling='cyclic', k=10, n=50, **kw):
  return spending.spent(release_list, sampling=sampling, clients_per_round=k,
                        population=n, rounds=rounds, delta=1e-5, **kw)


def _gaussian_epsilon(z, count):
  tracker = rdp.RdpAccountant()
  tracker.compose(dp_accounting.GaussianDpEvent(z), count)
  return tracker.get_epsilon(1e-5)


def _banded(coefficients, z=1.0):
  return releases.Release('b', z, 'banded', coefficients=coefficients)


def _tree(z=1.0, warmup=0, frequency=0):
  return releases.Release('t', z, 'tree', {'restart_warmup': warmup,
                                           'restart_frequency': frequency})


def test_cyclic_sampling_takes_every_client_once_a_cycle():
  ids = [f'c{i:02d}' for i in range(23)]
  groups = sampling_lib.cyclic_groups(23, 5)
  assert groups == 4
  seen = [sampling_lib.sample_clients(ids, 5, 7, r, 'cyclic')
          for r in range(2 * groups)]
  assert sorted(sum(seen[:groups], [])) == ids  # Each once a cycle...
  assert seen[:groups] == seen[groups:]  # ...in the same groups.
  assert all(len(s) >= 5 for s in seen)


def test_one_band_is_dp_sgd_a_gaussian_round_for_each_round_a_client_is_in():
  for rounds in (1, 12, 13):
    gaussian = _spent((releases.Release('g', 1.1),), rounds)
    one_band = _spent((_banded((1.0,), 1.1),), rounds)
    count = math.ceil(rounds / 5)  # 50 clients, 10 a round: 5 groups.
    assert gaussian['rounds_per_client'] == count
    assert gaussian['epsilon'] == pytest.approx(_gaussian_epsilon(1.1, count))
    assert one_band['epsilon'] == pytest.approx(gaussian['epsilon'])


def test_bands_within_the_cycle_never_overlap_and_past_it_they_cost_more():
  c = banded.coefficients('sqrt', 3, 20)
  within = _spent((_banded(c),), 20)  # 5 groups >= 3 bands.
  assert within['epsilon'] == pytest.approx(_gaussian_epsilon(1.0, 4))
  overlapping = _spent((_banded(c),), 20, k=25)  # 2 groups < 3 bands.
  assert overlapping['epsilon'] > _gaussian_epsilon(1.0, 10)
  # Under sampling that does not bound returns, a client is in every round.
  every = _spent((_banded(c),), 20, sampling='poisson')
  assert every['epsilon'] > overlapping['epsilon']
  u = np.ones(20)
  column_sums = np.convolve(u, c)[:20]
  assert correlated.banded_sensitivity([u], c) == pytest.approx(
      np.linalg.norm(column_sums))


def test_one_tree_epoch_matches_dp_accountings_tree_event():
  # 8 rounds, 8 groups: each client once, under one tree of 8 leaves.
  ours = _spent((_tree(0.7),), 8, k=10, n=80)
  tracker = rdp.RdpAccountant(neighboring_relation=(
      dp_accounting.NeighboringRelation.REPLACE_SPECIAL))
  tracker.compose(dp_accounting.SingleEpochTreeAggregationDpEvent(0.7, [8]))
  assert ours['epsilon'] == pytest.approx(tracker.get_epsilon(1e-5))
  assert correlated.tree_sensitivity(correlated.participations(8, 8)) == \
      pytest.approx(2.0)  # A leaf is under 4 nodes: 8, 4, 2 and 1 rounds.


def test_tree_restarts_cut_the_rounds_as_tff_restarts_them():
  assert correlated.tree_segments(10, 3, 4) == [(0, 3), (3, 7), (7, 10)]
  assert correlated.tree_segments(10) == [(0, 10)]
  assert correlated.tree_segments(2, 3, 4) == [(0, 2)]
  # Two trees of 4 rounds, a client in round 0 and 4: two leaves of depth 3.
  u = np.array([1., 0, 0, 0, 1, 0, 0, 0])
  assert correlated.tree_sensitivity([u], 4, 4) == pytest.approx(math.sqrt(6))
  assert correlated.tree_sensitivity([u]) == pytest.approx(
      math.sqrt(1 + 1 + 1 + 1 + 1 + 1 + 4))


def test_distributed_noise_tends_to_the_gaussian_of_the_same_central_noise():
  # 100 clients of local stddev s sum to a central stddev 10 s; sensitivity
  # 10 s: central noise multiplier 1.
  for mechanism in ('distributed_dgauss', 'distributed_skellam'):
    for s in (5.0, 500.0):
      params = {'local_stddev': s, 'l2_sensitivity': 10 * s,
                'l1_sensitivity': 10 * s * 30, 'dimension': 1024,
                'clients': 100}
      if mechanism == 'distributed_dgauss':
        del params['l1_sensitivity']
      spent = _spent((releases.Release('d', 1.0, mechanism, params),), 20,
                     sampling='fixed', k=100, n=100)['epsilon']
      gaussian = _gaussian_epsilon(1.0, 20)
      assert spent >= gaussian * (1 - 1e-9)
      if s == 500.0:
        assert spent == pytest.approx(gaussian, rel=0.01)
  small = distributed.dgauss_event(0.3, 3.0, 1024, 100)
  large = distributed.dgauss_event(3.0, 30.0, 1024, 100)
  assert small.rho > large.rho  # Coarse noise is far from Gaussian.


def test_what_cannot_be_accounted_or_described_is_refused():
  skellam = releases.Release('d', 1.0, 'distributed_skellam', {
      'local_stddev': 1, 'l2_sensitivity': 1, 'l1_sensitivity': 1,
      'dimension': 4, 'clients': 2})
  with pytest.raises(errors.InvalidValueError, match='pld cannot account '
                     'distributed DP'):
    spending.check_run((skellam,), 'poisson', 10, 100, 1e-5, 'pld')
  with pytest.raises(errors.InvalidValueError, match='a tree release needs '
                     'parameters'):
    releases.Release('t', 1.0, 'tree')
  with pytest.raises(errors.InvalidValueError, match='a banded release '
                     'needs them'):
    releases.Release('b', 1.0, 'banded')
  with pytest.raises(errors.InvalidValueError, match='mechanism must be'):
    releases.Release('x', 1.0, 'laplace')


def test_optimized_bands_err_less_than_the_square_root_and_keep_unit_columns():
  for bands, rounds in ((4, 200), (16, 500)):
    sqrt = banded.coefficients('sqrt', bands, rounds)
    fitted = banded.coefficients('optimized', bands, rounds)
    assert np.linalg.norm(fitted) == pytest.approx(1.0)
    assert np.all(fitted >= 0)
    assert banded.prefix_error(fitted, rounds) < banded.prefix_error(
        sqrt, rounds)
    # More bands, less error; one band is independent noise: error (T+1)/2.
    assert banded.prefix_error(fitted, rounds) < banded.prefix_error(
        (1.0,), rounds) == pytest.approx((rounds + 1) / 2)


def test_the_inverse_coefficients_invert_the_banded_matrix():
  c = banded.coefficients('sqrt', 3, 10)
  matrix = sum(np.eye(10, k=-k) * c[k] for k in range(3))
  r = banded.inverse_coefficients(c, 10)
  inverse = sum(np.eye(10, k=-k) * r[k] for k in range(10))
  np.testing.assert_allclose(matrix @ inverse, np.eye(10), atol=1e-12)


def test_the_ledger_module_still_accounts_gaussian_rounds():
  assert privacy.epsilon(1.0, 1.0, 4, 1e-5) == pytest.approx(
      _gaussian_epsilon(1.0, 4))
