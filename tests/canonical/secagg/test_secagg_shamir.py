"""Shamir sharing (canonical/secagg/shamir.py) and the randomness it uses."""

import itertools

import pytest

from canonical.secagg import randomness
from canonical.secagg import shamir


def test_prime_is_a_prime_above_every_256_bit_secret():
  sympy = pytest.importorskip('sympy')
  assert shamir.PRIME > 2**256
  assert shamir.FIELD_BITS == 257
  assert sympy.isprime(shamir.PRIME)


def test_any_t_shares_reconstruct_and_no_t_minus_1_do():
  rng = randomness.SeededRandom(1)
  secret = randomness.random_below(rng, 2**256)
  shares = shamir.split(secret, range(1, 7), 3, rng)
  for subset in itertools.combinations(shares, 3):
    assert shamir.reconstruct(subset) == secret
  for subset in itertools.combinations(shares, 4):
    assert shamir.reconstruct(subset) == secret
  assert shamir.reconstruct(shares) == secret
  for subset in itertools.combinations(shares, 2):
    assert shamir.reconstruct(subset) != secret


def test_t_minus_1_shares_are_distributed_alike_for_every_secret():
  # Exhaustively, in GF(11) with t = 3: over all random coefficients, the two
  # shares at x = 1, 2 take every pair of values exactly once whatever the
  # secret is, so they carry no information about it.
  prime = 11
  for secret in range(prime):
    pairs = [tuple(shamir.evaluate([secret, a1, a2], x, prime) for x in (1, 2))
             for a1 in range(prime) for a2 in range(prime)]
    assert sorted(pairs) == [(i, j) for i in range(prime) for j in range(prime)]


def test_a_corrupted_share_silently_gives_a_wrong_secret():
  # Semi-honest: nothing detects a wrong share.
  rng = randomness.SeededRandom(2)
  shares = shamir.split(12345, [1, 2, 3], 3, rng)
  wrong = shamir.Share(3, (shares[2].y + 1) % shamir.PRIME)
  corrupted = [shares[0], shares[1], wrong]
  assert shamir.reconstruct(corrupted) != 12345


def test_threshold_one_and_n():
  rng = randomness.SeededRandom(3)
  shares = shamir.split(7, [1, 2, 3], 1, rng)
  assert [s.y for s in shares] == [7, 7, 7]  # Degree 0: each is the secret.
  shares = shamir.split(7, [1, 2, 3], 3, rng)
  assert shamir.reconstruct(shares) == 7
  assert shamir.reconstruct(shares[:2]) != 7


@pytest.mark.parametrize('xs, threshold, secret, match', [
    ([1, 2, 3], 0, 5, 'out of range'),
    ([1, 2, 3], 4, 5, 'out of range'),
    ([1, 1, 2], 2, 5, 'not distinct'),
    ([0, 1, 2], 2, 5, 'nonzero'),
    ([1, 2, 3], 2, shamir.PRIME, 'not an element'),
    ([1, 2, 3], 2, -1, 'not an element'),
])
def test_split_refuses_bad_arguments(xs, threshold, secret, match):
  with pytest.raises(ValueError, match=match):
    shamir.split(secret, xs, threshold, randomness.SeededRandom(0))


def test_reconstruct_refuses_repeated_points():
  with pytest.raises(ValueError, match='not distinct'):
    shamir.reconstruct([shamir.Share(1, 2), shamir.Share(1, 3)])
  with pytest.raises(ValueError, match='no shares'):
    shamir.reconstruct([])


def test_seeded_randomness_repeats_and_separates_parties():
  a = randomness.SeededRandom(5)
  b = randomness.SeededRandom(5)
  assert a.random_bytes(64) == b.random_bytes(64)
  assert a.random_bytes(8) != a.random_bytes(8)  # A stream, not a constant.
  assert (randomness.SeededRandom(5).child('client', 1).random_bytes(32)
          != randomness.SeededRandom(5).child('client', '1').random_bytes(32))
  assert (randomness.SeededRandom(5).random_bytes(32)
          != randomness.SeededRandom(6).random_bytes(32))
  shares_a = shamir.split(9, [1, 2, 3], 2, randomness.SeededRandom(5))
  shares_b = shamir.split(9, [1, 2, 3], 2, randomness.SeededRandom(5))
  assert shares_a == shares_b


def test_system_randomness_differs_every_draw():
  rng = randomness.source(None)
  assert isinstance(rng, randomness.SystemRandom)
  assert rng.random_bytes(32) != rng.random_bytes(32)
  assert (shamir.split(9, [1, 2], 2, rng) != shamir.split(9, [1, 2], 2, rng))


def test_random_below_is_uniform_without_modulo_bias():
  # bound 3 out of 2-bit draws: `draw % 3` would give 0 half the time.
  rng = randomness.SeededRandom(7)
  counts = [0, 0, 0]
  for _ in range(6000):
    counts[randomness.random_below(rng, 3)] += 1
  assert all(1850 < c < 2150 for c in counts), counts
