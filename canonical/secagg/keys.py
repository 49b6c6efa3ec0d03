"""The protocol's keys: X25519 key pairs, and the keys derived from them.

Each client has two key pairs per round: one to encrypt the shares it sends
(never revealed), and one whose agreements give the pairwise mask seeds (its
private key is reconstructed if the client drops). Keeping them apart means a
dropped client's reconstructed mask key opens no share ciphertext.
"""

import functools

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import x25519
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from canonical.secagg.errors import SecAggError
from canonical.secagg import kdf

PRIVATE_KEY_BYTES = 32
SEED_BYTES = 32
_NONCE = bytes(12)  # Each share-encryption key encrypts one message only.


def new_private_key(rng):
  return x25519.X25519PrivateKey.from_private_bytes(
      rng.random_bytes(PRIVATE_KEY_BYTES))


def private_bytes(private_key):
  return private_key.private_bytes(serialization.Encoding.Raw,
                                   serialization.PrivateFormat.Raw,
                                   serialization.NoEncryption())


def public_bytes(private_key):
  return private_key.public_key().public_bytes(serialization.Encoding.Raw,
                                               serialization.PublicFormat.Raw)


@functools.lru_cache(maxsize=1 << 14)  # Each key serves k agreements.
def _public_key(data):
  return x25519.X25519PublicKey.from_public_bytes(data)


def _agree(private_key, peer_public, peer_id):
  try:
    return private_key.exchange(_public_key(peer_public))
  except ValueError as e:
    raise SecAggError(f'client {peer_id!r}: unusable public key ({e})') from e


def pair_seed(config, private_key, own_id, peer_public, peer_id):
  """The seed two clients share for their pairwise masks (never the server)."""
  low, high = sorted((own_id, peer_id))
  return kdf.derive_key(_agree(private_key, peer_public, peer_id), 'pair-seed',
                        config.round_id, low, high)


def pair_mask_key(config, seed, leaf_index):
  """The key of PRG(s_uv) for one leaf (see masks.add_masks)."""
  leaf = config.leaves[leaf_index]
  return kdf.derive_key(seed, 'pair-mask', config.round_id, leaf_index,
                        leaf.path, leaf.modulus)


def self_mask_key(config, seed, client_id, leaf_index):
  """The key of PRG(b_u) for one leaf (see masks.add_masks)."""
  leaf = config.leaves[leaf_index]
  return kdf.derive_key(seed, 'self-mask', config.round_id, client_id,
                        leaf_index, leaf.path, leaf.modulus)


def _share_cipher(config, private_key, peer_public, peer_id, sender, recipient,
                  memo):
  """The AEAD of the one message `sender` encrypts to `recipient` this
  round: its key binds both and the round, so no associated data is needed."""
  # Sender and recipient agree on the same secret: a client that encrypted
  # to a peer reuses it to decrypt that peer's shares (`memo`).
  secret = None if memo is None else memo.get(peer_public)
  if secret is None:
    secret = _agree(private_key, peer_public, peer_id)
    if memo is not None:
      memo[peer_public] = secret
  return ChaCha20Poly1305(kdf.derive_key(secret, 'share-encryption',
                                         config.round_id, sender, recipient))


def encrypt_shares(config, private_key, recipient_public, sender, recipient,
                   plaintext, memo=None):
  cipher = _share_cipher(config, private_key, recipient_public, recipient,
                         sender, recipient, memo)
  return cipher.encrypt(_NONCE, plaintext, None)


def decrypt_shares(config, private_key, sender_public, sender, recipient,
                   ciphertext, memo=None):
  cipher = _share_cipher(config, private_key, sender_public, sender, sender,
                         recipient, memo)
  return cipher.decrypt(_NONCE, ciphertext, None)
