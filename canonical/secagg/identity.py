"""Clients' identity keys, the trust store that names them, and what each
client remembers of the rounds it served.

Against a malicious server (Bonawitz et al. 2017, the active version) each
client holds a long-lived Ed25519 identity key and signs with it what the
server must not forge: its key advertisement, and the contributor list it
agrees to unmask. Every client checks the others' signatures against a
`TrustStore`, each enrolled client's public identity key, written at
enrollment and given to clients out of band, never served by the
aggregator: a server that substitutes keys of its own for a client's cannot
sign for it.

A client's round keys derive from its own secret and the round id; a
`ServedRounds` record refuses a round id served before, so a server cannot
replay a round to make a client mask the same input twice with the same
keys under another contributor list.
"""

import functools
import json

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.hazmat.primitives import serialization

from canonical.secagg.errors import ProtocolViolationError
from canonical.secagg.errors import SecAggError
from canonical.secagg import kdf
from canonical.secagg import roster as roster_lib

PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64
_FORMAT = 'fedcanon-secagg-trust-store'


def identity_from_secret(secret):
  """A client's identity key, derived from its own secret (bytes)."""
  return ed25519.Ed25519PrivateKey.from_private_bytes(
      kdf.derive_key(secret, 'identity-key'))


def public_bytes(identity):
  return identity.public_key().public_bytes(serialization.Encoding.Raw,
                                            serialization.PublicFormat.Raw)


def sign(identity, *label_parts):
  """The signature of what `label_parts` name (see `kdf.encode_label`)."""
  return identity.sign(kdf.encode_label(*label_parts))


def advertisement_label(round_id, sender, cipher_public_key, mask_public_key):
  return ('key-advertisement', round_id, sender, cipher_public_key,
          mask_public_key)


def contributors_label(round_id, contributors):
  """The contributor list as one signed statement: its size, then its ids
  in order (so no two lists share a label)."""
  contributors = sorted(contributors)
  return ('contributors', round_id, len(contributors), *contributors)


class TrustStore:
  """Each enrolled client's public identity key, by client id."""

  def __init__(self, public_keys):
    keys = {}
    for client_id in roster_lib.check_client_ids(public_keys):
      key = public_keys[client_id]
      if not isinstance(key, bytes) or len(key) != PUBLIC_KEY_BYTES:
        raise SecAggError(f'trust store: client {client_id!r}\'s identity key '
                          f'is not {PUBLIC_KEY_BYTES} bytes')
      ed25519.Ed25519PublicKey.from_public_bytes(key)  # A valid point.
      keys[client_id] = key
    self._bytes = keys

  def __contains__(self, client_id):
    return client_id in self._bytes

  def __len__(self):
    return len(self._bytes)

  def verifies(self, client_id, signature, *label_parts):
    """Whether `signature` is the enrolled `client_id`'s over what
    `label_parts` name (False for a client not enrolled, or a malformed
    signature)."""
    public = self._bytes.get(client_id)
    if public is None or not isinstance(signature, bytes):
      return False
    return _verify(public, signature, kdf.encode_label(*label_parts))

  def to_bytes(self):
    return json.dumps({'format': _FORMAT, 'version': 1, 'clients': [
        [u, key.hex()] for u, key in self._bytes.items()]}).encode()

  @classmethod
  def from_bytes(cls, data):
    try:
      record = json.loads(data)
      if record.get('format') != _FORMAT or record.get('version') != 1:
        raise ValueError('not a trust store of version 1')
      return cls({u: bytes.fromhex(key) for u, key in record['clients']})
    except (ValueError, TypeError, KeyError, AttributeError) as e:
      raise SecAggError(f'a malformed trust store: {e}') from None


@functools.lru_cache(maxsize=1 << 16)
def _verify(public, signature, message):
  """Ed25519 verification, a pure function of its bytes: remembered, since
  every client a process simulates checks the same advertisements and
  signatures (~0.1 ms each; a real client checks each once too)."""
  try:
    ed25519.Ed25519PublicKey.from_public_bytes(public).verify(signature,
                                                             message)
  except InvalidSignature:
    return False
  return True


def enroll(identities):
  """The trust store of clients {client id: identity key}."""
  return TrustStore({u: public_bytes(key) for u, key in identities.items()})


class ServedRounds:
  """The round ids a client has served (kept in memory; a runner whose
  clients are processes keeps it where the client keeps its secret)."""

  def __init__(self):
    self._served = set()

  def claim(self, client_id, round_id):
    """Records `round_id`; ProtocolViolationError if it was served before."""
    if round_id in self._served:
      raise ProtocolViolationError(
          f'client {client_id!r}: round {round_id!r} was served before; a '
          'replayed round id could unmask this client\'s input, so it is '
          'refused')
    self._served.add(round_id)
