"""Privacy accounting for DP-FedAvg: (epsilon, delta) of rounds of noisy averaging.

A round samples each client independently with probability q (Poisson
sampling), clips every sampled client's update and adds Gaussian noise of
`noise_multiplier` times the clip to the sum (`encoders.stages.clipping`).
That is the Poisson-subsampled Gaussian mechanism, one event per round, under
add-or-remove-one-client adjacency: user-level DP when a client is a user.
Google's `dp_accounting` composes the rounds, with the RDP accountant (fast)
or the PLD accountant (tighter, ~10x slower).

The guarantee holds only if the runner really samples that way (a fixed
number of clients per round is another mechanism), every client's
contribution to the noised sum is bounded by the clip (weights included),
and the noise seed is secret. Several Gaussian sums released in one round (a
per-tensor noise, the adaptive clip's noisy count) are one mechanism of
`combined_noise_multiplier`.
"""

import math
import numbers

import dp_accounting
from dp_accounting import pld
from dp_accounting import rdp

from canonical import errors
from canonical.core.privacy_releases import check_noise_multiplier
from canonical.core.privacy_releases import combined_noise_multiplier  # pylint: disable=unused-import

ACCOUNTANTS = ('rdp', 'pld')

# rounds_within_budget searches no further: far beyond any training run.
_MAX_ROUNDS = 2**40


def _fail(message):
  raise errors.InvalidValueError(f'canonical.privacy: {message}')


def _number(name, value):
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    _fail(f'{name} must be a number, got {value!r}.')
  value = float(value)
  if math.isnan(value):
    _fail(f'{name} must not be NaN.')
  return value


def check_sampling_probability(sampling_probability):
  value = _number('sampling_probability', sampling_probability)
  if not 0 < value <= 1:
    _fail('sampling_probability must be in (0, 1], got '
          f'{sampling_probability!r}.')
  return value


def check_delta(delta):
  value = _number('delta', delta)
  if not 0 < value < 1:
    _fail(f'delta must be in (0, 1), got {delta!r}.')
  return value


def check_target_epsilon(target_epsilon):
  value = _number('target_epsilon', target_epsilon)
  if not 0 < value < math.inf:
    _fail(f'target_epsilon must be finite and > 0, got {target_epsilon!r}.')
  return value


def check_rounds(rounds):
  if (isinstance(rounds, bool) or not isinstance(rounds, numbers.Integral)
      or rounds < 0):
    _fail(f'rounds must be an int >= 0, got {rounds!r}.')
  return int(rounds)


def _check_accountant(accountant):
  if accountant not in ACCOUNTANTS:
    _fail(f'accountant must be one of {ACCOUNTANTS}, got {accountant!r}.')
  return accountant


def round_event(noise_multiplier, sampling_probability, rounds=1):
  """The `dp_accounting.DpEvent` of `rounds` rounds (no validation)."""
  if noise_multiplier == 0:
    one = dp_accounting.NonPrivateDpEvent()
  else:
    one = dp_accounting.PoissonSampledDpEvent(
        sampling_probability, dp_accounting.GaussianDpEvent(noise_multiplier))
  return dp_accounting.SelfComposedDpEvent(one, rounds)


def _epsilon_of(event, delta, accountant):
  tracker = (rdp.RdpAccountant() if accountant == 'rdp'
             else pld.PLDAccountant())
  tracker.compose(event)
  return float(tracker.get_epsilon(delta))


def epsilon(noise_multiplier, sampling_probability, rounds, delta,
            accountant='rdp'):
  """Epsilon at `delta` after `rounds` rounds; 0 for none, inf without noise."""
  noise_multiplier = check_noise_multiplier(noise_multiplier)
  sampling_probability = check_sampling_probability(sampling_probability)
  rounds = check_rounds(rounds)
  delta = check_delta(delta)
  _check_accountant(accountant)
  if rounds == 0:
    return 0.0
  return _epsilon_of(round_event(noise_multiplier, sampling_probability,
                                 rounds), delta, accountant)


def rounds_within_budget(noise_multiplier, sampling_probability,
                         target_epsilon, delta, accountant='rdp'):
  """The most rounds whose epsilon at `delta` is at most `target_epsilon`.

  0 when even one round costs more (always, without noise). Epsilon grows
  with rounds, so a doubling then bisecting search finds it in about
  2 * log2(rounds) evaluations (~30 ms each with RDP, ~0.5 s with PLD).
  """
  noise_multiplier = check_noise_multiplier(noise_multiplier)
  sampling_probability = check_sampling_probability(sampling_probability)
  target_epsilon = check_target_epsilon(target_epsilon)
  delta = check_delta(delta)
  _check_accountant(accountant)

  def fits(rounds):
    return epsilon(noise_multiplier, sampling_probability, rounds, delta,
                   accountant) <= target_epsilon

  if noise_multiplier == 0 or not fits(1):
    return 0
  within, beyond = 1, 2
  while fits(beyond):
    within, beyond = beyond, 2 * beyond
    if beyond > _MAX_ROUNDS:
      return within
  while beyond - within > 1:
    middle = (within + beyond) // 2
    if fits(middle):
      within = middle
    else:
      beyond = middle
  return within


def check_plan(noise_multiplier, sampling_probability, rounds, delta,
               target_epsilon, accountant='rdp'):
  """The plan's epsilon; over the target, a ValueError naming the numbers."""
  target_epsilon = check_target_epsilon(target_epsilon)
  spent = epsilon(noise_multiplier, sampling_probability, rounds, delta,
                  accountant)
  if spent > target_epsilon:
    fit = rounds_within_budget(noise_multiplier, sampling_probability,
                               target_epsilon, delta, accountant)
    _fail(f'the plan exceeds its privacy budget: {rounds} rounds at noise '
          f'multiplier {noise_multiplier:g} and sampling probability '
          f'{sampling_probability:g} give epsilon {spent:.4g} at delta '
          f'{delta:g} ({accountant}), above the target {target_epsilon:g}; '
          f'at most {fit} rounds fit.')
  return spent


class PrivacyLedger:
  """The privacy spent so far by a run: updated once per round by its runner.

  `record_round()` after each round (with that round's noise multiplier and
  sampling probability when they change), `spent()` for (epsilon, delta).
  With a `target_epsilon`, `check_next_round()` before a round and
  `record_round()` refuse, with a ValueError naming the numbers, a round that
  would take epsilon over the target. `to_dict()` / `from_dict()` keep the
  ledger in a run's state, so a resumed run goes on counting.
  """

  def __init__(self, noise_multiplier, sampling_probability, delta,
               target_epsilon=None, accountant='rdp'):
    self._noise_multiplier = check_noise_multiplier(noise_multiplier)
    self._sampling_probability = check_sampling_probability(
        sampling_probability)
    self._delta = check_delta(delta)
    self._target_epsilon = (None if target_epsilon is None else
                            check_target_epsilon(target_epsilon))
    self._accountant = _check_accountant(accountant)
    # [noise multiplier, sampling probability, rounds] runs, in order.
    self._history = []
    self._epsilon = 0.0

  @property
  def rounds(self):
    return sum(count for _, _, count in self._history)

  @property
  def delta(self):
    return self._delta

  @property
  def target_epsilon(self):
    return self._target_epsilon

  @property
  def epsilon(self):
    return self._epsilon

  def spent(self):
    """`(epsilon, delta)` of the rounds recorded so far."""
    return self._epsilon, self._delta

  def epsilon_after(self, rounds=1, noise_multiplier=None,
                    sampling_probability=None):
    """Epsilon if `rounds` more rounds were recorded (nothing is recorded)."""
    history = self._extended(check_rounds(rounds), noise_multiplier,
                             sampling_probability)
    return self._epsilon_of(history)

  def check_next_round(self, noise_multiplier=None, sampling_probability=None):
    """Epsilon after one more round; a ValueError if that passes the target."""
    after = self.epsilon_after(1, noise_multiplier, sampling_probability)
    self._check_target(after, noise_multiplier, sampling_probability)
    return after

  def record_round(self, noise_multiplier=None, sampling_probability=None):
    """Adds one round (refused over the target); returns `(epsilon, delta)`."""
    history = self._extended(1, noise_multiplier, sampling_probability)
    after = self._epsilon_of(history)
    self._check_target(after, noise_multiplier, sampling_probability)
    self._history, self._epsilon = history, after
    return self.spent()

  def to_dict(self):
    """JSON-ready: what `from_dict` needs to continue the ledger."""
    return {
        'noise_multiplier': self._noise_multiplier,
        'sampling_probability': self._sampling_probability,
        'delta': self._delta,
        'target_epsilon': self._target_epsilon,
        'accountant': self._accountant,
        'history': [list(run) for run in self._history],
    }

  @classmethod
  def from_dict(cls, data):
    ledger = cls(data['noise_multiplier'], data['sampling_probability'],
                 data['delta'], data['target_epsilon'], data['accountant'])
    history = []
    for z, q, count in data['history']:
      history.append([check_noise_multiplier(z), check_sampling_probability(q),
                      check_rounds(count)])
    ledger._history = history
    ledger._epsilon = ledger._epsilon_of(history)
    return ledger

  def __repr__(self):
    return (f'PrivacyLedger(rounds={self.rounds}, epsilon={self._epsilon:.4g}, '
            f'delta={self._delta:g}, target_epsilon={self._target_epsilon})')

  def _extended(self, rounds, noise_multiplier, sampling_probability):
    z = (self._noise_multiplier if noise_multiplier is None
         else check_noise_multiplier(noise_multiplier))
    q = (self._sampling_probability if sampling_probability is None
         else check_sampling_probability(sampling_probability))
    history = [list(run) for run in self._history]
    if rounds == 0:
      return history
    if history and history[-1][:2] == [z, q]:
      history[-1][2] += rounds
    else:
      history.append([z, q, rounds])
    return history

  def _epsilon_of(self, history):
    if not history:
      return 0.0
    event = dp_accounting.ComposedDpEvent(
        [round_event(z, q, count) for z, q, count in history])
    return _epsilon_of(event, self._delta, self._accountant)

  def _check_target(self, after, noise_multiplier, sampling_probability):
    if self._target_epsilon is None or after <= self._target_epsilon:
      return
    z = (self._noise_multiplier if noise_multiplier is None
         else noise_multiplier)
    q = (self._sampling_probability if sampling_probability is None
         else sampling_probability)
    _fail(f'round {self.rounds + 1} (noise multiplier {z:g}, sampling '
          f'probability {q:g}) would take epsilon from {self._epsilon:.4g} to '
          f'{after:.4g} at delta {self._delta:g}, above the target '
          f'{self._target_epsilon:g}.')
