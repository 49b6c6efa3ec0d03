"""Splitting a dataset's examples among simulated federated clients.

Each scheme returns one int64 array of example indices per client (sorted),
assigning every example to exactly one client and leaving no client empty.
All randomness comes from `np.random.default_rng(seed)`, so a partition is a
pure function of its arguments.
"""

import numpy as np

from canonical import errors

SCHEMES = ('iid', 'dirichlet', 'shards')


class PartitionError(errors.Error, ValueError):
  """A partition that cannot be made as asked (e.g. more clients than examples)."""


def partition(labels, num_clients, scheme, seed, alpha=0.5,
              shards_per_client=2):
  """Dispatches to the scheme named `scheme` (one of `SCHEMES`)."""
  if scheme == 'iid':
    return iid(len(labels), num_clients, seed)
  if scheme == 'dirichlet':
    return dirichlet(labels, num_clients, alpha, seed)
  if scheme == 'shards':
    return label_shards(labels, num_clients, shards_per_client, seed)
  raise PartitionError(f'Unknown partition scheme {scheme!r}; choose one of '
                       f'{", ".join(SCHEMES)}.')


def iid(num_examples, num_clients, seed):
  """Near-equal random parts: every client sees the whole label distribution."""
  _check_counts(num_examples, num_clients)
  order = np.random.default_rng(seed).permutation(num_examples)
  return [np.sort(part).astype(np.int64)
          for part in np.array_split(order, num_clients)]


def dirichlet(labels, num_clients, alpha, seed):
  """Label skew: each class is split among clients in proportions drawn from
  Dirichlet(alpha, ..., alpha); small alpha puts most of a class on few
  clients, large alpha tends to iid.

  Clients left empty by the draw each get one example moved from the then
  largest client (deterministic, and it barely changes the skew), rather than
  redrawing, which for small alpha and many clients rarely succeeds.
  """
  labels = np.asarray(labels)
  _check_counts(len(labels), num_clients)
  if not alpha > 0 or not np.isfinite(alpha):
    raise PartitionError(f'Dirichlet alpha must be a positive number, got '
                         f'{alpha!r}.')
  rng = np.random.default_rng(seed)
  parts = [[] for _ in range(num_clients)]
  for label in np.unique(labels):
    members = rng.permutation(np.flatnonzero(labels == label))
    shares = rng.dirichlet(np.full(num_clients, float(alpha)))
    cuts = np.floor(np.cumsum(shares)[:-1] * len(members)).astype(np.int64)
    for client, piece in enumerate(np.split(members, cuts)):
      parts[client].append(piece)
  clients = [np.concatenate(p) for p in parts]
  for empty in [c for c, p in enumerate(clients) if len(p) == 0]:
    largest = int(np.argmax([len(p) for p in clients]))
    clients[empty] = clients[largest][-1:]
    clients[largest] = clients[largest][:-1]
  return [np.sort(c).astype(np.int64) for c in clients]


def label_shards(labels, num_clients, shards_per_client, seed):
  """The pathological non-IID split of McMahan et al. (2017): examples sorted
  by label are cut into num_clients * shards_per_client shards and each client
  gets shards_per_client random shards, so it sees few classes.

  Unlike a plain cut of the sorted order, shards are cut within a class (each
  class gets a number of shards in proportion to its size), so a shard never
  straddles two labels and a client holds at most shards_per_client classes.
  Only when there are fewer shards than classes do shards mix labels.
  """
  labels = np.asarray(labels)
  if shards_per_client < 1:
    raise PartitionError('shards_per_client must be at least 1, got '
                         f'{shards_per_client!r}.')
  _check_counts(len(labels), num_clients)
  num_shards = num_clients * shards_per_client
  if num_shards > len(labels):
    raise PartitionError(
        f'{num_clients} clients x {shards_per_client} shards need at least '
        f'{num_shards} examples, there are {len(labels)}.')
  rng = np.random.default_rng(seed)
  classes = np.unique(labels)
  if num_shards >= len(classes):
    members = [rng.permutation(np.flatnonzero(labels == c)) for c in classes]
    counts = _shards_per_class(np.array([len(m) for m in members]), num_shards)
    shards = [s for m, k in zip(members, counts) for s in np.array_split(m, k)]
  else:
    # Shuffle, then stable-sort by label: random order within each class.
    shuffled = rng.permutation(len(labels))
    order = shuffled[np.argsort(labels[shuffled], kind='stable')]
    shards = np.array_split(order, num_shards)
  dealt = rng.permutation(num_shards).reshape(num_clients, shards_per_client)
  return [np.sort(np.concatenate([shards[s] for s in row])).astype(np.int64)
          for row in dealt]


def _shards_per_class(sizes, num_shards):
  """Shard counts per class summing to num_shards, proportional to `sizes`
  (largest remainder), each between 1 and the class size."""
  ideal = sizes * num_shards / sizes.sum()
  counts = np.clip(np.floor(ideal).astype(np.int64), 1, sizes)
  while counts.sum() < num_shards:
    room = np.where(counts < sizes, ideal - counts, -np.inf)
    counts[np.argmax(room)] += 1
  while counts.sum() > num_shards:
    room = np.where(counts > 1, ideal - counts, np.inf)
    counts[np.argmin(room)] -= 1
  return counts


def _check_counts(num_examples, num_clients):
  if int(num_clients) != num_clients or num_clients < 1:
    raise PartitionError(f'The number of clients must be a positive integer, '
                         f'got {num_clients!r}.')
  if num_examples < num_clients:
    raise PartitionError(f'Cannot give each of {num_clients} clients at least '
                         f'one example: there are only {num_examples}.')
