"""The client -> server messages as bytes, for runners whose parties are
separate processes (the Beam runner's workers): JSON, no pickle.

Client ids are ints or strs; keys, ciphertexts and field elements are hex.
A malformed message is a `SecAggError`, never an arbitrary exception.
"""

import json

from canonical.secagg.errors import SecAggError
from canonical.secagg import messages


def _id(value):
  if isinstance(value, bool) or not isinstance(value, (int, str)):
    raise SecAggError(f'client id {value!r}: expected an int or str')
  return value


def _shares(pairs):
  return {_id(client): int(share, 16) for client, share in pairs}


def to_bytes(message):
  """One `KeyAdvertisement`, `EncryptedShares`, `ContributorsSignature` or
  `UnmaskingShares`."""
  if isinstance(message, messages.KeyAdvertisement):
    fields = ['advertise', message.sender, message.cipher_public_key.hex(),
              message.mask_public_key.hex(), message.signature.hex()]
  elif isinstance(message, messages.ContributorsSignature):
    fields = ['signed', message.sender, message.signature.hex()]
  elif isinstance(message, messages.EncryptedShares):
    fields = ['shares', message.sender, message.recipient,
              message.ciphertext.hex()]
  elif isinstance(message, messages.UnmaskingShares):
    fields = ['unmask', message.sender, hex(message.x),
              [[c, hex(s)] for c, s in message.self_mask_shares.items()],
              [[c, hex(s)] for c, s in message.key_shares.items()]]
  else:
    raise SecAggError(f'cannot encode {type(message).__name__}')
  return json.dumps(fields, separators=(',', ':')).encode()


def from_bytes(data):
  """The message `to_bytes` made."""
  try:
    fields = json.loads(data)
    kind = fields[0]
    if kind == 'advertise':
      _, sender, cipher, mask, signature = fields
      return messages.KeyAdvertisement(_id(sender), bytes.fromhex(cipher),
                                       bytes.fromhex(mask),
                                       bytes.fromhex(signature))
    if kind == 'signed':
      _, sender, signature = fields
      return messages.ContributorsSignature(_id(sender),
                                            bytes.fromhex(signature))
    if kind == 'shares':
      _, sender, recipient, ciphertext = fields
      return messages.EncryptedShares(_id(sender), _id(recipient),
                                      bytes.fromhex(ciphertext))
    if kind == 'unmask':
      _, sender, x, seed_shares, key_shares = fields
      return messages.UnmaskingShares(_id(sender), int(x, 16),
                                      _shares(seed_shares),
                                      _shares(key_shares))
  except (ValueError, TypeError, IndexError, KeyError) as e:
    raise SecAggError(f'a malformed secure aggregation message: {e}') from None
  raise SecAggError(f'a message of unknown kind {fields[0]!r}')
