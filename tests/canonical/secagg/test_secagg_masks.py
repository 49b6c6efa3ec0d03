"""Mask expansion and modular arithmetic (canonical/secagg/masks.py, kdf.py)."""

import hashlib

import numpy as np
import pytest
from scipy import stats

from canonical.secagg import kdf
from canonical.secagg import masks

_MODULI = [2, 3, 10, 2**8, 2**24, 1000003, 2**32, 2**63 + 25, 2**64 - 59, 2**64]


def _values(rng, modulus, size):
  values = rng.integers(0, modulus, size=size, dtype=np.uint64)
  values[:2] = [0, modulus - 1]
  return values


@pytest.mark.parametrize('modulus', _MODULI)
def test_add_and_subtract_match_python_ints(modulus):
  rng = np.random.default_rng(modulus % 1000)
  a, b = _values(rng, modulus, 500), _values(rng, modulus, 500)
  b[2:4] = [modulus - 1, 0]
  expected_sum = [(int(x) + int(y)) % modulus for x, y in zip(a, b)]
  expected_difference = [(int(x) - int(y)) % modulus for x, y in zip(a, b)]
  assert [int(v) for v in masks.add(a, b, modulus)] == expected_sum
  assert [int(v) for v in masks.subtract(a, b, modulus)] == expected_difference


def test_bits_per_element_is_ceil_log2():
  moduli = (2, 3, 4, 5, 10, 2**32, 1000003, 2**64)
  assert [masks.bits_per_element(m) for m in moduli] == [
      1, 2, 2, 3, 4, 32, 20, 64]


@pytest.mark.parametrize('modulus', _MODULI)
def test_masks_lie_in_range_and_repeat_only_for_the_same_key(modulus):
  key = kdf.derive_key(b'seed', 'test', modulus)
  mask = masks.expand(key, 1000, modulus)
  assert mask.dtype == np.uint64 and mask.shape == (1000,)
  if modulus < 2**64:
    assert int(mask.max()) < modulus
  assert np.array_equal(mask, masks.expand(key, 1000, modulus))
  other_key = kdf.derive_key(b'seed', 'test', modulus, 1)
  other = masks.expand(other_key, 1000, modulus)
  assert not np.array_equal(mask, other)
  assert masks.expand(key, 0, modulus).shape == (0,)


@pytest.mark.parametrize('modulus', [2, 10, 16, 1000003])
def test_masks_are_uniform(modulus):
  mask = masks.expand(kdf.derive_key(b'uniform', modulus), 200_000, modulus)
  bins = min(modulus, 50)
  counts = np.bincount((mask.astype(np.float64) * bins / modulus).astype(int),
                       minlength=bins)
  assert stats.chisquare(counts).pvalue > 1e-4


def test_masks_have_no_modulo_bias_for_a_large_modulus():
  # m = 3 * 2**62: reducing 64-bit draws modulo m would put half of all values
  # in the first third [0, 2**62).
  modulus = 3 * 2**62
  mask = masks.expand(kdf.derive_key(b'bias'), 60_000, modulus)
  thirds = np.bincount((mask >> np.uint64(62)).astype(int), minlength=3)
  assert thirds.size == 3
  assert stats.chisquare(thirds).pvalue > 1e-4, thirds


def test_labels_never_collide():
  assert kdf.encode_label('ab', 'c') != kdf.encode_label('a', 'bc')
  assert kdf.encode_label(1) != kdf.encode_label('1')
  assert kdf.encode_label(b'x') != kdf.encode_label('x')
  with pytest.raises(TypeError):
    kdf.encode_label(True)
  assert kdf.derive_key(b's', 'a', 0) != kdf.derive_key(b's', 'a', 1)


def test_keys_are_keyed_blake2b_of_the_label():
  # Keyed BLAKE2b as specified (the BLAKE2 reference's first keyed test
  # vector: key 00..3f, empty input, 64-byte digest) ...
  assert hashlib.blake2b(b'', key=bytes(range(64))).hexdigest() == (
      '10ebb67700b1868efb4417987acf4690ae9d972fb7a590c2f02871799aaa4786'
      'b5e996e8f0f4eb981fc214b005f42d2ff4233499391653df7aefcbc13fc51568')
  # ... keyed by the secret over our label, 32 bytes: frozen, since workers
  # of one round must derive the same keys whatever version they run.
  label = kdf.encode_label('pair-seed', '3/a', 'c1', 'c2')
  assert label.startswith(b'fedcanon/secagg/v2')
  key = kdf.derive_key(b'secret', 'pair-seed', '3/a', 'c1', 'c2')
  assert key == hashlib.blake2b(label, key=b'secret', digest_size=32).digest()
  assert key.hex() == (
      '074d3b9670cbffbd31a7391475107105aa8be61fd0825469c82f2fe5ea146d11')


def test_secrets_longer_than_a_blake2b_key_are_refused():
  kdf.derive_key(bytes(64), 'x')
  with pytest.raises(ValueError, match='65-byte secret'):
    kdf.derive_key(bytes(65), 'x')


@pytest.mark.parametrize('modulus', [2, 7, 2**8, 2**23, 2**23 + 1, 2**24,
                                     3 * 2**62, 2**63, 2**64 - 1, 2**64])
def test_add_masks_equals_one_modular_step_per_expanded_mask(modulus):
  rng = np.random.default_rng(modulus % 1000)
  base = masks.expand(rng.bytes(32), 500, modulus)
  plus, minus = ([rng.bytes(32) for _ in range(count)] for count in (9, 8))
  expected = base
  for key in plus:
    expected = masks.add(expected, masks.expand(key, 500, modulus), modulus)
  for key in minus:
    expected = masks.subtract(expected, masks.expand(key, 500, modulus),
                              modulus)
  got = masks.add_masks(base, plus, minus, modulus)
  np.testing.assert_array_equal(got, expected)
  assert got.dtype == np.uint64 and (modulus == 2**64 or
                                     (got < np.uint64(modulus)).all())
  np.testing.assert_array_equal(masks.add_masks(base, [], [], modulus), base)
  np.testing.assert_array_equal(
      masks.add_masks(masks.add_masks(base, plus, minus, modulus), minus,
                      plus, modulus), base)


def test_add_masks_reduces_before_uint64_overflows():
  # 2**62 + 1: three terms fit below 2**64, a fourth would wrap.
  modulus = 2**62 + 1
  keys = [bytes([i]) * 32 for i in range(7)]
  base = np.full(300, modulus - 1, np.uint64)
  expected = base
  for key in keys:
    expected = masks.add(expected, masks.expand(key, 300, modulus), modulus)
  np.testing.assert_array_equal(masks.add_masks(base, keys, [], modulus),
                                expected)
