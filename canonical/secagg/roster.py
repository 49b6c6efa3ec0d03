"""The clients of a round as everyone sees them: ids, public keys, share points.

Client ids are ints or strs, all of one type, so that every party orders pairs
(u < v adds a pairwise mask, u > v subtracts it) and numbers the Shamir points
the same way.
"""

import collections
import functools

from canonical.secagg.errors import SecAggError
from canonical.secagg import memo
from canonical.secagg import messages


def check_client_id(client_id):
  if isinstance(client_id, bool) or not isinstance(client_id, (int, str)):
    raise SecAggError(f'client id {client_id!r}: expected an int or a str')
  return client_id


def check_client_ids(client_ids):
  """The ids, sorted; refuses duplicates and a mix of ints and strs."""
  client_ids = list(client_ids)
  for client_id in client_ids:
    check_client_id(client_id)
  if len({type(c) for c in client_ids}) > 1:
    raise SecAggError(
        f'client ids {client_ids[:5]}...: mix ints and strs; use one type')
  twice = sorted(c for c, n in collections.Counter(client_ids).items() if n > 1)
  if twice:
    raise SecAggError(f'client ids {twice} appear more than once')
  return sorted(client_ids)


@memo.by_identity()
def index(advertisements):
  """{client id: KeyAdvertisement}, in id order, after checking the roster
  (shared between callers: do not change it)."""
  advertisements = tuple(advertisements)
  for a in advertisements:
    if not isinstance(a, messages.KeyAdvertisement):
      raise SecAggError(f'roster entry {a!r} is not a KeyAdvertisement')
  return _index(advertisements)


@functools.lru_cache(maxsize=8)  # Every client of a round reads the roster.
def _index(advertisements):
  for a in advertisements:
    for key in (a.cipher_public_key, a.mask_public_key):
      if not isinstance(key, bytes) or len(key) != messages.PUBLIC_KEY_BYTES:
        raise SecAggError(
            f'client {a.sender!r}: a public key is not '
            f'{messages.PUBLIC_KEY_BYTES} bytes')
  ids = check_client_ids(a.sender for a in advertisements)
  keys = [k for a in advertisements
          for k in (a.cipher_public_key, a.mask_public_key)]
  if len(set(keys)) != len(keys):
    raise SecAggError('two advertised public keys are equal')
  by_id = {a.sender: a for a in advertisements}
  return {client_id: by_id[client_id] for client_id in ids}


@memo.by_identity()
def round_ids(client_ids):
  """The round's client ids as one sorted tuple, checked."""
  return tuple(check_client_ids(client_ids))


@memo.by_identity()
def share_points(client_ids):
  """{client id: its Shamir point x}: 1, 2, ... in id order (never 0)
  (shared between callers: do not change it)."""
  return _share_points(tuple(client_ids))


@functools.lru_cache(maxsize=8)
def _share_points(client_ids):
  return {client_id: i + 1 for i, client_id in enumerate(sorted(client_ids))}
