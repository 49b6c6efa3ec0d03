"""A client's side of the protocol: its secret and what it draws from it.
Every step redraws a client's keys and shares from its secret and the
round's attempt, so any worker can run any of its steps and no server step
needs a secret; a worker keeps the clients it has drawn (their keys are the
costly part)."""

import functools
import os

from beam_runner.secure import messages
from beam_runner.worker_io import client_data
from canonical import io as storage_lib
from canonical import secagg

SECRET_BYTES = 32
SECRETS_DIR = 'client_secrets'

# Clients' keys, each worker's share of a round, by round: a round's
# clients go with the round (two kept, for rounds chained in one pipeline).
_CLIENTS_BY_ROUND = messages.Cache(2)


def _secret(secure_round, client_id):
  """The client's own secret: read, or made once (create-only)."""
  path = storage_lib.join(secure_round.secrets_directory,
                      client_data.file_name(client_id) + '.key')
  storage = secure_round.storage
  try:
    return storage.read_bytes(path)
  except storage_lib.NotFound:
    pass
  try:
    storage.create_only(path, os.urandom(SECRET_BYTES))
  except storage_lib.AlreadyExists:
    pass  # Another worker made it first: use theirs.
  return storage.read_bytes(path)


def client_of(the_round, client_id):
  """The client's draws in this round: made once per process (its keys
  are the costly part), the same on every worker."""
  clients = _CLIENTS_BY_ROUND.get(the_round.paths.round_path,
                                  lambda _: messages.Cache(1 << 14))
  return clients.get(client_id, lambda _: Client(the_round, client_id))


class Client:
  """One client's draws in one round, redrawn by each step from its secret:
  the same keys and shares on every worker."""

  def __init__(self, the_round, client_id):
    paths = the_round.paths
    self._rng = secagg.SeededRandom(_secret(paths, client_id)).child(
        'round', paths.round_id)
    self.round = the_round
    self.id = client_id
    self.keys, self.advertisement = secagg.advertise_keys(
        client_id, the_round.config, self._rng.child('advertise'))
    self._sharing_state = None

  @functools.cached_property
  def _roster(self):
    """The roster the server sends it: in a sparse round, its
    neighborhood's keys and the round's ids."""
    received = secagg.roster_for(self.round.config,
                                 messages.roster(self.round.paths), self.id)
    return received.advertisements, received.client_ids or None

  def share_keys(self):
    advertisements, client_ids = self._roster
    self._sharing_state, outgoing = secagg.share_keys(
        self.keys, advertisements, self._rng.child('share'), client_ids)
    return self._sharing_state, outgoing

  @property
  def sharing_state(self):
    """Its state after step 2: kept by the worker that ran that step, or
    redrawn (the same) without encrypting on another."""
    if self._sharing_state is None:
      advertisements, client_ids = self._roster
      self._sharing_state = secagg.sharing_state(
          self.keys, advertisements, self._rng.child('share'), client_ids)
    return self._sharing_state

  def kept(self, fields):
    """Its step-3 state, from its entry in its batch's held file."""
    held = {u: (int(seed, 16), int(key, 16)) for u, seed, key in
            fields['held']}
    return secagg.MaskingState(self.sharing_state,
                               tuple(fields['share_senders']), held)


def held_fields(masking):
  """A client's step-3 state (the shares it holds) as JSON fields."""
  return {'share_senders': list(masking.share_senders),
          'held': [[u, hex(seed), hex(key)]
                   for u, (seed, key) in masking.held_shares.items()]}
