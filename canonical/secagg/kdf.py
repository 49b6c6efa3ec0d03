"""Key derivation (keyed BLAKE2b) with unambiguous, typed labels.

Every key of the protocol is derived from a secret and a label that says what
the key is for, which round and which leaf: two different uses never share a
key, so masks are independent per round, per pair, per leaf.
"""

import functools
import hashlib
import struct

from canonical import errors

_DOMAIN = b'fedcanon/secagg/v2'  # v2: BLAKE2b (v1: HKDF-SHA256).
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
      raise errors.InvalidTypeError(f'label part {part!r}: bool is not a label')
    if isinstance(part, bytes):
      tag, data = b'b', part
    elif isinstance(part, str):
      tag, data = b's', part.encode('utf-8')
    elif isinstance(part, int):
      tag, data = b'i', str(part).encode('ascii')
    else:
      raise errors.InvalidTypeError(
          f'label part {part!r}: expected str, bytes or int')
    out.append(tag + struct.pack('>I', len(data)) + data)
  return b''.join(out)


def derive_key(secret, *label_parts):
  """A 32-byte key from `secret` (bytes, at most 64), bound to what
  `label_parts` name: BLAKE2b keyed by the secret over the label, as
  libsodium derives keys (crypto_kdf) and hashes X25519 agreements into
  session keys (crypto_kx). One C call: HKDF's two HMACs cost 7x more, and a
  round derives ~90 keys per client."""
  if len(secret) > hashlib.blake2b.MAX_KEY_SIZE:
    raise errors.InvalidValueError(
        f'a {len(secret)}-byte secret: keys derive from at most '
        f'{hashlib.blake2b.MAX_KEY_SIZE} bytes')
  return hashlib.blake2b(encode_label(*label_parts), key=secret,
                         digest_size=KEY_BYTES).digest()
