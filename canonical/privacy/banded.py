"""Strategies for banded matrix-factorization DP-FTRL: the coefficients
c_0..c_(b-1) of a lower-triangular banded Toeplitz matrix C (unit column
norm), for a run that releases C x + z and decodes x + C^-1 z.

The error a run's model feels is that of the noisy prefix sums of its
rounds' updates, |A C^-1|_F^2 (A: the prefix-sum matrix) times the squared
sensitivity |c|^2 = 1. C^-1 is Toeplitz with coefficients r (C r = e_0),
so |A C^-1|_F^2 = sum_n (T - n) R_n^2 with R the prefix sums of r: O(T b).

- `sqrt`: the banded square root of A (Kalinin and Lampert 2024): the
  first b coefficients of A^(1/2), binom(2k, k) / 4^k, normalized.
- `optimized`: those b coefficients minimizing the prefix-sum error over
  `rounds` (Choquette-Choo et al. 2023's objective on banded Toeplitz
  matrices, as McKenna 2024 scales it), from `sqrt`, kept >= 0 so that the
  accounting's bound is exact for full participation.
"""

import math

import numpy as np

STRATEGIES = ('optimized', 'sqrt')


def inverse_coefficients(coefficients, rounds):
  """The first `rounds` coefficients of C^-1."""
  c = np.asarray(coefficients, np.float64)
  r = np.zeros(rounds)
  for n in range(rounds):
    reach = min(n, len(c) - 1)
    tail = np.dot(c[1:reach + 1], r[n - reach:n][::-1]) if reach else 0.0
    r[n] = ((1.0 if n == 0 else 0.0) - tail) / c[0]
  return r


def prefix_error(coefficients, rounds):
  """|A C^-1|_F^2 / T times |c|^2: the mean squared error per round of the
  noisy prefix sums, per unit of noise variance and sensitivity."""
  c = np.asarray(coefficients, np.float64)
  with np.errstate(over='ignore', invalid='ignore'):
    prefix = np.cumsum(inverse_coefficients(c, rounds))
    weights = rounds - np.arange(rounds)
    error = float(np.dot(weights, prefix**2)) * float(np.dot(c, c)) / rounds
  # C^-1 grows without bound when C's polynomial has a root in the disc.
  return error if math.isfinite(error) else 1e300


def sqrt_coefficients(bands):
  c = np.array([math.comb(2 * k, k) / 4.0**k for k in range(bands)])
  return c / np.linalg.norm(c)


def optimized_coefficients(bands, rounds):
  from scipy import optimize  # pylint: disable=g-import-not-at-top  # Only here: slow to import.
  start = sqrt_coefficients(bands)
  if bands == 1:
    return start
  # log-error keeps the scale of the search sane for long runs.
  fit = optimize.minimize(
      lambda c: math.log(prefix_error(c, rounds)), start, method='L-BFGS-B',
      bounds=[(1e-3, None)] + [(0.0, None)] * (bands - 1),
      options={'maxiter': 200})
  best = fit.x if prefix_error(fit.x, rounds) < prefix_error(
      start, rounds) else start
  return best / np.linalg.norm(best)


def coefficients(strategy, bands, rounds):
  if strategy == 'sqrt':
    return sqrt_coefficients(bands)
  return optimized_coefficients(bands, rounds)
