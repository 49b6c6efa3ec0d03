"""A client's `tf.data.Dataset` as its elements, read once.

A compiled form's work takes a client's dataset as its elements, encoded as
`unrolled_datasets.encode` writes them, which batched work feeds many clients
at a time (`batched_work`). Reading a dataset element by element from Python
costs milliseconds (an iterator per dataset), and a `Dataset.reduce` as much
(it instantiates its function at every run). Here:

- a dataset made from tensors in memory (`from_tensor_slices` or
  `from_tensors`, then at most one `batch`, and `prefetch`es: what a
  simulation's client data mostly is) is encoded from those tensors without
  running tf.data: its elements are slices of them, so the encoding is views;
- any other *repeatable* dataset is read by one traced call per element type
  (a ragged batch of all its elements);
- a dataset whose iterations may differ (a shuffle, stateful randomness, a
  Python generator, a variable read in its functions) stays a dataset, since
  a piece iterating it twice (local epochs) must see what TensorFlow would
  show it each time.

A dataset object seen before is not read again.
"""

import weakref

import numpy as np
import tensorflow as tf

from canonical.core import purity
from canonical.core import given_datasets
from canonical.core import unrolled_datasets

# Per dataset object: its `Encoded` elements, or None if it stays a dataset.
_READ = weakref.WeakKeyDictionary()
# Per element type (a DatasetSpec): the traced call reading such a dataset.
_READERS = {}
# Per function of a dataset (by name): whether it is repeatable.
_FUNCTIONS = {}

_UNREPEATABLE_DATASETS = ('Shuffle', 'Random', 'Generator')
# A batch size no dataset reaches: the whole dataset in one ragged batch.
_ALL = 1 << 62


def encoded(dataset):
  """`dataset`'s elements as `unrolled_datasets.Encoded`, or None where it
  stays a dataset (not repeatable, or not encodable)."""
  try:
    return _READ[dataset]
  except KeyError:
    pass
  read = _in_memory(dataset)
  if read is None and repeatable(dataset):
    read = _read(dataset)
  _READ[dataset] = read
  return read


def repeatable(dataset):
  """Whether every iteration of `dataset` yields the same elements, judged
  from its transformations and their functions."""
  for current in given_datasets.chain(dataset):
    if current is None:  # Inputs we cannot look into: not judged so.
      return False
    if any(word in type(current).__name__ for word in
           _UNREPEATABLE_DATASETS) or given_datasets.is_copy(current):
      return False
    try:
      functions = current._functions()  # pylint: disable=protected-access
    except Exception:  # pylint: disable=broad-except
      return False
    if not all(_repeatable_function(f.function) for f in functions):
      return False
  return True


def _repeatable_function(function):
  key = getattr(function, 'name', None)
  if key is not None and key in _FUNCTIONS:
    return _FUNCTIONS[key]
  try:
    graph_def = function.graph.as_graph_def()
  except Exception:  # pylint: disable=broad-except
    return False
  found = all(
      purity.forbidden_reason(op) is None and 'Shuffle' not in op
      for op, _ in purity.graph_op_types(None, graph_def))
  if key is not None:
    _FUNCTIONS[key] = found
  return found


def _in_memory(dataset):
  """The encoded elements of a dataset made from tensors in memory, from
  those tensors; None for any other dataset."""
  spec = dataset.element_spec
  while type(dataset).__name__ == '_PrefetchDataset':
    dataset = dataset._input_dataset  # pylint: disable=protected-access
  batch = None
  if type(dataset).__name__ == '_BatchDataset':
    batch = (int(dataset._batch_size),  # pylint: disable=protected-access
             bool(dataset._drop_remainder))  # pylint: disable=protected-access
    dataset = dataset._input_dataset  # pylint: disable=protected-access
  kind = type(dataset).__name__
  if kind not in ('_TensorSliceDataset', '_TensorDataset'):
    return None
  # Either way, rows of these arrays are the elements before batching.
  rows = [np.asarray(t) for t in dataset._tensors]  # pylint: disable=protected-access
  if kind == '_TensorDataset':
    rows = [r[np.newaxis] for r in rows]
  if not rows:
    return None
  count = len(rows[0])
  tensors = []
  if batch is None:
    for row in rows:
      if row.ndim == 1:
        tensors.append(row)
        continue
      tensors.append(row.reshape((-1,) + row.shape[2:]))
      tensors.append(np.arange(count + 1, dtype=np.int64) * row.shape[1])
    return unrolled_datasets.Encoded(spec, count, tensors)
  size, drop_remainder = batch
  used = count - count % size if drop_remainder else count
  splits = np.arange(0, used + size, size, dtype=np.int64)
  splits[-1] = used
  for row in rows:
    tensors.extend([row[:used], splits])
  return unrolled_datasets.Encoded(spec, len(splits) - 1, tensors)


def _read(dataset):
  spec = dataset.element_spec
  key = tf.data.DatasetSpec(spec)  # Hashable, as an element spec may not be.
  if key not in _READERS:
    try:
      _READERS[key] = _reader(spec)
    except unrolled_datasets.Unsupported:
      _READERS[key] = None
  reader = _READERS[key]
  if reader is None:
    return None
  try:
    tensors = [t.numpy() for t in reader(dataset)]
  except (tf.errors.InvalidArgumentError, tf.errors.OutOfRangeError):
    # An empty dataset has no batch to take; other elements that one
    # encoding cannot hold stay a dataset.
    if any(True for _ in dataset.take(1)):
      return None
    return unrolled_datasets.Encoded(
        spec, 0, unrolled_datasets.encode(spec, []))
  count = len(tensors[0]) if tf.nest.flatten(spec)[0].shape.rank == 0 else (
      len(tensors[1]) - 1)
  return unrolled_datasets.Encoded(spec, count, tensors)


def _reader(element_spec):
  """A concrete function: a dataset of `element_spec` -> its encoding, or
  None where tf.data's ragged batches cannot give it (an inner dimension of
  unknown size). Fails on an empty dataset (no batch to take)."""
  flat_specs = tf.nest.flatten(element_spec)
  unrolled_datasets.encoding_specs(element_spec)  # Unsupported if it is not.
  if any(None in s.shape[1:].as_list() for s in flat_specs if s.shape.rank):
    return None

  def read(dataset):
    whole = tf.nest.flatten(dataset.ragged_batch(_ALL).get_single_element())
    out = []
    for spec, value in zip(flat_specs, whole):
      if isinstance(value, tf.RaggedTensor):
        out.extend([value.values, value.row_splits])
      elif spec.shape.rank:  # Elements of one known size: a dense batch.
        shape = tf.shape(value, out_type=tf.int64)
        out.append(tf.reshape(value, tf.concat([[-1], shape[2:]], 0)))
        out.append(tf.range(shape[0] + 1) * shape[1])
      else:
        out.append(value)
    return out

  return tf.function(read, input_signature=[
      tf.data.DatasetSpec(element_spec)], autograph=False
                     ).get_concrete_function()
