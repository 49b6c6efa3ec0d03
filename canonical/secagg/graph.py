"""Who masks with whom: the complete graph, or a sparse ring (SecAgg+).

With `neighbors=None` every pair of clients shares a mask and every client
Shamir-shares its secrets with all others (Bonawitz et al. 2017): each client
costs O(n). With `neighbors=k` (even), the clients sit on a ring in an order
drawn from the round id, and each masks with and shares among the k/2 clients
on either side, a Harary graph of connectivity k as in Bell et al. (CCS 2020):
each client costs O(k).

Pairwise masks cancel within each connected part of the contributors' graph,
so the server of a sparse round could learn the sum of each part separately:
both the server and every client refuse to unmask a contributor set whose
graph is not connected (`check_connected`), and the round fails instead.
"""

import hashlib

from canonical.secagg import kdf
from canonical.secagg.errors import SecAggError


def check_neighbors(neighbors):
  """`neighbors` if it is None or an even int >= 2."""
  if neighbors is None:
    return None
  if (isinstance(neighbors, bool) or not isinstance(neighbors, int)
      or neighbors < 2 or neighbors % 2):
    raise SecAggError(
        f'neighbors {neighbors!r}: expected None (every client masks with '
        'every other) or an even int >= 2 (k/2 on either side of a ring)')
  return neighbors


def check_threshold(threshold, neighbors):
  """t must not exceed the clients holding each client's shares."""
  if check_neighbors(neighbors) is not None and threshold > neighbors + 1:
    raise SecAggError(
        f'threshold {threshold} is more than the {neighbors + 1} clients that '
        f'hold each client\'s shares (its {neighbors} neighbors and itself)')


def is_complete(neighbors, num_clients):
  return neighbors is None or neighbors >= num_clients - 1


def ring_order(round_id, client_ids):
  """The clients in the round's ring order: public, fixed by the round id,
  and unrelated to the ids' own order."""
  return sorted(client_ids, key=lambda u: hashlib.sha256(
      kdf.encode_label('ring', round_id, u)).digest())


def neighborhoods(config, client_ids):
  """{client id: frozenset of the clients it masks with and shares among}."""
  client_ids = list(client_ids)
  if is_complete(config.neighbors, len(client_ids)):
    everyone = frozenset(client_ids)
    return {u: everyone - {u} for u in client_ids}
  ring = ring_order(config.round_id, client_ids)
  n, half = len(ring), config.neighbors // 2
  return {u: frozenset(ring[(i + step) % n] for step in range(-half, half + 1)
                       if step)
          for i, u in enumerate(ring)}


def is_connected(neighbors_of, members):
  """Whether `members` reach each other through edges among themselves."""
  members = set(members)
  if not members:
    return True
  start = next(iter(members))
  seen, frontier = {start}, [start]
  while frontier:
    u = frontier.pop()
    for v in neighbors_of[u] & members:
      if v not in seen:
        seen.add(v)
        frontier.append(v)
  return seen == members
