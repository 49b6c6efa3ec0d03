"""Pieces fed a dataset as the list of its elements (`unrolled_datasets`):
the same results, bit for bit, as through the dataset."""

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff
from canonical import form as form_lib
from canonical.core import unrolled_datasets
from canonical.saving import graph_piece

ELEMENT = (tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([None],
                                                                tf.int32))
DATASET = tf.data.DatasetSpec(ELEMENT)
WEIGHTS = tf.TensorSpec([3], tf.float32)


def _batches(sizes, seed=0):
  rng = np.random.default_rng(seed)
  return [(rng.normal(size=(n, 3)).astype(np.float32),
           rng.integers(0, 4, size=n).astype(np.int32)) for n in sizes]


def _dataset(elements):
  return tf.data.Dataset.from_generator(lambda: iter(elements),
                                        output_signature=ELEMENT)


def _train(dataset, weights):
  """Filter, map, then reduce: the chain `unroll` rewrites."""
  def step(state, batch):
    w, loss, count = state
    x, y = batch
    error = tf.linalg.matvec(x, w) - tf.cast(y, tf.float32)
    return (w - 0.1 * tf.linalg.matvec(x, error, transpose_a=True),
            loss + tf.reduce_sum(error ** 2), count + tf.size(y))

  return (dataset.filter(lambda x, y: tf.shape(y)[0] > 1)
          .map(lambda x, y: (x * 2.0, y))
          .reduce((weights, 0.0, 0), step))


@tf.function  # AutoGraph turns the loop into a reduce.
def _autograph_loop(dataset, weights):
  for x, y in dataset:
    weights += tf.reduce_sum(x, 0) * tf.cast(tf.reduce_sum(y), tf.float32)
  return weights


@tf.function
def _inner(dataset, weights):
  return _train(dataset, weights)


def _nested_call(dataset, weights):
  """The dataset passed on to another tf.function (a call rewrite)."""
  w, loss, count = _inner(dataset, weights)
  return w, loss + tf.cast(count, tf.float32)


def _epochs(dataset, weights):
  """Local epochs: the filtered batches, three times over."""
  return _train(dataset.filter(lambda x, y: tf.size(y) > 0).repeat(3),
                weights)


def _two_reductions(dataset, weights):
  total = dataset.reduce(0, lambda n, batch: n + tf.size(batch[1]))
  return _train(dataset, weights)[0] * tf.cast(total, tf.float32)


def _piece(function, name='work'):
  return form_lib.Piece(name, function, (DATASET, WEIGHTS))


def _saved(piece):
  proto = graph_piece.export_piece(piece)
  return graph_piece.GraphPiece(
      proto.name, proto.graph, piece.input_specs, proto.input_tensors,
      piece.output_spec, proto.output_tensors)


def _same(a, b):
  return all(np.array_equal(x, y) for x, y in zip(tf.nest.flatten(a),
                                                  tf.nest.flatten(b)))


@pytest.mark.parametrize('function', [_train, _autograph_loop, _nested_call,
                                      _epochs, _two_reductions])
@pytest.mark.parametrize('sizes', [[5, 5, 2], [4, 1, 3, 7], [1], []])
@pytest.mark.parametrize('saved', [False, True])
def test_elements_give_the_datasets_results_bit_for_bit(function, sizes,
                                                         saved):
  piece = _piece(function)
  if saved:
    piece = _saved(piece)
  assert piece.unrolled() is not None
  elements = _batches(sizes)
  weights = np.array([0.5, -1.0, 2.0], np.float32)
  through_dataset = piece(_dataset(elements), weights)
  assert _same(piece(elements, weights), through_dataset)


def test_a_dataset_used_otherwise_keeps_the_dataset_path():
  def take_two(dataset, weights):
    return dataset.take(2).reduce(weights, lambda w, b: w + tf.reduce_sum(
        b[0], 0))

  piece = _piece(take_two)
  assert piece.unrolled() is None
  elements = _batches([2, 3, 4])
  weights = np.zeros(3, np.float32)
  assert _same(piece(elements, weights), piece(_dataset(elements), weights))


def test_elements_of_the_wrong_type_are_refused_naming_the_piece():
  piece = _piece(_train, name='client_work')
  bad = [(np.zeros((2, 4), np.float32), np.zeros(2, np.int32))]
  with pytest.raises(tff.errors.InvalidTypeError,
                     match=r"'client_work'.*element 0.*shape"):
    piece(bad, np.zeros(3, np.float32))
  with pytest.raises(tff.errors.InvalidTypeError, match='int32'):
    piece([(np.zeros((2, 3), np.float32), np.zeros(2, np.int64))],
          np.zeros(3, np.float32))


def test_scalar_and_dict_elements():
  spec = tf.data.DatasetSpec({'a': tf.TensorSpec([], tf.float32),
                              'b': tf.TensorSpec([2], tf.int64)})

  def total(dataset):
    return dataset.reduce(tf.constant(0.0), lambda s, e: s + e['a'] * tf.cast(
        tf.reduce_sum(e['b']), tf.float32))

  piece = form_lib.Piece('total', total, (spec,))
  elements = [{'a': np.float32(i), 'b': np.array([i, 2], np.int64)}
              for i in range(4)]
  dataset = tf.data.Dataset.from_generator(
      lambda: iter(elements), output_signature=spec.element_spec)
  assert piece(elements) == piece(dataset) == sum(i * (i + 2)
                                                  for i in range(4))


def test_encoding_of_ragged_batches():
  tensors = unrolled_datasets.encode(ELEMENT, _batches([2, 0, 3]))
  values, splits, labels, label_splits = tensors
  assert values.shape == (5, 3) and labels.shape == (5,)
  assert splits.tolist() == label_splits.tolist() == [0, 2, 2, 5]


def test_an_endless_repeat_fails_where_a_dataset_would_never_end():
  piece = _piece(lambda dataset, weights: _train(dataset.repeat(), weights))
  assert piece.unrolled() is not None
  weights = np.ones(3, np.float32)
  with pytest.raises(tf.errors.InvalidArgumentError, match='endless'):
    piece(_batches([2]), weights)
  # An empty dataset repeated forever is empty, as in tf.data.
  assert _same(piece([], weights), (weights, 0.0, 0))
