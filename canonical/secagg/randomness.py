"""Where the protocol's secret randomness comes from.

In production every secret (key pairs, self-mask seeds, Shamir coefficients)
comes from the operating system (`os.urandom`), directly or through a seed
drawn from it. Tests and reproducible local runs may inject a seed instead: a
ChaCha20 keystream keyed by a key derived from the seed and the party's label,
so each party's draws are independent of the others' and repeat bit for bit.
Python's `random` module is never used: it is not a cryptographic generator.
"""

import hashlib
import os

from cryptography.hazmat.primitives.ciphers import Cipher
from cryptography.hazmat.primitives.ciphers import algorithms

from canonical import errors
from canonical.secagg import kdf


class SystemRandom:
  """Secrets from the operating system; the production source."""

  def random_bytes(self, n):
    return os.urandom(n)

  def child(self, *label_parts):
    del label_parts  # OS randomness is already independent per draw.
    return self


class SeededRandom:
  """A reproducible source, as secret as its seed: the Beam runner seeds it
  with a client's 32 random bytes (so its workers redraw the same keys);
  tests with small ints, which are no secret at all."""

  def __init__(self, seed, label=()):
    if isinstance(seed, bool) or not isinstance(seed, (int, bytes, str)):
      raise errors.InvalidTypeError(
          f'seed {seed!r}: expected an int, bytes or str')
    self._seed = seed
    self._label = tuple(label)
    # Hashed: a seed of any length keys the derivation.
    seed_bytes = hashlib.blake2b(kdf.encode_label(seed)).digest()
    key = kdf.derive_key(seed_bytes, 'seeded-random', *self._label)
    cipher = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None)
    self._stream = cipher.encryptor()

  def random_bytes(self, n):
    return self._stream.update(bytes(n))

  def child(self, *label_parts):
    """An independent source for one party or purpose."""
    return SeededRandom(self._seed, self._label + label_parts)


def source(seed=None):
  """`SystemRandom()` when `seed` is None, else a `SeededRandom(seed)`."""
  return SystemRandom() if seed is None else SeededRandom(seed)


def random_below(rng, bound):
  """A uniform int in [0, bound), by rejection sampling (no modulo bias)."""
  if bound < 1:
    raise errors.InvalidValueError(f'bound {bound} must be positive')
  bits = (bound - 1).bit_length()
  num_bytes = (bits + 7) // 8
  mask = (1 << bits) - 1
  while True:
    candidate = int.from_bytes(rng.random_bytes(num_bytes), 'big') & mask
    if candidate < bound:
      return candidate
