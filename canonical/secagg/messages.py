"""The messages of a round, each with the bits it takes on the wire.

Client -> server: `KeyAdvertisement`, `EncryptedShares`, `MaskedInput`,
`UnmaskingShares`. Server -> client: `Roster`, the relayed `EncryptedShares`,
`ContributorList`. Bits count payloads only; the envelope (who sent a message to
whom, which round) is the transport's and is not counted.
"""

import dataclasses
from typing import Any, Mapping

from canonical.secagg import masks
from canonical.secagg import shamir

PUBLIC_KEY_BYTES = 32  # X25519.
AEAD_TAG_BYTES = 16  # ChaCha20-Poly1305.
# A share message holds two field elements: the shares of the self-mask seed
# and of the pairwise (mask) private key.
SHARES_PLAINTEXT_BYTES = 2 * shamir.FIELD_BYTES
SHARES_CIPHERTEXT_BYTES = SHARES_PLAINTEXT_BYTES + AEAD_TAG_BYTES

ADVERTISE_KEYS = 'advertise_keys'
SHARE_KEYS = 'share_keys'
MASKED_INPUT = 'masked_input'
UNMASKING = 'unmasking'
CONSISTENCY = 'consistency'
STEPS = (ADVERTISE_KEYS, SHARE_KEYS, MASKED_INPUT, CONSISTENCY, UNMASKING)


@dataclasses.dataclass(frozen=True)
class KeyAdvertisement:
  """Step 1: a client's two public keys (share encryption, pairwise masks),
  against a malicious server signed with its identity key (64 bytes; empty
  in a round that trusts its server)."""
  sender: Any
  cipher_public_key: bytes
  mask_public_key: bytes
  signature: bytes = b''
  step = ADVERTISE_KEYS

  @property
  def num_bits(self):
    return 8 * (len(self.cipher_public_key) + len(self.mask_public_key) +
                len(self.signature))


@dataclasses.dataclass(frozen=True)
class Roster:
  """Step 1 reply: every advertisement; in a sparse round only the
  recipient's neighborhood's, and every client id of the round (to place
  itself on the ring). The recipient receives the others' keys and ids."""
  recipient: Any
  advertisements: tuple
  client_ids: tuple = ()  # Empty: the advertisements' senders are all.
  step = ADVERTISE_KEYS

  @property
  def num_bits(self):
    advertised = {a.sender for a in self.advertisements}
    return sum(a.num_bits for a in self.advertisements
               if a.sender != self.recipient) + sum(
                   id_bits(u) for u in self.client_ids if u not in advertised)


def id_bits(client_id):
  """A client id on the wire: an int as 64 bits, a str as its UTF-8."""
  if isinstance(client_id, int):
    return 64
  return 8 * len(client_id.encode('utf-8'))


@dataclasses.dataclass(frozen=True)
class EncryptedShares:
  """Step 2: the sender's shares for one recipient, which only it can decrypt.

  The server relays it without being able to read it.
  """
  sender: Any
  recipient: Any
  ciphertext: bytes
  step = SHARE_KEYS

  @property
  def num_bits(self):
    return 8 * len(self.ciphertext)


@dataclasses.dataclass(frozen=True, eq=False)
class MaskedInput:
  """Step 3: the client's input plus its masks, flat uint64 per leaf."""
  sender: Any
  values: tuple
  moduli: tuple
  step = MASKED_INPUT

  @property
  def num_bits(self):
    return sum(v.size * masks.bits_per_element(m)
               for v, m in zip(self.values, self.moduli))


@dataclasses.dataclass(frozen=True)
class ContributorList:
  """Step 4 request: whose masked inputs the sum holds.

  Sent as a bitmap over the clients that shared keys in step 2.
  """
  recipient: Any
  contributors: tuple
  num_share_senders: int
  step = UNMASKING

  @property
  def num_bits(self):
    return self.num_share_senders


@dataclasses.dataclass(frozen=True)
class ContributorsSignature:
  """The consistency check (against a malicious server): a contributor's
  signature of the contributor list it was sent. It signs one list a round."""
  sender: Any
  signature: bytes
  step = CONSISTENCY

  @property
  def num_bits(self):
    return 8 * len(self.signature)


@dataclasses.dataclass(frozen=True)
class SignedContributors:
  """Step 4 request against a malicious server: the signatures of at
  least t members of the contributor list (sent before, as a
  `ContributorList`), which each client checks before it reveals a share."""
  recipient: Any
  contributors: tuple
  signatures: Mapping[Any, bytes]
  step = UNMASKING

  @property
  def num_bits(self):
    return 8 * sum(len(s) for s in self.signatures.values())


@dataclasses.dataclass(frozen=True)
class UnmaskingShares:
  """Step 4: a survivor's shares; per client, either the self-mask seed's
  (contributors) or the mask private key's (the others), never both."""
  sender: Any
  x: int
  self_mask_shares: Mapping[Any, int]
  key_shares: Mapping[Any, int]
  step = UNMASKING

  @property
  def num_bits(self):
    count = len(self.self_mask_shares) + len(self.key_shares)
    return shamir.FIELD_BITS * count


def to_field_bytes(value):
  return value.to_bytes(shamir.FIELD_BYTES, 'big')


def from_field_bytes(data):
  return int.from_bytes(data, 'big')

