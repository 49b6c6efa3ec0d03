"""Which clients take part in a round: a pure function of the ids, a seed and
the round, so that a resumed run samples what the interrupted one did."""

import numpy as np

SAMPLINGS = {
    'fixed': 'exactly clients_per_round clients, without replacement',
    'poisson': 'each client independently with probability clients_per_round '
               '/ clients (what DP-FedAvg\'s privacy accounting assumes)',
}


def sample_clients(client_ids, clients_per_round, seed, round_number,
                   sampling='fixed'):
  """The ids sampled in a round: a pure function of ids, seed and round."""
  client_ids = sorted(client_ids)
  rng = np.random.default_rng([seed, round_number])
  if sampling == 'poisson':
    probability = min(1.0, clients_per_round / len(client_ids))
    return [c for c, u in zip(client_ids, rng.random(len(client_ids)))
            if u < probability]
  count = min(clients_per_round, len(client_ids))
  return [client_ids[i] for i in rng.choice(len(client_ids), count,
                                            replace=False)]
