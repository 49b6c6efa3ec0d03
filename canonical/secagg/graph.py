"""Who masks with whom: the complete graph, or a sparse ring (SecAgg+).

With `neighbors=None` every pair of clients shares a mask and every client
Shamir-shares its secrets with all others (Bonawitz et al. 2017): each client
costs O(n). With `neighbors=k` (even), the clients sit on a ring in an order
drawn from the round id, and each masks with and shares among the k/2 clients
on either side, a Harary graph of connectivity k as in Bell et al. (CCS 2020):
each client costs O(k).

Pairwise masks cancel within each connected part of the contributors' graph,
so the server of a sparse round could learn the sum of each part separately:
both the server (`server.check_connected`) and every client refuse to unmask
a contributor set whose graph is not connected (`connected`), and the round
fails instead.
"""

import functools
import hashlib
import math

from canonical import errors
from canonical.secagg.errors import SecAggError
from canonical.secagg import kdf


AUTO = 'auto'  # `neighbors_for` the round's number of clients.


def resolve(neighbors, num_clients):
  """The degree a round of `num_clients` uses: `neighbors`, checked, or for
  'auto' the smallest that `neighbors_for` finds safe (None: complete)."""
  if neighbors == AUTO:
    return neighbors_for(num_clients)
  return check_neighbors(neighbors)


def from_text(text):
  """A command line's neighbors: None, 'auto' or an even int >= 2
  (ValueError otherwise)."""
  if text is None or text == AUTO:
    return text
  if not (text.isdigit() and int(text) >= 2 and int(text) % 2 == 0):
    raise errors.InvalidValueError(
        f'{text!r} is not auto or an even number >= 2')
  return int(text)


def holders(num_clients, neighbors=None):
  """How many clients hold each client's shares: the round's, or a client's
  k neighbors and itself."""
  return num_clients if neighbors is None else min(num_clients,
                                                   neighbors + 1)


def majority_threshold(num_clients, neighbors=None):
  """A majority of the clients that hold each client's shares."""
  return holders(num_clients, neighbors) // 2 + 1


def check_neighbors(neighbors):
  """`neighbors` if it is None or an even int >= 2."""
  if neighbors is None:
    return None
  if (isinstance(neighbors, bool) or not isinstance(neighbors, int)
      or neighbors < 2 or neighbors % 2):
    raise SecAggError(
        f'neighbors {neighbors!r}: expected None (every client masks with '
        'every other), an even int >= 2 (k/2 on either side of a ring) or '
        f'{AUTO!r}')
  return neighbors


def check_threshold(threshold, neighbors):
  """t must not exceed the clients holding each client's shares."""
  if check_neighbors(neighbors) is not None and threshold > neighbors + 1:
    raise SecAggError(
        f'threshold {threshold} is more than the {neighbors + 1} clients that '
        f'hold each client\'s shares (its {neighbors} neighbors and itself)')


def failure_bound(num_clients, neighbors, dropout):
  """An upper bound on the chance that a round fails when each client drops
  independently with probability `dropout` before unmasking: some client
  keeps fewer than t (the default majority) of the k + 1 holders of its
  shares, or k/2 clients in a row on the ring drop and cut it (a union bound
  over the clients)."""
  holders = min(num_clients, neighbors + 1)
  most_lost = holders - majority_threshold(num_clients, neighbors)
  short = sum(_binomial(holders, lost, dropout)
              for lost in range(most_lost + 1, holders + 1))
  cut = 0.0 if is_complete(neighbors, num_clients) else (
      dropout**(neighbors // 2))
  return min(1.0, num_clients * (short + cut))


def _binomial(n, k, p):
  """P(Binomial(n, p) = k), in logs so that large n does not overflow."""
  if p == 0:
    return float(k == 0)
  return math.exp(math.lgamma(n + 1) - math.lgamma(k + 1)
                  - math.lgamma(n - k + 1) + k * math.log(p)
                  + (n - k) * math.log1p(-p))


def neighbors_for(num_clients, dropout=0.05, failure=1e-6):
  """The smallest even k whose rounds fail with probability below `failure`
  when clients drop at rate `dropout` (`failure_bound`); None when only the
  complete graph does (or k would reach it)."""
  if not 0 <= dropout < 1 or not 0 < failure < 1:
    raise SecAggError(f'dropout {dropout} must be in [0, 1) and failure '
                      f'{failure} in (0, 1)')
  for k in range(2, num_clients - 1, 2):
    if failure_bound(num_clients, k, dropout) <= failure:
      return k
  return None


def is_complete(neighbors, num_clients):
  return neighbors is None or neighbors >= num_clients - 1


def ring_order(round_id, client_ids):
  """The clients in the round's ring order: public, fixed by the round id,
  and unrelated to the ids' own order."""
  return sorted(client_ids, key=lambda u: hashlib.sha256(
      kdf.encode_label('ring', round_id, u)).digest())


def neighborhoods(config, client_ids):
  """{client id: frozenset of the clients it masks with and shares among}
  (shared between callers: do not change it)."""
  return _neighborhoods(config.round_id, config.neighbors, tuple(client_ids))


@functools.lru_cache(maxsize=8)  # Every party of a round asks for the same.
def _neighborhoods(round_id, neighbors, client_ids):
  if is_complete(neighbors, len(client_ids)):
    everyone = frozenset(client_ids)
    return {u: everyone - {u} for u in client_ids}
  ring = ring_order(round_id, client_ids)
  n, half = len(ring), neighbors // 2
  return {u: frozenset(ring[(i + step) % n] for step in range(-half, half + 1)
                       if step)
          for i, u in enumerate(ring)}


def connected(config, client_ids, members):
  """Whether `members` are connected in the round's graph over
  `client_ids` (always, in the complete graph)."""
  client_ids = tuple(client_ids)
  if is_complete(config.neighbors, len(client_ids)):
    return True
  return _connected(config.round_id, config.neighbors, client_ids,
                    frozenset(members))


@functools.lru_cache(maxsize=8)  # Every client checks the same list.
def _connected(round_id, neighbors, client_ids, members):
  return is_connected(_neighborhoods(round_id, neighbors, client_ids),
                      members)


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
