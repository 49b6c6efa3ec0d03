"""A client's side of the protocol: its secret and what it draws from it.
Every step redraws a client's keys and shares from its secret and the
round's attempt, so any worker can run any of its steps and no server step
needs a secret; a worker keeps the clients it has drawn (their keys are the
costly part).

Against a malicious server a client is enrolled when its secret is made:
its identity key derives from the secret, and its public identity key goes
to the trust store, `client_secrets/identities/` (the clients' side: no
server step writes there). Clients read the others' identity keys there,
never from the round's files. Each client also keeps, beside its secret,
the round ids it served with a digest of its input (`served/`: a round
replayed on another input is refused, a step retried on the same goes on)
and the
contributor list it signed each round (`signed/`: it signs one).
"""

import functools
import hashlib
import json
import os

import numpy as np
import tensorflow as tf

from beam_runner.secure import messages
from beam_runner.worker_io import client_data
from canonical import io as storage_lib
from canonical import secagg

SECRET_BYTES = 32
SECRETS_DIR = 'client_secrets'
IDENTITIES_DIR = 'identities'
SERVED_DIR = 'served'
SIGNED_DIR = 'signed'

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


def _round_record(secure_round, directory, client_id, suffix=''):
  """Where a client keeps what it did in this round (`served/`, `signed/`)."""
  return storage_lib.join(secure_round.secrets_directory, directory,
                          client_data.file_name(client_id),
                          secure_round.round_id.replace('/', '-') + suffix)


def _create_once(storage, path, data):
  """Writes `data` create-only unless the same bytes are there (a step
  retried; a client enrolled before); False if other bytes are."""
  try:
    return storage.read_bytes(path) == data
  except storage_lib.NotFound:
    pass
  try:
    storage.create_only(path, data)
    return True
  except storage_lib.AlreadyExists:
    return storage.read_bytes(path) == data


def enroll(secure_round, client_id, secret):
  """The client's identity key; its public key written to the trust store
  (the same bytes whoever writes them)."""
  identity = secagg.identity.identity_from_secret(secret)
  path = storage_lib.join(secure_round.secrets_directory, IDENTITIES_DIR,
                          client_data.file_name(client_id) + '.pub')
  public = secagg.identity.public_bytes(identity)
  if not _create_once(secure_round.storage, path, public):
    raise secagg.SecAggError(f'client {client_id!r}: the trust store holds '
                             'another identity key for it')
  return identity


class TrustStore:
  """The trust store as files, one per enrolled client, read as the round's
  advertisements name them (and kept by each worker once found: identities
  do not change)."""

  _KEYS = messages.Cache(1 << 16)

  def __init__(self, secure_round):
    self._secure_round = secure_round

  def _store(self, client_id):
    """The client's enrolled key as a one-entry store, or None (looked for
    again next time: it may enroll later)."""
    path = storage_lib.join(self._secure_round.secrets_directory,
                            IDENTITIES_DIR,
                            client_data.file_name(client_id) + '.pub')
    try:
      return self._KEYS.get(path, lambda _: secagg.identity.TrustStore(
          {client_id: self._secure_round.storage.read_bytes(path)}))
    except (storage_lib.NotFound, secagg.SecAggError):
      return None

  def __contains__(self, client_id):
    return self._store(client_id) is not None

  def verifies(self, client_id, signature, *label_parts):
    store = self._store(client_id)
    return store is not None and store.verifies(client_id, signature,
                                                *label_parts)


def claim_round(secure_round, client_id, secure_input):
  """Records that the client serves this round with this input (a digest);
  ProtocolViolationError if it served the round id before with another
  input (a replay: the same masks on two inputs give away their
  difference). The same input again is a retried step: its masked input is
  the same bytes, and it goes on."""
  path = _round_record(secure_round, SERVED_DIR, client_id)
  digest = hashlib.sha256()
  for leaf in tf.nest.flatten(secure_input):
    digest.update(np.ascontiguousarray(leaf).tobytes())
  if not _create_once(secure_round.storage, path,
                      digest.hexdigest().encode()):
    raise secagg.ProtocolViolationError(
        f'client {client_id!r}: round {secure_round.round_id!r} was served '
        'before with another input; a replayed round id could unmask this '
        'client\'s input, so it is refused')


def record_signed(secure_round, client_id, contributors):
  """Records the contributor list the client signs this round (one list a
  round, kept beside its secret); ProtocolViolationError for another."""
  path = _round_record(secure_round, SIGNED_DIR, client_id, '.json')
  data = json.dumps(sorted(contributors)).encode()
  if not _create_once(secure_round.storage, path, data):
    raise secagg.ProtocolViolationError(
        f'client {client_id!r}: already signed another contributor list in '
        f'round {secure_round.round_id!r}')


def signed_list(secure_round, client_id):
  """The contributor list the client signed this round, or None."""
  path = _round_record(secure_round, SIGNED_DIR, client_id, '.json')
  try:
    return frozenset(json.loads(secure_round.storage.read_bytes(path)))
  except storage_lib.NotFound:
    return None


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
    secret = _secret(paths, client_id)
    self._rng = secagg.SeededRandom(secret).child('round', paths.round_id)
    self.round = the_round
    self.id = client_id
    identity = trust = None
    if paths.malicious_server:
      identity, trust = enroll(paths, client_id, secret), TrustStore(paths)
    self.keys, self.advertisement = secagg.advertise_keys(
        client_id, the_round.config, self._rng.child('advertise'), identity,
        trust)
    self._sharing_state = None

  @functools.cached_property
  def _roster(self):
    """The roster the server sends it: in a sparse round, its
    neighborhood's keys and the round's ids."""
    received = secagg.roster_for(self.round.config,
                                 messages.roster(self.round.paths), self.id)
    return received.advertisements, received.client_ids or None

  def noise_source(self):
    """Where its distributed DP noise comes from: its secret and the round
    (the server never holds it), a fresh stream each call, so a retried
    step draws the same noise."""
    return self._rng.child('client noise')

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
    """Its step-3 state, from its entry in its batch's held file (and the
    list it signed, against a malicious server)."""
    held = {u: (int(seed, 16), int(key, 16)) for u, seed, key in
            fields['held']}
    signed = signed_list(self.round.paths, self.id) if (
        self.round.paths.malicious_server) else None
    return secagg.MaskingState(self.sharing_state,
                               tuple(fields['share_senders']), held,
                               signed=signed)


def held_fields(masking):
  """A client's step-3 state (the shares it holds) as JSON fields."""
  return {'share_senders': list(masking.share_senders),
          'held': [[u, hex(seed), hex(key)]
                   for u, (seed, key) in masking.held_shares.items()]}
