"""How often a client takes part under cyclic sampling: the one rule the
sampler (`canonical.simulation.sampling`) and the privacy accounting
(`canonical.privacy.spending`) share. Nothing here imports TensorFlow."""


def cyclic_groups(population, clients_per_round):
  """How many groups `sampling='cyclic'` cuts a population into: each client
  takes part once every that many rounds."""
  return max(1, population // max(1, clients_per_round))
