"""The aggregator's part: add masked inputs modulo m, as a CombineFn would.

The aggregator never unmasks anything; it adds, and remembers whose inputs it
added (the server needs that set to unmask). `zero` / `accumulate` / `merge` map
onto a Beam CombineFn's create_accumulator / add_input / merge_accumulators.
"""

import dataclasses

import numpy as np

from canonical.secagg import config as config_lib
from canonical.secagg.errors import SecAggError
from canonical.secagg import masks


@dataclasses.dataclass(frozen=True, eq=False)
class MaskedSum:
  """A sum of masked inputs (flat uint64 per leaf), and whose they are."""
  values: tuple
  contributors: frozenset


def zero(config):
  """The sum of no masked inputs."""
  values = tuple(np.zeros(leaf.size, np.uint64) for leaf in config.leaves)
  return MaskedSum(values, frozenset())


def accumulate(config, total, masked_input):
  """`total` plus one client's `MaskedInput`."""
  sender = masked_input.sender
  values = config_lib.check_flat(config, masked_input.values,
                                 f'masked input of client {sender!r}')
  return merge(config, total, MaskedSum(values, frozenset([sender])))


def merge(config, a, b):
  """The sum of two partial sums over disjoint sets of clients."""
  twice = a.contributors & b.contributors
  if twice:
    raise SecAggError(
        f'masked inputs of clients {sorted(twice, key=repr)} would be added '
        'twice')
  values = tuple(masks.add(x, y, leaf.modulus)
                 for leaf, x, y in zip(config.leaves, a.values, b.values))
  return MaskedSum(values, a.contributors | b.contributors)
