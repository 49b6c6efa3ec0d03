"""What a form releases with differential privacy, and what a run of it spends.

A DP aggregator (`DifferentiallyPrivateFactory`, `DPMeanFactory`,
`DPSecureMeanFactory`) notes, while its `next` is traced, one `Release`: a
Gaussian sum of clipped client records, with the round's noise multiplier
(stddev over one client's L2 contribution, adaptive clipping's count
included). The compiler keeps the releases whose result the round uses, and
the form carries them (saved with it), so a runtime knows the privacy of any
form whatever built it. Several releases in one round see the same clients:
together one Gaussian mechanism of `combined_noise_multiplier`.

`spent` turns a form's releases and a run's sampling into (epsilon, delta)
with dp-accounting:

| sampling                          | event per round                              | neighbours     |
| poisson, rate q = k / n           | PoissonSampled(q, Gaussian(z))               | add/remove one |
| fixed, k >= n (every client)      | Gaussian(z)                                  | add/remove one |
| fixed, k < n                      | SampledWithoutReplacement(n, k, Gaussian(z/2)) | replace one    |

Replacing a client moves a clipped sum by up to twice the clip, hence z/2;
dp-accounting's PLD accountant has no sampling without replacement, so fixed
sampling of fewer than every client is accounted with RDP.
"""

import dataclasses

import dp_accounting
from dp_accounting import pld
from dp_accounting import rdp

from canonical import errors
from canonical.privacy import accounting

NeighborRel = dp_accounting.NeighboringRelation


@dataclasses.dataclass(frozen=True)
class Release:
  """One Gaussian release of a round: `source` says which aggregator, and
  `noise_multiplier` its stddev over one client's L2 contribution."""
  source: str
  noise_multiplier: float

  def __post_init__(self):
    object.__setattr__(self, 'noise_multiplier',
                       accounting.check_noise_multiplier(self.noise_multiplier))

  def dp_event(self):
    """TFF's `dp_event` of one round without sampling."""
    if self.noise_multiplier == 0:
      return dp_accounting.NonPrivateDpEvent()
    return dp_accounting.GaussianDpEvent(self.noise_multiplier)

  def describe(self):
    return f'{self.source}: Gaussian, noise multiplier {self.noise_multiplier:g}'


def round_noise_multiplier(releases):
  """One round's releases as one Gaussian mechanism's multiplier."""
  return accounting.combined_noise_multiplier(
      [r.noise_multiplier for r in releases])


def _round_event(z, sampling, clients_per_round, population):
  """(one round's DpEvent, its neighbouring relation, sampling rate)."""
  if sampling == 'poisson':
    q = min(1.0, clients_per_round / population)
    return (accounting.round_event(z, q).event, NeighborRel.ADD_OR_REMOVE_ONE,
            q)
  if clients_per_round >= population or z == 0:
    return (accounting.round_event(z, 1.0).event,
            NeighborRel.ADD_OR_REMOVE_ONE, 1.0)
  return (dp_accounting.SampledWithoutReplacementDpEvent(
      population, clients_per_round, dp_accounting.GaussianDpEvent(z / 2)),
          NeighborRel.REPLACE_ONE, clients_per_round / population)


def check_run(releases, sampling, clients_per_round, population, delta,
              accountant):
  """An InvalidValueError, before any round, for a run that cannot be
  accounted; returns the checked delta."""
  delta = accounting.check_delta(delta)
  if accountant not in accounting.ACCOUNTANTS:
    raise errors.InvalidValueError(
        f'privacy_accountant must be one of {accounting.ACCOUNTANTS}, got '
        f'{accountant!r}.')
  _, relation, _ = _round_event(round_noise_multiplier(releases), sampling,
                                clients_per_round, population)
  if accountant == 'pld' and relation == NeighborRel.REPLACE_ONE:
    raise errors.InvalidValueError(
        f'privacy_accountant pld cannot account fixed sampling of '
        f'{clients_per_round} of {population} clients (dp-accounting\'s PLD '
        'has no sampling without replacement); use sampling=\'poisson\' or '
        'the rdp accountant.')
  return delta


def spent(releases, *, sampling, clients_per_round, population, rounds, delta,
          accountant='rdp'):
  """What `rounds` rounds of a form with these releases spend: a dict
  `epsilon`, `delta`, `accountant`, `noise_multiplier`,
  `sampling_probability`, `neighbours`."""
  z = round_noise_multiplier(releases)
  one, relation, q = _round_event(z, sampling, clients_per_round, population)
  epsilon = 0.0
  if rounds:
    tracker = (rdp.RdpAccountant(neighboring_relation=relation)
               if accountant == 'rdp' else pld.PLDAccountant(relation))
    tracker.compose(one, rounds)
    epsilon = float(tracker.get_epsilon(delta))
  return {'epsilon': epsilon, 'delta': delta, 'accountant': accountant,
          'noise_multiplier': z, 'sampling_probability': q,
          'neighbours': ('add or remove one client'
                         if relation == NeighborRel.ADD_OR_REMOVE_ONE else
                         'replace one client')}
