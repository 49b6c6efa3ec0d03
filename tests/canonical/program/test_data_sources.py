"""tff.program.DatasetDataSource: clients' datasets in memory, selected k at
a time by a seed, and iterators that go on where they were after a trip
through bytes (program state)."""

import copy

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff
from canonical import errors
from canonical import program


def _client_datasets(count=6):
  """Client i holds the examples {'x': [i, i], 'y': i} three times."""
  return [tf.data.Dataset.from_tensor_slices(
      {'x': np.full([3, 2], i, np.float32), 'y': np.full([3], i, np.int32)})
          for i in range(count)]


def _clients(selection):
  """Which clients a selection holds (each dataset's first 'y')."""
  return [int(next(iter(dataset))['y']) for dataset in selection]


def test_federated_type_is_a_sequence_at_the_clients():
  source = program.DatasetDataSource(_client_datasets())
  federated_type = source.federated_type
  assert federated_type.placement is tff.CLIENTS
  assert federated_type == source.iterator().federated_type
  assert str(federated_type) == (
      '{<x=float32[2],y=int32>*}@CLIENTS')


def test_select_returns_k_distinct_clients_drawn_by_the_seed():
  source = program.DatasetDataSource(_client_datasets(), seed=3)
  iterator = source.iterator()
  rounds = [_clients(iterator.select(3)) for _ in range(6)]
  for clients in rounds:
    assert len(set(clients)) == 3 and set(clients) <= set(range(6))
  assert len({tuple(sorted(c)) for c in rounds}) > 1  # Drawn anew.
  again = program.DatasetDataSource(_client_datasets(), seed=3).iterator()
  assert [_clients(again.select(3)) for _ in range(6)] == rounds
  other = program.DatasetDataSource(_client_datasets(), seed=4).iterator()
  assert [_clients(other.select(3)) for _ in range(6)] != rounds
  assert sorted(_clients(iterator.select(6))) == list(range(6))
  assert iterator.select(0) == []


def test_selections_run_through_a_federated_computation():
  datasets = _client_datasets()
  source = program.DatasetDataSource(datasets, seed=0)

  @tff.tf_computation(tff.SequenceType(datasets[0].element_spec))
  def client_sum(dataset):
    return dataset.reduce(0, lambda total, example: total + example['y'])

  @tff.federated_computation(source.federated_type)
  def total(data):
    return tff.federated_sum(tff.federated_map(client_sum, data))

  selection = source.iterator().select(2)
  assert total(selection) == 3 * sum(_clients(selection))


def test_an_iterator_goes_on_where_it_was_after_bytes_and_copies():
  iterator = program.DatasetDataSource(_client_datasets(), seed=9).iterator()
  iterator.select(2)
  restored = program.DatasetDataSourceIterator.from_bytes(iterator.to_bytes())
  copied = copy.deepcopy(iterator)
  assert restored == iterator == copied
  assert restored.position == 1 and restored.seed == 9
  assert restored.federated_type == iterator.federated_type
  expected = [_clients(iterator.select(3)) for _ in range(4)]
  assert [_clients(restored.select(3)) for _ in range(4)] == expected
  assert [_clients(copied.select(3)) for _ in range(4)] == expected
  first = next(iter(restored.select(1)[0]))
  assert first['x'].dtype == tf.float32 and first['x'].shape == [2]


def test_an_iterator_round_trips_through_program_state(tmp_path):
  source = program.DatasetDataSource(_client_datasets(), seed=1)
  iterator = source.iterator()
  iterator.select(4)
  manager = program.FileProgramStateManager(str(tmp_path))
  program.run_sync(manager.save({'round': 1, 'iterator': iterator}, 1))

  loaded = program.run_sync(manager.load(1, {'round': 0,
                                              'iterator': source.iterator()}))
  assert isinstance(loaded['iterator'], program.DatasetDataSourceIterator)
  assert loaded['iterator'] == iterator
  assert _clients(loaded['iterator'].select(4)) == _clients(
      iterator.select(4))


def test_datasets_from_python_cannot_be_saved():
  generated = tf.data.Dataset.from_generator(
      lambda: iter([1, 2]), output_signature=tf.TensorSpec([], tf.int32))
  iterator = program.DatasetDataSource(
      [tf.data.Dataset.range(2).map(lambda x: tf.cast(x, tf.int32)),
       generated]).iterator()
  with pytest.raises(errors.InvalidValueError, match=r'datasets\[1\]'):
    iterator.to_bytes()
  with pytest.raises(errors.InvalidValueError, match='not an iterator'):
    program.DatasetDataSourceIterator.from_bytes(b'not an iterator')


def test_bad_arguments_are_named():
  with pytest.raises(errors.InvalidValueError, match='empty'):
    program.DatasetDataSource([])
  with pytest.raises(errors.InvalidValueError, match=r'datasets\[1\]'):
    program.DatasetDataSource([tf.data.Dataset.range(2),
                               tf.data.Dataset.from_tensors(1.0)])
  with pytest.raises(errors.InvalidTypeError, match=r'datasets\[0\]'):
    program.DatasetDataSource([[1, 2]])
  iterator = program.DatasetDataSource(_client_datasets(3)).iterator()
  with pytest.raises(errors.InvalidValueError, match='from 0 to the number'):
    iterator.select(4)
  with pytest.raises(errors.InvalidValueError, match='got None'):
    iterator.select()
  with pytest.raises(errors.InvalidTypeError, match='k must be an int'):
    iterator.select(1.5)
