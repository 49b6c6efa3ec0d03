"""TFF 0.87's `tff.analytics.differential_privacy`: the noise of the
analytic Gaussian mechanism (Balle and Wang, ICML 2018,
http://proceedings.mlr.press/v80/balle18a/balle18a.pdf)."""

import math

from canonical import errors


def _phi(t):
  """The standard normal CDF."""
  return 0.5 * (1.0 + math.erf(t / math.sqrt(2.0)))


def analytic_gauss_stddev(epsilon, delta, norm_bound, tol=1.0e-12):
  """The standard deviation of Gaussian noise that makes a sum of L2
  sensitivity `norm_bound` (epsilon, delta)-DP, found by bisection to
  within `tol` of `delta` (Algorithm 1 of Balle and Wang). `epsilon` in
  (0, 500), `delta` in (0, 1)."""
  where = 'analytic_gauss_stddev'
  for ok, what in ((0 < epsilon < 500, f'epsilon must be in (0, 500), got '
                    f'{epsilon}'),
                   (0 < delta < 1, f'delta must be in (0, 1), got {delta}'),
                   (norm_bound > 0, 'norm_bound must be positive, got '
                    f'{norm_bound}'),
                   (tol > 0, f'tol must be positive, got {tol}')):
    if not ok:
      raise errors.InvalidValueError(f'{where}: {what}.')

  def delta_above(s):  # B+_epsilon(s): delta of alpha = sqrt(1+s/2)-sqrt(s/2)
    return _phi(math.sqrt(epsilon * s)) - math.exp(epsilon) * _phi(
        -math.sqrt(epsilon * (s + 2.0)))

  def delta_below(s):  # B-_epsilon(s): delta of alpha = sqrt(1+s/2)+sqrt(s/2)
    return _phi(-math.sqrt(epsilon * s)) - math.exp(epsilon) * _phi(
        -math.sqrt(epsilon * (s + 2.0)))

  threshold = delta_above(0.0)
  if delta == threshold:
    alpha = 1.0
  else:
    if delta > threshold:
      delta_of, far_enough = delta_above, lambda s: delta_above(s) >= delta
      too_far = lambda s: delta_above(s) > delta
      alpha_of = lambda s: math.sqrt(1.0 + s / 2.0) - math.sqrt(s / 2.0)
    else:
      delta_of, far_enough = delta_below, lambda s: delta_below(s) <= delta
      too_far = lambda s: delta_below(s) < delta
      alpha_of = lambda s: math.sqrt(1.0 + s / 2.0) + math.sqrt(s / 2.0)
    low, high = 0.0, 1.0
    while not far_enough(high):  # Doubling until delta is bracketed.
      low, high = high, 2.0 * high
    middle = low + (high - low) / 2.0
    while abs(delta_of(middle) - delta) > tol:
      if too_far(middle):
        high = middle
      else:
        low = middle
      middle = low + (high - low) / 2.0
    alpha = alpha_of(middle)
  return alpha * norm_bound / math.sqrt(2.0 * epsilon)
