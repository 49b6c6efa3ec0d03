"""A client's steps, each a function of its own state and messages.

  1. `advertise_keys`: fresh key pairs for this round; publish the public keys.
  2. `share_keys`: draw the self-mask seed b_u; Shamir-share b_u and the mask
     private key among its neighbors (all advertised clients, or its ring
     neighbors in a sparse round: see `graph`), threshold t; encrypt each
     neighbor's shares for it alone.
  3. `masked_input`: y_u = x_u + PRG(b_u) + sum_{v > u} PRG(s_uv)
     - sum_{v < u} PRG(s_uv) mod m, over the neighbors v that shared keys.
  4. `unmasking_shares`: told whose masked inputs the sum holds, reveal for each
     of them the share of its self-mask seed and for each of the others the
     share of its mask private key: one or the other per client, never both.

Against a malicious server (`advertise_keys(..., identity=, trust=,
served=)`, Bonawitz et al.'s active version) a client also refuses a round
id it served before, signs its advertisement and drops every peer whose
advertisement the trust store does not verify (named in its state's
`dropped`), refuses a threshold of at most half the clients holding its
shares, signs one contributor list a round (`sign_contributors`, the
consistency check) and reveals shares only for a list that at least t of
its members signed.
"""

import dataclasses
from typing import Any, Mapping, Optional

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric import x25519

from canonical.secagg import config as config_lib
from canonical.secagg.errors import ProtocolViolationError
from canonical.secagg.errors import RoundFailedError
from canonical.secagg.errors import SecAggError
from canonical.secagg import graph
from canonical.secagg import identity as identity_lib
from canonical.secagg import keys as keys_lib
from canonical.secagg import masks
from canonical.secagg import messages
from canonical.secagg import randomness
from canonical.secagg import roster as roster_lib
from canonical.secagg import shamir


@dataclasses.dataclass(frozen=True)
class ClientKeys:
  """A client's private keys for one round (step 1)."""
  client_id: Any
  config: config_lib.SecAggConfig
  cipher_key: x25519.X25519PrivateKey = dataclasses.field(repr=False)
  mask_key: x25519.X25519PrivateKey = dataclasses.field(repr=False)
  # The cipher key's agreements with peers, by their public key.
  agreements: dict = dataclasses.field(default_factory=dict, repr=False,
                                       compare=False)
  # Against a malicious server: its identity key, and the trust store.
  identity: Any = dataclasses.field(default=None, repr=False, compare=False)
  trust: Any = dataclasses.field(default=None, repr=False, compare=False)

  def advertisement(self):
    cipher = keys_lib.public_bytes(self.cipher_key)
    mask = keys_lib.public_bytes(self.mask_key)
    signature = b'' if self.identity is None else identity_lib.sign(
        self.identity, *identity_lib.advertisement_label(
            self.config.round_id, self.client_id, cipher, mask))
    return messages.KeyAdvertisement(self.client_id, cipher, mask, signature)


@dataclasses.dataclass(frozen=True)
class SharingState:
  """What a client keeps after step 2."""
  keys: ClientKeys
  # The advertisements it received: its neighborhood's, at least.
  roster: Mapping[Any, messages.KeyAdvertisement]
  points: Mapping[Any, int]  # Every client of the round's.
  neighborhoods: Mapping[Any, frozenset]  # The round's graph.
  self_mask_seed: bytes = dataclasses.field(repr=False)
  own_shares: tuple = dataclasses.field(repr=False)  # (seed share, key share).
  # Peers whose advertisements the trust store refused: {id: why}.
  dropped: Mapping[Any, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(eq=False)
class MaskingState:
  """What a client keeps after step 3.

  `answered` is the one mutable field: the contributor list this client has
  revealed shares for. A second request with another list is refused, since
  answering both could reveal both secrets of one client.
  """
  sharing: SharingState
  share_senders: tuple
  held_shares: Mapping[Any, tuple] = dataclasses.field(repr=False)
  answered: Optional[frozenset] = None
  signed: Optional[frozenset] = None  # The contributor list it signed.


def advertise_keys(client_id, config, rng=None, identity=None, trust=None,
                   served=None):
  """Step 1: (the client's private keys, its `KeyAdvertisement`).

  Against a malicious server: `identity` (its Ed25519 key) signs the
  advertisement, `trust` (a `TrustStore`) checks the others' in the later
  steps, and `served` (a `ServedRounds`) refuses a round id served before
  (ProtocolViolationError)."""
  roster_lib.check_client_id(client_id)
  if (identity is None) != (trust is None):
    raise SecAggError(f'client {client_id!r}: an identity key and a trust '
                      'store go together')
  if served is not None:
    served.claim(client_id, config.round_id)
  rng = rng or randomness.SystemRandom()
  keys = ClientKeys(client_id, config, keys_lib.new_private_key(rng),
                    keys_lib.new_private_key(rng), identity=identity,
                    trust=trust)
  return keys, keys.advertisement()


def share_keys(keys, roster, rng=None, client_ids=None):
  """Step 2: (the client's state, one `EncryptedShares` per neighbor).

  Args:
    keys: the client's `ClientKeys`.
    roster: the `KeyAdvertisement`s the server sent it after step 1: every
      one (U1), or with `client_ids` its neighborhood's (`server.roster_for`).
    rng: the source of b_u and of the Shamir coefficients (the OS by default).
    client_ids: every client of the round (U1), when `roster` holds only
      this client's neighborhood.

  Raises:
    RoundFailedError: fewer than t clients advertised keys.
    SecAggError: the roster lacks this client or its true keys, or a
      neighbor's, or is malformed.
  """
  me, config = keys.client_id, keys.config
  rng = rng or randomness.SystemRandom()
  roster, dropped = _verified(keys, roster)
  by_id, ids, hoods = _roster_with(keys, roster, client_ids, dropped)
  holders = sorted((hoods[me] | {me}) - set(dropped))
  _check_majority(keys, holders)
  if len(holders) < config.threshold:
    raise RoundFailedError(messages.ADVERTISE_KEYS, len(holders),
                           config.threshold)
  points = _share_points(keys, ids, dropped)
  seed, seed_polynomial, key_polynomial = _draw_sharing(keys, rng)
  outgoing, own_shares = [], None
  for client_id in holders:
    x = points[client_id]
    seed_share = shamir.evaluate(seed_polynomial, x)
    key_share = shamir.evaluate(key_polynomial, x)
    if client_id == me:
      own_shares = (seed_share, key_share)
      continue
    plaintext = (messages.to_field_bytes(seed_share)
                 + messages.to_field_bytes(key_share))
    ciphertext = keys_lib.encrypt_shares(
        config, keys.cipher_key, by_id[client_id].cipher_public_key, me,
        client_id, plaintext, keys.agreements)
    outgoing.append(messages.EncryptedShares(me, client_id, ciphertext))
  state = SharingState(keys, by_id, points, hoods, seed, own_shares,
                       dropped)
  return state, outgoing


def _share_points(keys, ids, dropped):
  """The Shamir points of the round's clients as the server numbers them:
  over every id it advertised, those whose keys this client refused too."""
  if not dropped:
    return roster_lib.share_points(ids)
  me = keys.client_id
  return roster_lib.share_points(roster_lib.round_ids(set(ids) | {
      u for u in dropped if type(u) is type(me)}))  # pylint: disable=unidiomatic-typecheck


def _verified(keys, roster):
  """(the advertisements the trust store verifies, {refused sender: why});
  without a trust store, the roster as it is."""
  if keys.trust is None:
    return roster, {}
  kept, dropped = [], {}
  for advertisement in roster:
    sender = getattr(advertisement, 'sender', None)
    if not isinstance(advertisement, messages.KeyAdvertisement):
      raise SecAggError(f'client {keys.client_id!r}: roster entry '
                        f'{advertisement!r} is not a KeyAdvertisement')
    if sender not in keys.trust:
      dropped[sender] = 'not enrolled in the trust store'
    elif not keys.trust.verifies(
        sender, advertisement.signature, *identity_lib.advertisement_label(
            keys.config.round_id, sender, advertisement.cipher_public_key,
            advertisement.mask_public_key)):
      dropped[sender] = 'its advertisement\'s signature does not verify'
    else:
      kept.append(advertisement)
  return tuple(kept), dropped


def _check_majority(keys, holders):
  """Against a malicious server: t must be more than half the clients that
  hold this client's shares (the round's, or its SecAgg+ neighborhood and
  itself), or two disjoint contributor lists could each reach t and unmask
  two sums whose difference is one client's input."""
  threshold = keys.config.threshold
  if keys.trust is not None and 2 * threshold <= len(holders):
    raise ProtocolViolationError(
        f'client {keys.client_id!r}: threshold {threshold} is not more than '
        f'half of the {len(holders)} clients holding its shares; refused')


def _roster_with(keys, roster, client_ids, dropped=()):
  """(the roster by client id, the round's ids, its graph): the roster must
  carry this client's true keys, and with `client_ids` exactly its
  neighborhood's but for the `dropped` (whose advertisements it refused)."""
  me = keys.client_id
  by_id = roster_lib.index(roster)
  if by_id.get(me) != keys.advertisement():
    raise SecAggError(
        f'client {me!r}: the roster does not carry this client\'s own public '
        'keys')
  if client_ids is None:
    return by_id, by_id, graph.neighborhoods(keys.config, by_id)
  ids = roster_lib.round_ids(client_ids)
  hoods = graph.neighborhoods(keys.config, ids)
  strangers = sorted(u for u in by_id if u not in hoods)
  if strangers:
    raise SecAggError(f'client {me!r}: the roster advertises clients '
                      f'{strangers} that are not in the round')
  expected = (hoods[me] | {me}) - set(dropped)
  if set(by_id) != expected:
    raise SecAggError(
        f'client {me!r}: the roster should carry the keys of its '
        f'neighborhood {sorted(expected)}; it lacks '
        f'{sorted(expected - set(by_id))} and has '
        f'{sorted(set(by_id) - expected)}')
  return by_id, ids, hoods


def _draw_sharing(keys, rng):
  """(b_u, the polynomial sharing b_u, the one sharing the mask key), drawn
  from `rng` in one fixed order."""
  threshold = keys.config.threshold
  seed = rng.random_bytes(keys_lib.SEED_BYTES)
  seed_polynomial = shamir.random_polynomial(int.from_bytes(seed, 'big'),
                                             threshold, rng)
  key_polynomial = shamir.random_polynomial(
      int.from_bytes(keys_lib.private_bytes(keys.mask_key), 'big'), threshold,
      rng)
  return seed, seed_polynomial, key_polynomial


def sharing_state(keys, roster, rng, client_ids=None):
  """The state `share_keys(keys, roster, rng, client_ids)` returned,
  redrawn from an `rng` in the same state without encrypting anything: how
  a stateless worker recovers a client's step 2 (its own shares cost O(t),
  not O(n t) and n key agreements)."""
  roster, dropped = _verified(keys, roster)
  by_id, ids, hoods = _roster_with(keys, roster, client_ids, dropped)
  points = _share_points(keys, ids, dropped)
  seed, seed_polynomial, key_polynomial = _draw_sharing(keys, rng)
  x = points[keys.client_id]
  own_shares = (shamir.evaluate(seed_polynomial, x),
                shamir.evaluate(key_polynomial, x))
  return SharingState(keys, by_id, points, hoods, seed, own_shares, dropped)


def receive_shares(state, received):
  """The client's state after step 2's relay: the shares others sent it,
  decrypted (what step 3 masks with and step 4 reveals from).

  Raises:
    RoundFailedError: fewer than t clients shared keys.
    SecAggError: a share message that is not for this client or does not
      decrypt.
  """
  keys = state.keys
  me, config = keys.client_id, keys.config
  held = {me: state.own_shares}
  for message in received:
    sender = message.sender
    if sender in state.dropped:
      continue  # Its keys were refused: nothing of it is used.
    if message.recipient != me:
      raise SecAggError(
          f'client {me!r}: received shares addressed to {message.recipient!r}')
    if sender not in state.neighborhoods[me]:
      raise SecAggError(f'client {me!r}: unexpected shares from {sender!r} '
                        '(itself, a client that advertised no keys, or not '
                        'one of its neighbors)')
    if sender in held:
      raise SecAggError(f'client {me!r}: shares from {sender!r} arrived twice')
    try:
      plaintext = keys_lib.decrypt_shares(
          config, keys.cipher_key, state.roster[sender].cipher_public_key,
          sender, me, message.ciphertext, keys.agreements)
    except InvalidTag as e:
      raise SecAggError(
          f'client {me!r}: shares from {sender!r} do not decrypt') from e
    half = shamir.FIELD_BYTES
    held[sender] = (messages.from_field_bytes(plaintext[:half]),
                    messages.from_field_bytes(plaintext[half:]))
  share_senders = tuple(sorted(held))
  if len(share_senders) < config.threshold:
    raise RoundFailedError(messages.SHARE_KEYS, len(share_senders),
                           config.threshold)
  return MaskingState(state, share_senders, held)


def masked_input(state, value, received):
  """Step 3: (the client's state, its `MaskedInput` for the aggregator).

  Args:
    state: the client's `SharingState`.
    value: the client's secure input, a structure like the round's.
    received: the `EncryptedShares` addressed to this client that the server
      relays; their senders (and this client) are U2, the clients whose
      pairwise masks this client adds.

  Raises:
    RoundFailedError: fewer than t clients shared keys.
    SecAggError: an invalid input (naming the client and the leaf), or a share
      message that is not for this client or does not decrypt.
  """
  keys = state.keys
  me, config = keys.client_id, keys.config
  flat = config_lib.flatten_input(config, value, me)
  masking = receive_shares(state, received)
  seeds = {v: keys_lib.pair_seed(config, keys.mask_key, me,
                                 state.roster[v].mask_public_key, v)
           for v in masking.share_senders if v != me}
  values = []
  for i, (leaf, x) in enumerate(zip(config.leaves, flat)):
    plus = [keys_lib.self_mask_key(config, state.self_mask_seed, me, i)]
    minus = []
    for v, seed in seeds.items():
      (plus if me < v else minus).append(
          keys_lib.pair_mask_key(config, seed, i))
    values.append(masks.add_masks(x, plus, minus, leaf.modulus))
  masked = messages.MaskedInput(me, tuple(values), config.moduli)
  return masking, masked


def sign_contributors(state, contributors):
  """The consistency check, against a malicious server: this client's
  `ContributorsSignature` of the contributor list it was sent, after the
  checks `unmasking_shares` makes. It signs one list a round: a server that
  sends two lists (to unmask two sums that differ by one client's input)
  cannot gather t signatures on both, since t is more than half the clients.

  Raises:
    ProtocolViolationError: a list `unmasking_shares` would refuse, or
      another list than the one this client signed; SecAggError in a round
      that trusts its server (no identity key).
  """
  keys = state.sharing.keys
  if keys.identity is None:
    raise SecAggError(f'client {keys.client_id!r}: it has no identity key, '
                      'so its round has no consistency check')
  contributors = _checked_contributors(state, contributors)
  if state.signed is not None and state.signed != contributors:
    raise ProtocolViolationError(
        f'client {keys.client_id!r}: already signed another contributor list '
        f'this round (they differ in {sorted(state.signed ^ contributors)})')
  state.signed = contributors
  return messages.ContributorsSignature(keys.client_id, identity_lib.sign(
      keys.identity, *identity_lib.contributors_label(keys.config.round_id,
                                                      contributors)))


def _checked_contributors(state, contributors):
  """The contributor list as a frozenset, if this client may unmask it."""
  me, config = state.sharing.keys.client_id, state.sharing.keys.config
  contributors = list(contributors)
  if len(set(contributors)) != len(contributors):
    raise ProtocolViolationError(
        f'client {me!r}: the contributor list names a client twice')
  contributors = frozenset(contributors)
  hoods, dropped = state.sharing.neighborhoods, set(state.sharing.dropped)
  # A peer whose keys it refused may be in the sum (others took its keys):
  # this client holds nothing of it, and masked nothing with it.
  unknown = ((contributors - set(hoods)) | (
      contributors & (hoods[me] | {me})) - set(state.share_senders)) - dropped
  if unknown:
    raise ProtocolViolationError(
        f'client {me!r}: contributors {sorted(unknown)} did not share keys '
        'with it')
  if me not in contributors:
    raise ProtocolViolationError(
        f'client {me!r}: asked to unmask, but not listed among the '
        'contributors')
  if len(contributors) < config.threshold:
    raise RoundFailedError(messages.MASKED_INPUT, len(contributors),
                           config.threshold)
  if not graph.connected(config, state.sharing.points,
                         contributors - dropped):
    raise ProtocolViolationError(
        f'client {me!r}: the contributors are not connected in the round\'s '
        'graph: unmasking would reveal the sum of each connected part')
  return contributors


def _check_signed(state, contributors, signatures):
  """Against a malicious server: this client signed this very list, and at
  least t of the clients holding its shares (itself and its neighbors,
  everyone in a complete round: Bell et al.'s check) did, as members of the
  list. Signatures the trust store refuses do not count."""
  keys = state.sharing.keys
  me, config = keys.client_id, keys.config
  if state.signed != contributors:
    raise ProtocolViolationError(
        f'client {me!r}: asked to unmask a contributor list it did not sign')
  signatures = dict(signatures or {})
  label = identity_lib.contributors_label(config.round_id, contributors)
  holders = (state.sharing.neighborhoods[me] | {me}) & contributors
  valid = 0
  for u in sorted(holders):
    if keys.trust.verifies(u, signatures.get(u), *label):
      valid += 1
      if valid == config.threshold:
        return
  raise ProtocolViolationError(
      f'client {me!r}: the contributor list carries {valid} valid '
      f'signatures of its members holding its shares, fewer than the '
      f'threshold {config.threshold}; no share is revealed')


def unmasking_shares(state, contributors, signatures=None):
  """Step 4: this client's `UnmaskingShares`, given whose inputs the sum holds.

  Args:
    state: the client's `MaskingState`.
    contributors: the ids whose masked inputs the server summed (U3).
    signatures: against a malicious server, {client id: its
      `ContributorsSignature.signature`} of this list, t or more.

  Raises:
    RoundFailedError: fewer than t contributors.
    ProtocolViolationError: the list names a client that advertised no keys
      or a neighbor that did not share keys, leaves out this client, is not
      connected in the round's graph (the server could then unmask parts of
      the sum), or differs from a list answered before; against a malicious
      server, a list this client did not sign or that fewer than t of its
      members signed.
  """
  me = state.sharing.keys.client_id
  contributors = _checked_contributors(state, contributors)
  if state.answered is not None and state.answered != contributors:
    changed = sorted(state.answered ^ contributors)
    raise ProtocolViolationError(
        f'client {me!r}: already revealed shares for another contributor list; '
        f'answering this one too would reveal both the self-mask seed and the '
        f'mask key of clients {changed}')
  if state.sharing.keys.trust is not None:
    _check_signed(state, contributors, signatures)
  state.answered = contributors
  seed_shares = {u: state.held_shares[u][0] for u in state.share_senders
                 if u in contributors}
  key_shares = {u: state.held_shares[u][1] for u in state.share_senders
                if u not in contributors}
  return messages.UnmaskingShares(me, state.sharing.points[me], seed_shares,
                                  key_shares)
