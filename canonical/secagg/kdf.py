"""Key derivation (HKDF-SHA256) with unambiguous, typed info strings.

Every key of the protocol is derived from a secret and a label that says what
the key is for, which round and which leaf: two different uses never share a
key, so masks are independent per round, per pair, per leaf.
"""

import functools
import hmac
import struct

_DOMAIN = b'fedcanon/secagg/v1'
KEY_BYTES = 32


@functools.lru_cache(maxsize=1 << 16, typed=True)  # typed: True is not 1.
def encode_label(*parts):
  """Bytes naming `parts` (str, bytes or int) so that no two part lists collide.

  Each part is tagged by its type and prefixed by its length: ('ab', 'c') and
  ('a', 'bc') differ, and so do the client ids 1 and '1'. Cached: a round
  names the same pairs, leaves and rounds over and over.
  """
  out = [_DOMAIN]
  for part in parts:
    if isinstance(part, bool):
      raise TypeError(f'label part {part!r}: bool is not a label')
    if isinstance(part, bytes):
      tag, data = b'b', part
    elif isinstance(part, str):
      tag, data = b's', part.encode('utf-8')
    elif isinstance(part, int):
      tag, data = b'i', str(part).encode('ascii')
    else:
      raise TypeError(f'label part {part!r}: expected str, bytes or int')
    out.append(tag + struct.pack('>I', len(data)) + data)
  return b''.join(out)


def hkdf_sha256(secret, info):
  """HKDF-SHA256 (RFC 5869) without salt, one 32-byte block: two HMACs
  (a tenth of the cost of building cryptography's HKDF object per key, and
  a round derives ~80 keys per client)."""
  pseudorandom_key = hmac.digest(bytes(32), secret, 'sha256')
  return hmac.digest(pseudorandom_key, info + b'\x01', 'sha256')


def derive_key(secret, *label_parts):
  """A 32-byte key from `secret` (bytes), bound to what `label_parts` name."""
  return hkdf_sha256(secret, encode_label(*label_parts))
