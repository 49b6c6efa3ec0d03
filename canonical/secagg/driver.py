"""One whole round, every party in this process: for tests and local runners.

`secure_sum_round` calls each party's steps in protocol order, routes messages
the way the server would, and simulates dropouts at each step. It records every
message that reached the server (or the aggregator) and every message the server
sent, so that tests can inspect what the server saw and costs can be counted.
"""

import dataclasses
from typing import Any

from canonical.secagg import aggregation
from canonical.secagg import client
from canonical.secagg import config as config_lib
from canonical.secagg.errors import SecAggError
from canonical.secagg import graph
from canonical.secagg import identity as identity_lib
from canonical.secagg import messages
from canonical.secagg import randomness
from canonical.secagg import roster as roster_lib
from canonical.secagg import server


@dataclasses.dataclass(frozen=True)
class SecureSumResult:
  """A round's sum, and what crossed the network."""
  sum: Any
  config: config_lib.SecAggConfig
  share_senders: tuple  # U2.
  contributors: tuple  # U3: whose inputs the sum holds.
  responders: tuple  # U5: who revealed shares in step 4.
  messages_to_server: tuple
  messages_to_clients: tuple


def secure_sum_round(client_inputs, moduli, threshold, *,
                     dropped_before_sharing=(), dropped_before_input=(),
                     dropped_before_unmasking=(), round_id=0, seed=None,
                     neighbors=None, malicious_server=False):
  """Runs the protocol on `client_inputs`; returns their sum modulo `moduli`.

  Args:
    client_inputs: {client id: secure input}, ids all ints or all strs, inputs
      tf.nest structures of integer arrays with values in [0, m).
    moduli: an int for every leaf, or a structure of ints like the inputs.
    threshold: t; any t survivors can unmask, fewer cannot.
    dropped_before_sharing: clients that advertise keys, then go silent.
    dropped_before_input: clients that share keys but send no masked input
      (the survivors reveal their mask keys; their inputs are not in the sum).
    dropped_before_unmasking: clients whose masked input arrives but that
      reveal no shares (their inputs are in the sum).
    round_id: distinguishes rounds, so masks never repeat.
    seed: None for OS randomness (production); an int, str or bytes for a
      reproducible round (tests only).
    neighbors: None (every pair of clients masks) or an even k: each client
      masks with and shares among k ring neighbors (`secagg.graph`); 'auto':
      the k `graph.neighbors_for` picks for these clients.
    malicious_server: the active version: clients enrolled with identity
      keys in a trust store sign their advertisements and, in a
      consistency check before unmasking, the contributor list (see
      `client`); t must be more than half the clients holding each
      client's shares.

  Returns:
    A `SecureSumResult` whose `sum` is the modular sum of the contributors'
    inputs, in the inputs' structure and dtypes.

  Raises:
    RoundFailedError: fewer than t clients survived a step.
    SecAggError: bad inputs, naming the client and the leaf.
  """
  ids = roster_lib.check_client_ids(client_inputs)
  if not ids:
    raise SecAggError('no clients')
  dropped = _check_dropouts(ids, {
      'dropped_before_sharing': dropped_before_sharing,
      'dropped_before_input': dropped_before_input,
      'dropped_before_unmasking': dropped_before_unmasking})
  if (isinstance(threshold, int) and not isinstance(threshold, bool)
      and not 1 <= threshold <= len(ids)):
    raise SecAggError(f'threshold {threshold} is out of range [1, {len(ids)}] '
                      f'for {len(ids)} clients')
  neighbors = graph.resolve(neighbors, len(ids))
  graph.check_threshold(threshold, neighbors)
  try:
    config = config_lib.make_config(client_inputs[ids[0]], moduli, threshold,
                                    round_id, neighbors)
  except SecAggError as e:
    raise SecAggError(f'client {ids[0]!r} (whose input sets the round\'s '
                      f'structure): {e}') from e
  rng = randomness.source(seed)
  to_server, to_clients = [], []
  identities, trust = {}, None
  if malicious_server:  # Enrollment, before and apart from any round.
    identities = {u: identity_lib.identity_from_secret(
        rng.child('client', u, 'enroll').random_bytes(32)) for u in ids}
    trust = identity_lib.enroll(identities)
  # Step 1: advertise keys.
  keys = {}
  for u in ids:
    keys[u], advertisement = client.advertise_keys(
        u, config, rng.child('client', u, 'advertise'), identities.get(u),
        trust)
    to_server.append(advertisement)
  roster = tuple(to_server)
  server.check_survivors(messages.ADVERTISE_KEYS, len(roster), threshold)

  # Step 2: share keys, relayed by the server.
  sharers = [u for u in ids if u not in dropped['dropped_before_sharing']]
  received = {u: server.roster_for(config, roster, u) for u in sharers}
  to_clients.extend(received.values())
  sharing, encrypted = {}, []
  for u in sharers:
    sharing[u], outgoing = client.share_keys(
        keys[u], received[u].advertisements, rng.child('client', u, 'share'),
        received[u].client_ids or None)
    encrypted.extend(outgoing)
  to_server.extend(encrypted)
  server.check_survivors(messages.SHARE_KEYS, len(sharers), threshold)
  inbox = server.relay_shares(encrypted, sharers)

  # Step 3: masked inputs, summed by the aggregator.
  masking, total = {}, aggregation.zero(config)
  for u in sharers:
    to_clients.extend(inbox[u])
  for u in sharers:
    if u in dropped['dropped_before_input']:
      continue
    masking[u], masked = client.masked_input(sharing[u], client_inputs[u],
                                             inbox[u])
    to_server.append(masked)
    total = aggregation.accumulate(config, total, masked)
  contributors = tuple(sorted(total.contributors))
  server.check_survivors(messages.MASKED_INPUT, len(contributors), threshold)
  server.check_connected(config, roster, contributors)

  # Step 4: unmasking (after the consistency check, with one).
  responses = []
  for u in contributors:
    to_clients.append(messages.ContributorList(u, contributors, len(sharers)))
  answering = [u for u in contributors
               if u not in dropped['dropped_before_unmasking']]
  signatures = None
  if malicious_server:
    signatures = {}
    for u in answering:
      signed = client.sign_contributors(masking[u], contributors)
      to_server.append(signed)
      signatures[u] = signed.signature
    server.check_survivors(messages.CONSISTENCY, len(signatures), threshold)
    hoods = graph.neighborhoods(config, roster_lib.index(roster))
    for u in answering:  # Each gets the signatures of its shares' holders.
      to_clients.append(messages.SignedContributors(u, contributors, {
          v: s for v, s in signatures.items() if v in hoods[u] | {u}}))
  for u in answering:
    response = client.unmasking_shares(masking[u], contributors, signatures)
    to_server.append(response)
    responses.append(response)
  total_sum = server.unmask(config, roster, sharers, total, responses)
  return SecureSumResult(total_sum, config, tuple(sharers), contributors,
                         tuple(r.sender for r in responses), tuple(to_server),
                         tuple(to_clients))


def _check_dropouts(ids, dropouts):
  known, owner, out = set(ids), {}, {}
  for name, clients in dropouts.items():
    clients = set(clients)
    unknown = clients - known
    if unknown:
      raise SecAggError(f'{name}: {sorted(unknown, key=repr)} are not clients '
                        'of the round')
    for u in clients:
      if u in owner:
        raise SecAggError(f'client {u!r} is in both {owner[u]} and {name}: a '
                          'client drops once')
      owner[u] = name
    out[name] = clients
  return out
