"""What a run of a form spends: its releases (`form.privacy_releases`,
`canonical.core.privacy_releases`) and the run's sampling, as (epsilon,
delta) with dp-accounting. A run composes three kinds of events:

- Independent Gaussian releases of a round see the same clients: together
  one Gaussian mechanism of `combined_noise_multiplier` per round.
- Distributed DP (`distributed`): one zCDP event per round a client may be
  in; dp-accounting does not amplify it by sampling, so none is claimed.
- DP-FTRL's correlated noise (`correlated`): one Gaussian mechanism over
  the whole run, of noise multiplier z / (the run's sensitivity).

| sampling                  | Gaussian, each round                            | neighbours     |
| poisson, rate q = k / n   | PoissonSampled(q, Gaussian(z))                  | add/remove one |
| fixed, k >= n             | Gaussian(z)                                     | add/remove one |
| fixed, k < n              | SampledWithoutReplacement(n, k, Gaussian(z/2))  | replace one    |
| cyclic, g = n // k groups | Gaussian(z) in 1 round of g                     | add/remove one |

Replacing a client moves a sum by up to twice its sensitivity, hence z/2
(and twice the sensitivity for the other kinds). Only cyclic sampling bounds
how often a client comes back; under the others a correlated release is
accounted as if a client took part in every round. dp-accounting's PLD
accountant has neither sampling without replacement nor zCDP events, so
those runs are accounted with RDP.
"""

import math

import dp_accounting
from dp_accounting import pld
from dp_accounting import rdp

from canonical import errors
from canonical.core.participation import cyclic_groups
from canonical.core.privacy_releases import round_noise_multiplier
from canonical.privacy import accounting
from canonical.privacy import correlated
from canonical.privacy import distributed

NeighborRel = dp_accounting.NeighboringRelation


def dp_event(release):
  """TFF's `dp_event` of one Gaussian release's round, before sampling."""
  if release.noise_multiplier == 0:
    return dp_accounting.NonPrivateDpEvent()
  return dp_accounting.GaussianDpEvent(release.noise_multiplier)


class _Run:
  """How clients take part in a run: the neighbouring relation, the
  Gaussian round's event, and how many rounds one client may be in."""

  def __init__(self, sampling, clients_per_round, population):
    self.groups = None
    self.q = 1.0
    self.relation = NeighborRel.ADD_OR_REMOVE_ONE
    self.scale = 1.0  # Of a client's sensitivity, for the relation.
    if sampling == 'poisson':
      self.q = min(1.0, clients_per_round / population)
    elif sampling == 'cyclic':
      self.groups = cyclic_groups(population, clients_per_round)
    elif clients_per_round < population:
      self.relation = NeighborRel.REPLACE_ONE
      self.scale = 2.0
    self.sampling = sampling
    self.clients_per_round, self.population = clients_per_round, population

  def rounds_in(self, rounds):
    """The most rounds of `rounds` one client takes part in."""
    return rounds if self.groups is None else -(-rounds // self.groups)

  def gaussian_event(self, z):
    if z == 0:
      return dp_accounting.NonPrivateDpEvent()
    if self.sampling == 'poisson':
      return accounting.round_event(z, self.q).event
    if self.relation == NeighborRel.REPLACE_ONE:
      return dp_accounting.SampledWithoutReplacementDpEvent(
          self.population, self.clients_per_round,
          dp_accounting.GaussianDpEvent(z / 2))
    return dp_accounting.GaussianDpEvent(z)

  def event_choices(self, releases, rounds):
    """Events of `rounds` rounds, one per way to bound the distributed
    releases (the accountant keeps the smallest epsilon)."""
    events = []
    z = round_noise_multiplier(releases)
    if z is not None and rounds:
      events.append(dp_accounting.SelfComposedDpEvent(
          self.gaussian_event(z), self.rounds_in(rounds)))
    patterns = None
    for release in releases:
      if not release.correlated:
        continue
      if release.noise_multiplier == 0:
        events.append(dp_accounting.NonPrivateDpEvent())
        continue
      patterns = patterns or correlated.participations(rounds, self.groups)
      reach = self.scale * correlated.sensitivity(release, patterns)
      if reach:
        events.append(dp_accounting.GaussianDpEvent(
            release.noise_multiplier / reach))
    choices = [events]
    for release in releases:
      if release.mechanism.startswith('distributed') and rounds:
        choices = [
            chosen + [dp_accounting.SelfComposedDpEvent(
                one, self.rounds_in(rounds))]
            for chosen in choices
            for one in distributed.round_events(release, self.scale)]
    return [dp_accounting.ComposedDpEvent(c) for c in choices]


def check_run(releases, sampling, clients_per_round, population, delta,
              accountant):
  """An InvalidValueError, before any round, for a run that cannot be
  accounted; returns the checked delta."""
  delta = accounting.check_delta(delta)
  if accountant not in accounting.ACCOUNTANTS:
    raise errors.InvalidValueError(
        f'privacy_accountant must be one of {accounting.ACCOUNTANTS}, got '
        f'{accountant!r}.')
  run = _Run(sampling, clients_per_round, population)
  if accountant == 'pld' and run.relation == NeighborRel.REPLACE_ONE:
    raise errors.InvalidValueError(
        f'privacy_accountant pld cannot account fixed sampling of '
        f'{clients_per_round} of {population} clients (dp-accounting\'s PLD '
        'has no sampling without replacement); use sampling=\'poisson\' or '
        'the rdp accountant.')
  distributed_ones = [r.source for r in releases
                      if r.mechanism.startswith('distributed')]
  if accountant == 'pld' and distributed_ones:
    raise errors.InvalidValueError(
        f'privacy_accountant pld cannot account distributed DP '
        f'({", ".join(distributed_ones)}: dp-accounting\'s PLD has no zCDP '
        'events); use the rdp accountant.')
  return delta


def spent(releases, *, sampling, clients_per_round, population, rounds, delta,
          accountant='rdp'):
  """What `rounds` rounds of a form with these releases spend: a dict
  `epsilon`, `delta`, `accountant`, `noise_multiplier` (of the round's
  Gaussian releases, None without any), `sampling_probability`,
  `neighbours`, and `rounds_per_client` when sampling is cyclic."""
  run = _Run(sampling, clients_per_round, population)
  epsilon = 0.0
  if rounds:
    epsilon = math.inf
    for event in run.event_choices(releases, rounds):
      tracker = (rdp.RdpAccountant(neighboring_relation=run.relation)
                 if accountant == 'rdp' else pld.PLDAccountant(run.relation))
      tracker.compose(event)
      epsilon = min(epsilon, float(tracker.get_epsilon(delta)))
  report = {'epsilon': epsilon, 'delta': delta, 'accountant': accountant,
            'noise_multiplier': round_noise_multiplier(releases),
            'sampling_probability': (
                1 / run.groups if run.groups else
                run.q if sampling == 'poisson' else
                min(1.0, clients_per_round / population)),
            'neighbours': ('add or remove one client'
                           if run.relation == NeighborRel.ADD_OR_REMOVE_ONE
                           else 'replace one client')}
  if run.groups:
    report['rounds_per_client'] = run.rounds_in(rounds)
  return report
