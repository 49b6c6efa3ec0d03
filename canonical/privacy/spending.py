"""What a run of a form spends: its releases (`form.privacy_releases`,
`canonical.core.privacy_releases`) and the run's sampling, as (epsilon,
delta) with dp-accounting. Several releases in one round see the same
clients: together one Gaussian mechanism of `combined_noise_multiplier`.
Each round is:

| sampling                          | event per round                              | neighbours     |
| poisson, rate q = k / n           | PoissonSampled(q, Gaussian(z))               | add/remove one |
| fixed, k >= n (every client)      | Gaussian(z)                                  | add/remove one |
| fixed, k < n                      | SampledWithoutReplacement(n, k, Gaussian(z/2)) | replace one    |

Replacing a client moves a clipped sum by up to twice the clip, hence z/2;
dp-accounting's PLD accountant has no sampling without replacement, so fixed
sampling of fewer than every client is accounted with RDP.
"""

import dp_accounting
from dp_accounting import pld
from dp_accounting import rdp

from canonical import errors
from canonical.core.privacy_releases import round_noise_multiplier
from canonical.privacy import accounting

NeighborRel = dp_accounting.NeighboringRelation


def dp_event(release):
  """TFF's `dp_event` of one release's round, before sampling."""
  if release.noise_multiplier == 0:
    return dp_accounting.NonPrivateDpEvent()
  return dp_accounting.GaussianDpEvent(release.noise_multiplier)


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
