"""Which clients take part in a round: a pure function of the ids, a seed and
the round, so that a resumed run samples what the interrupted one did:
`sample_clients` for the Beam runner, `build_uniform_sampling_fn` as TFF's
`tff.simulation` has it."""

import numbers

import numpy as np

from canonical import errors
from canonical.core.participation import cyclic_groups

SAMPLINGS = {
    'fixed': 'exactly clients_per_round clients, without replacement',
    'poisson': 'each client independently with probability clients_per_round '
               '/ clients (what DP-FedAvg\'s privacy accounting assumes)',
    'cyclic': 'the clients shuffled once by the seed and cut into '
              'clients // clients_per_round groups taken in turn: each client '
              'once every that many rounds (DP-FTRL\'s epochs, without '
              'sampling)',
}


def sample_clients(client_ids, clients_per_round, seed, round_number,
                   sampling='fixed'):
  """The ids sampled in a round: a pure function of ids, seed and round."""
  client_ids = sorted(client_ids)
  if sampling == 'cyclic':
    groups = cyclic_groups(len(client_ids), clients_per_round)
    order = np.random.default_rng([seed]).permutation(len(client_ids))
    return [client_ids[i] for i in sorted(
        np.array_split(order, groups)[round_number % groups])]
  rng = np.random.default_rng([seed, round_number])
  if sampling == 'poisson':
    probability = min(1.0, clients_per_round / len(client_ids))
    return [c for c, u in zip(client_ids, rng.random(len(client_ids)))
            if u < probability]
  count = min(clients_per_round, len(client_ids))
  return [client_ids[i] for i in rng.choice(len(client_ids), count,
                                            replace=False)]


# TFF's round-to-seed map: a Lehmer generator (multiplier 16807, modulus
# 2**31 - 1) stepped `round_num` times from a start drawn from `random_seed`,
# so a seeded sampler gives the same clients as TFF's for every round.
_LEHMER_MODULUS = 2**31 - 1
_LEHMER_MULTIPLIER = 16807


def build_uniform_sampling_fn(sample_range, replace=False, random_seed=None):
  """TFF's `build_uniform_sampling_fn`: `fn(round_num, size)` -> a list of
  `size` elements of `sample_range` drawn uniformly.

  With an integer `random_seed` a round's draw depends only on the seed and
  the round, so a resumed simulation samples what the interrupted one did;
  with None every call draws afresh.
  """
  if random_seed is not None and (
      isinstance(random_seed, bool) or
      not isinstance(random_seed, numbers.Integral)):
    raise errors.InvalidTypeError(
        'build_uniform_sampling_fn: random_seed must be an integer or None, '
        f'got {random_seed!r}.')
  start = None
  if random_seed is not None:
    start = np.random.RandomState(int(random_seed)).randint(
        1, _LEHMER_MODULUS - 1)

  def sample_fn(round_num, size):
    if start is None:
      generator = np.random.RandomState()
    else:
      generator = np.random.RandomState(
          pow(_LEHMER_MULTIPLIER, int(round_num), _LEHMER_MODULUS) * start %
          _LEHMER_MODULUS)
    try:
      return generator.choice(sample_range, size=size,
                              replace=replace).tolist()
    except ValueError as e:
      raise errors.InvalidValueError(
          f'Cannot sample {size} clients from a population of '
          f'{len(sample_range)} (replace={replace}) in round {round_num}: '
          f'{e}') from None

  return sample_fn
