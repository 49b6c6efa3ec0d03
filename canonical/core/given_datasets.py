"""A dataset given to a computation from Python, as TFF 0.87 gives it.

TFF serializes a dataset given to a computation and the computation
iterates a copy made from it, so a shuffle seeded by the user yields its
first order at every call; iterating the same object again would give the
next order. `as_given` makes such a copy where that matters: a dataset with
a shuffle in it.
"""

import weakref

import tensorflow as tf
from tensorflow.core.framework import graph_pb2

# Per dataset object: the GraphDef its copies are made from, or None where
# it has none (a Python generator's state is outside TensorFlow).
_GRAPHS = weakref.WeakKeyDictionary()
# Shuffles drawing their seeds from a generator resource, which a copy made
# from the serialized graph does not have (it would draw new seeds at each
# copy), and the op of the same meaning taking the seeds themselves, with
# the number of inputs it keeps.
_SEEDED_SHUFFLES = {'ShuffleDatasetV3': ('ShuffleDataset', 4),
                    'ShuffleAndRepeatDatasetV2': ('ShuffleAndRepeatDataset', 5)}


def as_given(dataset):
  """A fresh copy of `dataset` if it shuffles (its first order, then, at
  every call, as in TFF 0.87), else `dataset` itself; itself too where it
  cannot be serialized (a Python generator)."""
  if not _shuffles(dataset):
    return dataset
  if dataset not in _GRAPHS:
    _GRAPHS[dataset] = _copyable_graph(dataset)
  graph = _GRAPHS[dataset]
  if graph is None:
    return dataset
  return tf.data.experimental.from_variant(
      tf.raw_ops.DatasetFromGraph(graph_def=graph), dataset.element_spec)


def _shuffles(dataset):
  return any(current is not None and 'Shuffle' in type(current).__name__
             for current in chain(dataset))


def chain(dataset):
  """`dataset` and every dataset it is made from, each once; a None after
  one whose inputs cannot be looked into."""
  stack, seen = [dataset], set()
  while stack:
    current = stack.pop()
    if id(current) in seen:
      continue
    seen.add(id(current))
    yield current
    try:
      stack.extend(current._inputs())  # pylint: disable=protected-access
    except Exception:  # pylint: disable=broad-except
      yield None


def _copyable_graph(dataset):
  """`dataset`'s serialized graph with its shuffles taking their seeds, or
  None if it cannot be serialized."""
  try:
    serialized = dataset._as_serialized_graph(  # pylint: disable=protected-access
        external_state_policy=tf.data.experimental.ExternalStatePolicy.FAIL)
  except (tf.errors.FailedPreconditionError, tf.errors.UnimplementedError):
    return None
  graph_def = graph_pb2.GraphDef.FromString(serialized.numpy())
  nodes = list(graph_def.node)
  for function in graph_def.library.function:
    nodes.extend(function.node_def)
  for node in nodes:
    if node.op in _SEEDED_SHUFFLES:
      node.op, kept = _SEEDED_SHUFFLES[node.op]
      inputs = [i for i in node.input if not i.startswith('^')][:kept]
      del node.input[:]
      node.input.extend(inputs)
  return graph_def.SerializeToString()
