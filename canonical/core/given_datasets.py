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
# The copies made: each shuffles, though its type (a dataset of a variant)
# no longer says so.
_COPIES = weakref.WeakSet()
# Shuffles drawing their seeds from a generator resource, which a copy made
# from the serialized graph does not have (a stand-in that draws new seeds at
# each copy): {op: position of its generator input}. The copy gets a new
# generator of the shuffle's own seeds, as the user's dataset got at first.
_SEEDED_SHUFFLES = {'ShuffleDatasetV3': 4, 'ShuffleAndRepeatDatasetV2': 5}


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
  copy = tf.data.experimental.from_variant(
      tf.raw_ops.DatasetFromGraph(graph_def=graph), dataset.element_spec)
  _COPIES.add(copy)
  return copy


def is_copy(dataset):
  """Whether `dataset` is a copy `as_given` made (it shuffles)."""
  return dataset in _COPIES


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
  """`dataset`'s serialized graph with a seed generator of their own for
  its shuffles, or None if it cannot be serialized."""
  try:
    serialized = dataset._as_serialized_graph(  # pylint: disable=protected-access
        external_state_policy=tf.data.experimental.ExternalStatePolicy.FAIL)
  except (tf.errors.FailedPreconditionError, tf.errors.UnimplementedError):
    return None
  graph_def = graph_pb2.GraphDef.FromString(serialized.numpy())
  for node in list(graph_def.node):  # Not a shuffle inside a function's.
    if node.op in _SEEDED_SHUFFLES:
      _give_seed_generator(graph_def, node, _SEEDED_SHUFFLES[node.op])
  return graph_def.SerializeToString()


def _give_seed_generator(graph_def, shuffle, position):
  """A new generator of `shuffle`'s seeds (its inputs 2 and 3) at input
  `position`, reshuffling as the shuffle says."""
  reshuffle = graph_def.node.add(
      name=f'{shuffle.name}/reshuffle', op='Const')
  reshuffle.attr['dtype'].type = tf.bool.as_datatype_enum
  reshuffle.attr['value'].tensor.CopyFrom(tf.make_tensor_proto(
      shuffle.attr['reshuffle_each_iteration'].b))
  generator = graph_def.node.add(name=f'{shuffle.name}/seed_generator',
                                 op='AnonymousSeedGenerator')
  generator.input.extend([shuffle.input[2], shuffle.input[3], reshuffle.name])
  shuffle.input[position] = f'{generator.name}:0'
