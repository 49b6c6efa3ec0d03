"""Shamir secret sharing over the prime field GF(PRIME), on Python ints.

A secret s is the constant term of a random polynomial f of degree t - 1; the
share at x != 0 is (x, f(x)). Any t shares give f(0) = s by Lagrange
interpolation; t - 1 shares are uniformly distributed whatever s is, so they
tell nothing about it. There is no verification: a wrong share silently gives
a wrong secret (this is the semi-honest setting).
"""

import functools
from typing import NamedTuple

from canonical import errors
from canonical.secagg import randomness

# The smallest prime above 2**256, so that any 256-bit secret (an X25519 private
# key, a 32-byte seed) is a field element.
PRIME = 2**256 + 297
FIELD_BITS = (PRIME - 1).bit_length()
FIELD_BYTES = (FIELD_BITS + 7) // 8


class Share(NamedTuple):
  x: int
  y: int


def evaluate(coefficients, x, prime=PRIME):
  """f(x) mod prime for f = sum(c_i x^i), by Horner's rule (at a share
  point, 1 <= x <= n, on exact integers reduced once: t - 1 fewer
  reductions of numbers only ~t log2(n) bits longer)."""
  reduce_each_step = not 0 <= x < 2**32
  result = 0
  for coefficient in reversed(coefficients):
    result = result * x + coefficient
    if reduce_each_step:
      result %= prime
  return result % prime


def random_polynomial(secret, threshold, rng, prime=PRIME):
  """[secret, c_1, ..., c_{t-1}]: the polynomial `split` shares `secret` by;
  a party that keeps `rng`'s seed can redraw it and evaluate its own share."""
  if isinstance(threshold, bool) or not isinstance(threshold, int):
    raise errors.InvalidTypeError(f'threshold {threshold!r} is not an int')
  if threshold < 1:
    raise errors.InvalidValueError(
        f'threshold {threshold} is out of range: it must be >= 1')
  if not 0 <= secret < prime:
    raise errors.InvalidValueError('secret is not an element of the field')
  return [secret] + [
      randomness.random_below(rng, prime) for _ in range(threshold - 1)]


def split(secret, xs, threshold, rng, prime=PRIME):
  """Shares of `secret` at the points `xs`; any `threshold` recover it."""
  xs = list(xs)
  _check_points(xs, prime)
  if (isinstance(threshold, int) and not isinstance(threshold, bool)
      and not 1 <= threshold <= len(xs)):
    raise errors.InvalidValueError(
        f'threshold {threshold} is out of range [1, {len(xs)}] for {len(xs)} '
        'share(s)')
  coefficients = random_polynomial(secret, threshold, rng, prime)
  return [Share(x, evaluate(coefficients, x, prime)) for x in xs]


def reconstruct(shares, prime=PRIME):
  """f(0) from shares of a polynomial of degree < len(shares)."""
  shares = list(shares)
  if not shares:
    raise errors.InvalidValueError('no shares to reconstruct from')
  xs = tuple(share.x for share in shares)
  _check_points(xs, prime)
  weights = lagrange_weights_at_zero(xs, prime)
  return sum(w * share.y for w, share in zip(weights, shares)) % prime


@functools.lru_cache(maxsize=64)
def lagrange_weights_at_zero(xs, prime=PRIME):
  """w_i with f(0) = sum(w_i f(x_i)): prod_{j != i} x_j / (x_j - x_i).

  Cached: a server reconstructs every client's secrets from the same
  responders, so the weights are computed once per round.
  """
  weights = []
  for i, xi in enumerate(xs):
    numerator, denominator = 1, 1
    for j, xj in enumerate(xs):
      if j != i:
        numerator = numerator * xj % prime
        denominator = denominator * (xj - xi) % prime
    weights.append(numerator * pow(denominator, -1, prime) % prime)
  return tuple(weights)


def _check_points(xs, prime):
  if len(set(xs)) != len(xs):
    raise errors.InvalidValueError(f'share points {list(xs)} are not distinct')
  for x in xs:
    if isinstance(x, bool) or not isinstance(x, int) or not 0 < x < prime:
      raise errors.InvalidValueError(
          f'share point {x!r} is not a nonzero field element')
