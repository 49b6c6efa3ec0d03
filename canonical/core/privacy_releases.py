"""What a form releases with differential privacy each round (`Release`).

A DP aggregator (`DifferentiallyPrivateFactory`, `DPMeanFactory`,
`DPSecureMeanFactory`) notes one `Release` while its `next` is traced: a
Gaussian sum of clipped client records, with the round's noise multiplier
(stddev over one client's L2 contribution, adaptive clipping's count
included). The compiler keeps the releases whose result the round uses, and
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


@dataclasses.dataclass(frozen=True)
class Release:
  """One Gaussian release of a round: `source` says which aggregator, and
  `noise_multiplier` its stddev over one client's L2 contribution."""
  source: str
  noise_multiplier: float

  def __post_init__(self):
    object.__setattr__(self, 'noise_multiplier',
                       check_noise_multiplier(self.noise_multiplier))

  def describe(self):
    return f'{self.source}: Gaussian, noise multiplier {self.noise_multiplier:g}'


def round_noise_multiplier(releases):
  """One round's releases as one Gaussian mechanism's multiplier."""
  return combined_noise_multiplier([r.noise_multiplier for r in releases])
