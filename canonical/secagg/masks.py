"""Mask expansion (a PRG) and arithmetic modulo m on uint64 arrays.

A mask is a ChaCha20 keystream turned into integers uniform in [0, m) by
rejection sampling: draw k = ceil(log2 m) bits per candidate and keep the
candidates below m. The result is exactly uniform (no modulo bias at all, which
`keystream mod m` would have), at an expected cost of fewer than two candidates
per element, since m > 2**(k-1). Moduli go up to 2**64, the largest that uint64
arithmetic holds.
"""

import functools
import math

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher
from cryptography.hazmat.primitives.ciphers import algorithms

MAX_MODULUS = 2**64


def bits_per_element(modulus):
  """ceil(log2(modulus)): the bits a value in [0, modulus) takes on the wire."""
  return (modulus - 1).bit_length()


def _stream(key):
  return Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor()


def _width(bits):
  """Bytes per candidate: the smallest unsigned integer holding `bits`."""
  return next(w for w in (1, 2, 4, 8) if 8 * w >= bits)


@functools.lru_cache(maxsize=64)
def _raw_dtype(modulus):
  return np.dtype(f'<u{_width(bits_per_element(modulus))}')


def _raw(key, size, modulus):
  """The keystream as `size` unsigned ints, for a power-of-two `modulus`:
  the mask is these modulo `modulus` (their low bits)."""
  dtype = _raw_dtype(modulus)
  return np.frombuffer(_stream(key).update(bytes(size * dtype.itemsize)),
                       dtype)


def expand(key, size, modulus):
  """`size` ints uniform in [0, modulus) (flat uint64) from a 32-byte key.

  Each key must be used for one mask only (the nonce is fixed): the protocol
  derives a fresh key per round, pair or client, and leaf.
  """
  bits = bits_per_element(modulus)
  low_bits = np.uint64((1 << bits) - 1)
  if _is_power_of_two(modulus):  # Every candidate is kept.
    raw = _raw(key, size, modulus)
    values = raw.astype(np.uint64)
    if bits < 8 * raw.itemsize:
      values &= low_bits
    return values
  width = _width(bits)
  dtype = np.dtype(f'<u{width}')
  acceptance = modulus / 2.0**bits
  stream = _stream(key)
  chunks, have = [], 0
  while have < size:
    count = math.ceil((size - have) / acceptance * 1.02) + 16
    candidates = np.frombuffer(stream.update(bytes(count * width)), dtype)
    candidates = candidates.astype(np.uint64) & low_bits
    candidates = candidates[candidates < np.uint64(modulus)]
    chunks.append(candidates)
    have += candidates.size
  return np.concatenate(chunks)[:size] if chunks else np.zeros(0, np.uint64)


def _is_power_of_two(modulus):
  return modulus & (modulus - 1) == 0


def add(a, b, modulus):
  """(a + b) mod modulus for flat uint64 arrays with entries in [0, modulus)."""
  total = a + b  # Wraps modulo 2**64.
  if modulus == MAX_MODULUS:
    return total
  if _is_power_of_two(modulus):  # Wrapping is exact modulo 2**64's divisors.
    total &= np.uint64(modulus - 1)
    return total
  m = np.uint64(modulus)
  wrapped = total < a  # The true sum passed 2**64, so it is >= modulus.
  return np.where(wrapped | (total >= m), total - m, total)


def subtract(a, b, modulus):
  """(a - b) mod modulus for flat uint64 arrays with entries in [0, modulus)."""
  difference = a - b  # Wraps modulo 2**64.
  if modulus == MAX_MODULUS:
    return difference
  if _is_power_of_two(modulus):
    difference &= np.uint64(modulus - 1)
    return difference
  return np.where(a >= b, difference, difference + np.uint64(modulus))


def add_masks(base, plus, minus, modulus):
  """(base + sum of PRG(k) for k in `plus` - sum of PRG(k) for k in `minus`)
  mod modulus, for a flat uint64 `base` with entries in [0, modulus) and
  32-byte mask keys.

  Masks are expanded one at a time and added in place, so a client adding
  k + 1 masks holds a few arrays at a time, not k + 1; the sum is reduced
  once at the end (for a power-of-two modulus the raw keystream is added,
  in its own width), or whenever uint64 could overflow.
  """
  size = base.size
  if _is_power_of_two(modulus):
    # In the keystream's own width w: wrapping modulo 2**(8w), a multiple of
    # the modulus, is exact.
    dtype = _raw_dtype(modulus)
    total = base.astype(dtype)
    for key in plus:
      total += _raw(key, size, modulus)
    for key in minus:
      total -= _raw(key, size, modulus)
    total = total.astype(np.uint64)
    if modulus < 2**(8 * dtype.itemsize):
      total &= np.uint64(modulus - 1)
    return total
  terms_that_fit = (MAX_MODULUS - 1) // (modulus - 1)
  if terms_that_fit < 2:  # Each addition may pass 2**64: a step per mask.
    for key in plus:
      base = add(base, expand(key, size, modulus), modulus)
    for key in minus:
      base = subtract(base, expand(key, size, modulus), modulus)
    return base
  m = np.uint64(modulus)
  sums = []
  for start, keys in ((base, plus), (np.zeros_like(base), minus)):
    total, terms = start.copy(), 1
    for key in keys:
      if terms == terms_that_fit:
        total %= m
        terms = 1
      total += expand(key, size, modulus)
      terms += 1
    sums.append(total % m)
  return subtract(sums[0], sums[1], modulus)
