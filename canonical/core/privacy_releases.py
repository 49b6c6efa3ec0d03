"""What a form releases with differential privacy each round (`Release`).

A DP aggregator (`DifferentiallyPrivateFactory`, `DPMeanFactory`,
`DPSecureMeanFactory`, `BandedMatrixFactorizationFactory`,
`DistributedDpSumFactory`) notes its `Release`s while its `next` is traced:
a noised sum of clipped client records, its mechanism (independent
Gaussian, DP-FTRL's tree or banded noise, distributed discrete noise) and
its noise multiplier (stddev over one client's L2 contribution). The
compiler keeps the releases whose result the round uses, and
the form carries them (saved with it), so a runtime knows the privacy of any
form whatever built it (`canonical.privacy.spending` accounts a run).
Nothing here imports TensorFlow or dp-accounting: describing a form file
needs neither.
"""

import dataclasses
import math
import numbers

from canonical import errors


def combined_noise_multiplier(noise_multipliers):
  """The noise multiplier of several Gaussian sums released in the same round.

  Each entry is one sum's noise stddev divided by how much one client can
  change it (its clip; 1 for a count). A client is in all of them, so
  together they are one Gaussian mechanism of multiplier
  `(sum_i z_i**-2) ** -0.5`. Examples: L tensors each noised at z relative to
  its own clip give z / sqrt(L); an update at z plus the adaptive clip's
  count noised at stddev s give (z**-2 + s**-2) ** -0.5. A 0 entry (an
  un-noised release) makes the result 0: no privacy.
  """
  values = [check_noise_multiplier(z) for z in noise_multipliers]
  if not values:
    raise errors.InvalidValueError(
        'canonical.privacy: combined_noise_multiplier needs at least one '
        'noise multiplier.')
  if min(values) == 0:
    return 0.0
  return math.fsum(z**-2 for z in values)**-0.5


def remaining_noise_multiplier(total, other):
  """The multiplier a release may have so that, composed with one of
  multiplier `other` in the same round, the round's is `total` (the inverse
  of `combined_noise_multiplier`; needs `other > total`)."""
  return (total**-2 - other**-2)**-0.5


def check_noise_multiplier(noise_multiplier):
  """A finite number >= 0; 0 means no noise (epsilon is inf)."""
  if isinstance(noise_multiplier, bool) or not isinstance(
      noise_multiplier, numbers.Real):
    raise errors.InvalidValueError(
        'canonical.privacy: noise_multiplier must be a number, got '
        f'{noise_multiplier!r}.')
  value = float(noise_multiplier)
  if math.isnan(value):
    raise errors.InvalidValueError(
        'canonical.privacy: noise_multiplier must not be NaN.')
  if not 0 <= value < math.inf:
    raise errors.InvalidValueError(
        'canonical.privacy: noise_multiplier must be finite and >= 0 (0 means '
        f'no noise, epsilon inf), got {noise_multiplier!r}.')
  return value


# What each mechanism's `parameters` must hold (`coefficients`: banded only).
MECHANISMS = {
    'gaussian': (),
    'distributed_dgauss': ('local_stddev', 'l2_sensitivity', 'dimension',
                           'clients'),
    'distributed_skellam': ('local_stddev', 'l2_sensitivity',
                            'l1_sensitivity', 'dimension', 'clients'),
    'tree': ('restart_warmup', 'restart_frequency'),
    'banded': (),
}
# Mechanisms whose noise is correlated across rounds: a run is accounted as
# one Gaussian mechanism over all its rounds, not round by round.
CORRELATED = ('tree', 'banded')


@dataclasses.dataclass(frozen=True)
class Release:
  """One release of a round: `source` says which aggregator, `mechanism`
  how it is noised and `noise_multiplier` its noise stddev over one client's
  L2 contribution (for distributed DP, the central-equivalent one).

  | mechanism             | parameters / coefficients                       |
  | gaussian              | - (independent Gaussian noise each round)       |
  | distributed_dgauss,   | each client's discrete noise `local_stddev`,    |
  | distributed_skellam   | the `l2_sensitivity` (and `l1_sensitivity`) of  |
  |                       | one client in the same integer units,           |
  |                       | `dimension`, the `clients` whose noise sums     |
  | tree                  | DP-FTRL's tree over rounds, restarted after     |
  |                       | `restart_warmup` then every `restart_frequency` |
  |                       | rounds (0: never)                               |
  | banded                | banded Toeplitz DP-FTRL: `coefficients` c_0..   |
  |                       | c_(b-1) of the strategy matrix, unit column     |
  """
  source: str
  noise_multiplier: float
  mechanism: str = 'gaussian'
  parameters: dict = dataclasses.field(default_factory=dict)
  coefficients: tuple = ()

  def __post_init__(self):
    object.__setattr__(self, 'noise_multiplier',
                       check_noise_multiplier(self.noise_multiplier))
    where = f'canonical.privacy: release {self.source!r}'
    if self.mechanism not in MECHANISMS:
      raise errors.InvalidValueError(
          f'{where}: mechanism must be one of {", ".join(MECHANISMS)}, got '
          f'{self.mechanism!r}.')
    parameters = dict(self.parameters or {})
    needed = MECHANISMS[self.mechanism]
    if sorted(parameters) != sorted(needed):
      raise errors.InvalidValueError(
          f'{where}: a {self.mechanism} release needs parameters '
          f'{list(needed)}, got {sorted(parameters)}.')
    for name, value in parameters.items():
      if isinstance(value, bool) or not isinstance(value, numbers.Real) or (
          not 0 <= value < math.inf):
        raise errors.InvalidValueError(
            f'{where}: parameter {name} must be a finite number >= 0, got '
            f'{value!r}.')
      parameters[name] = float(value)
    object.__setattr__(self, 'parameters', parameters)
    coefficients = tuple(float(c) for c in self.coefficients)
    if (self.mechanism == 'banded') != bool(coefficients) or not all(
        math.isfinite(c) for c in coefficients):
      raise errors.InvalidValueError(
          f'{where}: finite coefficients are for banded releases only, and a '
          f'banded release needs them; got {self.coefficients!r}.')
    object.__setattr__(self, 'coefficients', coefficients)

  @classmethod
  def of_message(cls, message):
    """The release a `fedcanon.PrivacyRelease` message says."""
    return cls(message.source, message.noise_multiplier,
               message.mechanism or 'gaussian', dict(message.parameters),
               tuple(message.coefficients))

  def __hash__(self):
    return hash((self.source, self.noise_multiplier, self.mechanism,
                 tuple(sorted(self.parameters.items())), self.coefficients))

  @property
  def correlated(self):
    return self.mechanism in CORRELATED

  def describe(self):
    mechanism = ('Gaussian' if self.mechanism == 'gaussian'
                 else self.mechanism.replace('_', ' '))
    text = (f'{self.source}: {mechanism}, noise multiplier '
            f'{self.noise_multiplier:g}')
    if self.mechanism.startswith('distributed'):
      text += (f' ({self.parameters["clients"]:g} clients, local stddev '
               f'{self.parameters["local_stddev"]:g})')
    elif self.mechanism == 'tree' and self.parameters['restart_frequency']:
      text += (f', restarted after {self.parameters["restart_warmup"]:g} '
               f'then every {self.parameters["restart_frequency"]:g} rounds')
    elif self.mechanism == 'banded':
      text += f', {len(self.coefficients)} bands'
    return text


def round_noise_multiplier(releases):
  """One round's independent Gaussian releases as one Gaussian mechanism's
  multiplier (None when it has none)."""
  gaussian = [r.noise_multiplier for r in releases
              if r.mechanism == 'gaussian']
  return combined_noise_multiplier(gaussian) if gaussian else None
