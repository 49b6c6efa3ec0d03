"""Privacy accounting of DP-FedAvg rounds (canonical.privacy) against dp_accounting."""

import json
import math

import dp_accounting
import pytest
from dp_accounting import pld
from dp_accounting import rdp

from canonical import privacy

DELTA = 1e-5


def _independent_epsilon(z, q, rounds, delta, accountant=rdp.RdpAccountant):
  """The same number computed directly with dp_accounting's own events."""
  event = dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)),
      rounds)
  tracker = accountant()
  tracker.compose(event)
  return tracker.get_epsilon(delta)


@pytest.mark.parametrize('z, q, rounds', [
    (1.1, 0.01, 1000), (1.0, 1.0, 1), (0.8, 0.05, 300), (1.3, 0.03, 1500)])
def test_epsilon_matches_dp_accounting(z, q, rounds):
  assert privacy.epsilon(z, q, rounds, DELTA) == pytest.approx(
      _independent_epsilon(z, q, rounds, DELTA), rel=1e-12)


def test_epsilon_with_pld_matches_dp_accounting_and_is_tighter():
  z, q, rounds = 1.1, 0.01, 1000
  with_pld = privacy.epsilon(z, q, rounds, DELTA, accountant='pld')
  assert with_pld == pytest.approx(
      _independent_epsilon(z, q, rounds, DELTA, pld.PLDAccountant), rel=1e-9)
  assert with_pld < privacy.epsilon(z, q, rounds, DELTA)


def test_epsilon_of_one_full_batch_gaussian_round_is_the_known_value():
  # The Gaussian mechanism, z = 1, no sampling: RDP alpha / 2 per order.
  assert privacy.epsilon(1.0, 1.0, 1, DELTA) == pytest.approx(4.7285, abs=1e-4)


def test_more_rounds_cost_more_and_more_noise_costs_less():
  by_rounds = [privacy.epsilon(1.0, 0.02, t, DELTA) for t in (1, 10, 100, 1000)]
  assert by_rounds == sorted(by_rounds) and len(set(by_rounds)) == 4
  by_noise = [privacy.epsilon(z, 0.02, 500, DELTA)
              for z in (0.7, 1.0, 1.5, 3.0)]
  assert by_noise == sorted(by_noise, reverse=True)
  assert len(set(by_noise)) == 4
  by_sampling = [privacy.epsilon(1.0, q, 500, DELTA)
                 for q in (0.001, 0.01, 0.1)]
  assert by_sampling == sorted(by_sampling)


def test_no_rounds_cost_nothing_and_no_noise_costs_everything():
  assert privacy.epsilon(1.0, 0.1, 0, DELTA) == 0.0
  assert privacy.epsilon(0, 0.1, 1, DELTA) == math.inf
  assert privacy.epsilon(0.0, 0.1, 5, DELTA, accountant='pld') == math.inf


@pytest.mark.parametrize('target', [1.0, 8.0])
def test_rounds_within_budget_is_the_largest_that_fits(target):
  z, q = 1.1, 0.01
  rounds = privacy.rounds_within_budget(z, q, target, DELTA)
  assert rounds > 0
  assert _independent_epsilon(z, q, rounds, DELTA) <= target
  assert _independent_epsilon(z, q, rounds + 1, DELTA) > target


def test_rounds_within_budget_is_zero_when_one_round_is_too_many():
  assert privacy.rounds_within_budget(0.5, 1.0, 1.0, DELTA) == 0
  assert privacy.rounds_within_budget(0.0, 0.01, 100.0, DELTA) == 0


def test_check_plan_returns_epsilon_or_refuses_naming_the_numbers():
  spent = privacy.check_plan(1.1, 0.01, 1000, DELTA, target_epsilon=2.0)
  assert spent == pytest.approx(privacy.epsilon(1.1, 0.01, 1000, DELTA))
  fit = privacy.rounds_within_budget(1.1, 0.01, 1.0, DELTA)
  with pytest.raises(ValueError) as error:
    privacy.check_plan(1.1, 0.01, 1000, DELTA, target_epsilon=1.0)
  message = str(error.value)
  for number in ('1000 rounds', 'noise multiplier 1.1', 'probability 0.01',
                 f'epsilon {spent:.4g}', 'delta 1e-05', 'target 1',
                 f'at most {fit} rounds'):
    assert number in message, (number, message)


def test_combined_noise_multiplier():
  assert privacy.combined_noise_multiplier([1.0]) == 1.0
  # L tensors, each noised at z relative to its own clip: z / sqrt(L).
  assert privacy.combined_noise_multiplier([2.0] * 4) == pytest.approx(1.0)
  # Andrew et al.: the update at z and the count at stddev s.
  assert privacy.combined_noise_multiplier([1.0, 20.0]) == pytest.approx(
      (1 + 1 / 400)**-0.5)
  assert privacy.combined_noise_multiplier([1.0, 0.0]) == 0.0
  with pytest.raises(ValueError, match='at least one'):
    privacy.combined_noise_multiplier([])


@pytest.mark.parametrize('args, match', [
    ((-0.1, 0.1, 1, DELTA), 'noise_multiplier must be finite and >= 0'),
    ((math.inf, 0.1, 1, DELTA), 'noise_multiplier must be finite'),
    ((math.nan, 0.1, 1, DELTA), 'noise_multiplier must not be NaN'),
    (('1.0', 0.1, 1, DELTA), 'noise_multiplier must be a number'),
    ((1.0, 0.0, 1, DELTA), r'sampling_probability must be in \(0, 1\]'),
    ((1.0, 1.5, 1, DELTA), r'sampling_probability must be in \(0, 1\]'),
    ((1.0, 0.1, -1, DELTA), 'rounds must be an int >= 0'),
    ((1.0, 0.1, 2.5, DELTA), 'rounds must be an int >= 0'),
    ((1.0, 0.1, True, DELTA), 'rounds must be an int >= 0'),
    ((1.0, 0.1, 1, 0.0), r'delta must be in \(0, 1\)'),
    ((1.0, 0.1, 1, 1.0), r'delta must be in \(0, 1\)'),
])
def test_epsilon_refuses_bad_inputs(args, match):
  with pytest.raises(ValueError, match=f'canonical.privacy: {match}'):
    privacy.epsilon(*args)


def test_other_entry_points_refuse_bad_inputs():
  with pytest.raises(ValueError, match='accountant must be one of'):
    privacy.epsilon(1.0, 0.1, 1, DELTA, accountant='moments')
  with pytest.raises(ValueError, match='target_epsilon must be finite and > 0'):
    privacy.rounds_within_budget(1.0, 0.1, 0.0, DELTA)
  with pytest.raises(ValueError, match='target_epsilon'):
    privacy.check_plan(1.0, 0.1, 1, DELTA, target_epsilon=math.inf)
  with pytest.raises(ValueError, match='delta'):
    privacy.PrivacyLedger(1.0, 0.1, delta=2.0)


def test_ledger_counts_rounds_like_the_closed_form():
  ledger = privacy.PrivacyLedger(1.1, 0.01, DELTA)
  assert ledger.spent() == (0.0, DELTA) and ledger.rounds == 0
  for _ in range(10):
    epsilon, delta = ledger.record_round()
  assert ledger.rounds == 10 and delta == DELTA
  assert epsilon == pytest.approx(privacy.epsilon(1.1, 0.01, 10, DELTA),
                                  rel=1e-12)
  assert ledger.epsilon_after(90) == pytest.approx(
      privacy.epsilon(1.1, 0.01, 100, DELTA), rel=1e-12)
  assert ledger.rounds == 10  # epsilon_after records nothing.


def test_ledger_composes_rounds_of_different_settings():
  ledger = privacy.PrivacyLedger(1.0, 0.01, DELTA)
  for _ in range(3):
    ledger.record_round()
  ledger.record_round(noise_multiplier=2.0, sampling_probability=0.05)
  expected = dp_accounting.ComposedDpEvent([
      dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(
          0.01, dp_accounting.GaussianDpEvent(1.0)), 3),
      dp_accounting.PoissonSampledDpEvent(
          0.05, dp_accounting.GaussianDpEvent(2.0))])
  tracker = rdp.RdpAccountant()
  tracker.compose(expected)
  assert ledger.epsilon == pytest.approx(tracker.get_epsilon(DELTA), rel=1e-12)
  assert ledger.rounds == 4


def test_ledger_refuses_the_round_that_would_exceed_its_target():
  z, q, target = 1.0, 0.1, 1.5
  fit = privacy.rounds_within_budget(z, q, target, DELTA)
  ledger = privacy.PrivacyLedger(z, q, DELTA, target_epsilon=target)
  for _ in range(fit):
    ledger.check_next_round()
    ledger.record_round()
  before = ledger.spent()
  with pytest.raises(ValueError, match=rf'round {fit + 1} \(noise multiplier '
                     rf'1, sampling probability 0.1\) would take epsilon from '
                     rf'.* above the target 1.5'):
    ledger.check_next_round()
  with pytest.raises(ValueError, match='above the target'):
    ledger.record_round()
  assert ledger.spent() == before and ledger.rounds == fit


def test_ledger_survives_a_json_round_trip():
  ledger = privacy.PrivacyLedger(1.0, 0.02, DELTA, target_epsilon=10.0)
  for _ in range(7):
    ledger.record_round()
  ledger.record_round(noise_multiplier=1.5)
  restored = privacy.PrivacyLedger.from_dict(
      json.loads(json.dumps(ledger.to_dict())))
  assert restored.spent() == ledger.spent()
  assert restored.rounds == 8 and restored.target_epsilon == 10.0
  assert restored.record_round() == ledger.record_round()
