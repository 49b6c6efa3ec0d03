"""Which tf.data randomness keeps a piece pure: shuffles and samples seeded.

A dataset shuffle (`Dataset.shuffle`) or sample (`sample_from_datasets`)
draws from a seed pair; TensorFlow replaces a pair of constant zeros (what
`seed=None` gives without a global seed) by fresh OS entropy, so the piece
would differ from call to call. A pair from the piece's inputs is the user's
"seeded by inputs"; a constant nonzero pair is a fixed seed. Both are pure.
The compiler and the loader both refuse the zero pair.
"""

import functools

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import op_def_registry

# Dataset ops whose `seed` and `seed2` inputs choose their randomness.
_SEEDED_DATASET_OPS = (
    'ShuffleDataset', 'ShuffleDatasetV3', 'ShuffleAndRepeatDataset',
    'ShuffleAndRepeatDatasetV2', 'RandomDataset', 'RandomDatasetV2',
    'AnonymousSeedGenerator', 'AnonymousRandomSeedGenerator',
    'ExperimentalRandomDataset', 'SamplingDataset')

UNSEEDED = ('draws from OS entropy: a dataset shuffle or sample without a '
            'seed (pass seed=...)')


@functools.lru_cache(maxsize=None)
def _seed_inputs(op):
  """Input positions of `seed` and `seed2`, or None (not a seeded op)."""
  if op not in _SEEDED_DATASET_OPS:
    return None
  op_def = op_def_registry.get(op)
  if op_def is None:
    return None
  names = [arg.name for arg in op_def.input_arg]
  if 'seed' not in names or 'seed2' not in names:
    return None
  return names.index('seed'), names.index('seed2')


def unseeded(graph_def):
  """`(op type, node name)` of every node of `graph_def` (its functions
  included) that draws from a constant zero seed pair."""
  found = []
  scopes = [graph_def.node] + [f.node_def for f in graph_def.library.function]
  for nodes in scopes:
    by_name = {node.name: node for node in nodes}
    for node in nodes:
      positions = _seed_inputs(node.op)
      if positions is None:
        continue
      seeds = [_constant(by_name, node, i) for i in positions]
      if all(seed is not None and not np.any(seed) for seed in seeds):
        found.append((node.op, node.name))
  return found


def _constant(by_name, node, position):
  """The value of the node's input at `position` if a Const makes it."""
  if position >= len(node.input):
    return None
  producer = by_name.get(node.input[position].lstrip('^').split(':')[0])
  if producer is None or producer.op != 'Const':
    return None
  try:
    return tf.make_ndarray(producer.attr['value'].tensor)
  except Exception:  # pylint: disable=broad-except
    return None  # Malformed: the loader's constant checks say why.
