"""Mask expansion (a PRG) and arithmetic modulo m on uint64 arrays.

A mask is a ChaCha20 keystream turned into integers uniform in [0, m) by
rejection sampling: draw k = ceil(log2 m) bits per candidate and keep the
candidates below m. The result is exactly uniform (no modulo bias at all, which
`keystream mod m` would have), at an expected cost of fewer than two candidates
per element, since m > 2**(k-1). Moduli go up to 2**64, the largest that uint64
arithmetic holds.
"""

import math

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher
from cryptography.hazmat.primitives.ciphers import algorithms

MAX_MODULUS = 2**64


def bits_per_element(modulus):
  """ceil(log2(modulus)): the bits a value in [0, modulus) takes on the wire."""
  return (modulus - 1).bit_length()


def expand(key, size, modulus):
  """`size` ints uniform in [0, modulus) (flat uint64) from a 32-byte key.

  Each key must be used for one mask only (the nonce is fixed): the protocol
  derives a fresh key per round, pair or client, and leaf.
  """
  bits = bits_per_element(modulus)
  width = next(w for w in (1, 2, 4, 8) if 8 * w >= bits)
  dtype = np.dtype(f'<u{width}')
  low_bits = np.uint64((1 << bits) - 1)
  exact = modulus == 1 << bits
  acceptance = modulus / 2.0**bits
  stream = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor()
  chunks, have = [], 0
  while have < size:
    count = math.ceil((size - have) / acceptance * 1.02) + 16
    candidates = np.frombuffer(stream.update(bytes(count * width)), dtype)
    candidates = candidates.astype(np.uint64) & low_bits
    if not exact:
      candidates = candidates[candidates < np.uint64(modulus)]
    chunks.append(candidates)
    have += candidates.size
  return np.concatenate(chunks)[:size] if chunks else np.zeros(0, np.uint64)


def add(a, b, modulus):
  """(a + b) mod modulus for flat uint64 arrays with entries in [0, modulus)."""
  total = a + b  # Wraps modulo 2**64.
  if modulus == MAX_MODULUS:
    return total
  m = np.uint64(modulus)
  wrapped = total < a  # The true sum passed 2**64, so it is >= modulus.
  return np.where(wrapped | (total >= m), total - m, total)


def subtract(a, b, modulus):
  """(a - b) mod modulus for flat uint64 arrays with entries in [0, modulus)."""
  difference = a - b  # Wraps modulo 2**64.
  if modulus == MAX_MODULUS:
    return difference
  return np.where(a >= b, difference, difference + np.uint64(modulus))


def add_all(base, plus, minus, modulus):
  """(base + sum(plus) - sum(minus)) mod modulus, for flat uint64 arrays with
  entries in [0, modulus): one reduction at the end instead of a modular
  step per array (a client adds k + 1 masks)."""
  power_of_two = modulus & (modulus - 1) == 0
  if not power_of_two and (1 + len(plus) + len(minus)) * (modulus - 1) >= \
      MAX_MODULUS:  # Plain sums could pass 2**64: a step per array.
    for a in plus:
      base = add(base, a, modulus)
    for a in minus:
      base = subtract(base, a, modulus)
    return base
  total = base.copy()
  for a in plus:
    total += a
  if power_of_two:  # Wrapping modulo 2**64 is exact modulo its divisors.
    for a in minus:
      total -= a
    return total if modulus == MAX_MODULUS else total & np.uint64(modulus - 1)
  negative = np.zeros_like(total)
  for a in minus:
    negative += a
  m = np.uint64(modulus)
  return subtract(total % m, negative % m, modulus)
