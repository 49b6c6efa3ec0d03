"""The server's part: relay, count survivors, and unmask the sum.

The server learns the sum of the contributors' inputs and nothing else: it sees
public keys, share ciphertexts it cannot open, masked inputs (uniform in
[0, m)), and for each client exactly one of its two secrets (the self-mask seed
of a contributor, the mask private key of a client that dropped before its
input). `unmask` refuses any set of responses that would give it both, and
(in a sparse round) contributors that are not connected in the round's graph.
"""

import collections

from cryptography.hazmat.primitives.asymmetric import x25519

from canonical.secagg import config as config_lib
from canonical.secagg.errors import ProtocolViolationError
from canonical.secagg.errors import RoundFailedError
from canonical.secagg.errors import SecAggError
from canonical.secagg import graph
from canonical.secagg import keys as keys_lib
from canonical.secagg import masks
from canonical.secagg import messages
from canonical.secagg import roster as roster_lib
from canonical.secagg import shamir


def check_survivors(step, survivors, threshold):
  """Fails the round cleanly if fewer than `threshold` clients did `step`."""
  if survivors < threshold:
    raise RoundFailedError(step, survivors, threshold)


def check_connected(config, roster, contributors):
  """Fails the round if the contributors' masks would not hide their parts:
  ask no client to unmask then."""
  if not graph.connected(config, roster_lib.index(roster), contributors):
    raise RoundFailedError(
        messages.MASKED_INPUT, len(contributors), config.threshold,
        reason='the contributors are not connected in the round\'s graph, so '
        'unmasking would reveal the sum of each connected part')


def roster_for(config, roster, client_id):
  """The step-1 reply to one client: every advertisement in a complete
  round; in a sparse one its neighborhood's and the round's client ids (it
  places itself on the ring and checks it got its neighbors; the others'
  keys are no use to it)."""
  by_id = roster_lib.index(roster)
  if graph.is_complete(config.neighbors, len(by_id)):
    return messages.Roster(client_id, tuple(roster))
  hood = graph.neighborhoods(config, by_id)[client_id] | {client_id}
  return messages.Roster(client_id, tuple(by_id[u] for u in sorted(hood)),
                         roster_lib.round_ids(by_id))


def relay_shares(encrypted_shares, share_senders):
  """{recipient: the EncryptedShares addressed to it}, within U2."""
  share_senders = set(share_senders)
  inbox = {client_id: [] for client_id in share_senders}
  for message in encrypted_shares:
    if message.sender in share_senders and message.recipient in share_senders:
      inbox[message.recipient].append(message)
  return inbox


def unmask(config, roster, share_senders, masked_sum, responses):
  """The exact sum modulo m of the contributors' inputs, structured.

  Args:
    config: the round's `SecAggConfig`.
    roster: every `KeyAdvertisement` of step 1 (U1).
    share_senders: the ids whose shares were relayed in step 2 (U2).
    masked_sum: the aggregator's `MaskedSum` over the contributors (U3).
    responses: the `UnmaskingShares` of the contributors still online.

  Raises:
    RoundFailedError: fewer than t contributors, contributors not connected in
      the round's graph, or fewer than t responders holding shares of some
      client; nothing is returned.
    ProtocolViolationError: responses that reveal, for one client, both its
      self-mask seed and its mask key, or the wrong one of the two.
    SecAggError: malformed responses, or a reconstructed mask key that does not
      match its advertised public key (a corrupted share).
  """
  by_id = roster_lib.index(roster)
  share_senders = frozenset(share_senders)
  contributors = masked_sum.contributors
  if not share_senders <= set(by_id):
    raise SecAggError(f'share senders {sorted(share_senders - set(by_id))} did '
                      'not advertise keys')
  if not contributors <= share_senders:
    raise SecAggError(f'contributors {sorted(contributors - share_senders)} '
                      'did not share keys')
  check_survivors(messages.SHARE_KEYS, len(share_senders), config.threshold)
  check_survivors(messages.MASKED_INPUT, len(contributors), config.threshold)
  check_connected(config, roster, contributors)
  hoods = graph.neighborhoods(config, by_id)
  values = config_lib.check_flat(config, masked_sum.values, 'masked sum')
  responses = _check_responses(by_id, hoods, share_senders, contributors,
                               responses)
  check_survivors(messages.UNMASKING, len(responses), config.threshold)
  holders_of = collections.defaultdict(list)  # (kind, client) -> responses.
  for r in sorted(responses, key=lambda r: r.x):
    for shares_of in ('self_mask_shares', 'key_shares'):
      for u in getattr(r, shares_of):
        holders_of[shares_of, u].append(r)

  def reconstruct(shares_of, client_id):
    holders = holders_of[shares_of, client_id]
    if len(holders) < config.threshold:
      raise RoundFailedError(
          messages.UNMASKING, len(holders), config.threshold,
          reason=f'{len(holders)} responders hold shares of client '
          f'{client_id!r}, fewer than the threshold {config.threshold}')
    chosen = holders[:config.threshold]
    weights = shamir.lagrange_weights_at_zero(tuple(r.x for r in chosen))
    secret = sum(w * getattr(r, shares_of)[client_id]
                 for w, r in zip(weights, chosen)) % shamir.PRIME
    if secret >= 2**256:
      raise SecAggError(f'client {client_id!r}: a reconstructed secret is out '
                        'of range (a corrupted share)')
    return secret.to_bytes(32, 'big')

  plus = [[] for _ in config.leaves]  # Mask keys, per leaf.
  minus = [[] for _ in config.leaves]
  for u in sorted(contributors):
    seed = reconstruct('self_mask_shares', u)
    for i in range(len(config.leaves)):
      minus[i].append(keys_lib.self_mask_key(config, seed, u, i))
  for u in sorted(share_senders - contributors):
    mask_key = x25519.X25519PrivateKey.from_private_bytes(
        reconstruct('key_shares', u))
    if keys_lib.public_bytes(mask_key) != by_id[u].mask_public_key:
      raise SecAggError(
          f'client {u!r}: its reconstructed mask key does not match its '
          'advertised public key (a corrupted share)')
    for v in sorted(contributors & hoods[u]):
      seed = keys_lib.pair_seed(config, mask_key, u, by_id[v].mask_public_key,
                                v)
      for i in range(len(config.leaves)):
        # v added PRG(s_uv) if v < u and subtracted it if v > u: undo that.
        (minus if v < u else plus)[i].append(
            keys_lib.pair_mask_key(config, seed, i))
  values = [masks.add_masks(x, p, m, leaf.modulus)
            for leaf, x, p, m in zip(config.leaves, values, plus, minus)]
  return config_lib.pack_output(config, values)


def _check_responses(by_id, hoods, share_senders, contributors, responses):
  """The responses, checked; refuses any revealing both secrets of a client."""
  responses = list(responses)
  points = roster_lib.share_points(by_id)
  seen = set()
  for r in responses:
    if not isinstance(r, messages.UnmaskingShares):
      raise SecAggError(f'response {r!r} is not UnmaskingShares')
    if r.sender in seen:
      raise SecAggError(f'client {r.sender!r} responded twice')
    seen.add(r.sender)
    if r.sender not in contributors:
      raise SecAggError(
          f'client {r.sender!r} responded but its masked input is not in the '
          'sum')
    if r.x != points[r.sender]:
      raise SecAggError(f'client {r.sender!r}: share point {r.x}, expected '
                        f'{points[r.sender]}')
  seed_owners = {u for r in responses for u in r.self_mask_shares}
  key_owners = {u for r in responses for u in r.key_shares}
  both = seed_owners & key_owners
  if both:
    raise ProtocolViolationError(
        f'refusing to unmask: the responses reveal both the self-mask seed and '
        f'the mask key of clients {sorted(both)}, which would expose their '
        'inputs')
  if seed_owners - contributors:
    raise ProtocolViolationError(
        'refusing to unmask: self-mask seed shares of clients '
        f'{sorted(seed_owners - contributors)}, whose inputs are not in the '
        'sum')
  if key_owners & contributors:
    raise ProtocolViolationError(
        'refusing to unmask: mask key shares of clients '
        f'{sorted(key_owners & contributors)}, whose inputs are in the sum')
  dropped = share_senders - contributors
  for r in responses:
    held = (hoods[r.sender] | {r.sender}) & share_senders
    if (set(r.self_mask_shares) != held & contributors
        or set(r.key_shares) != held & dropped):
      raise SecAggError(
          f'client {r.sender!r}: incomplete response (shares for '
          f'{sorted(set(r.self_mask_shares))} and {sorted(set(r.key_shares))})')
  return responses
