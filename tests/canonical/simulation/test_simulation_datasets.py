"""tff.simulation.datasets as a TFF 0.87 user writes with it: ClientData,
TestClientData, FilePerUserClientData.

Orders drawn from a seed (create_tf_dataset_from_all_clients, datasets,
train_test_client_split) are the ones TFF 0.87 gave for the same data and
seed, checked by hand against it.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff

ClientData = tff.simulation.datasets.ClientData
TestClientData = tff.simulation.datasets.TestClientData


def _three_clients():
  return TestClientData({
      'a': {'x': np.array([[1., 2.], [3., 4.]], np.float32),
            'y': np.array([0, 1])},
      'b': {'x': np.array([[5., 6.]], np.float32), 'y': np.array([1])},
      'c': {'x': np.array([[7., 8.], [9., 10.], [11., 12.]], np.float32),
            'y': np.array([0, 0, 1])},
  })


def _labels(dataset):
  return [int(e['y']) for e in dataset.as_numpy_iterator()]


def _values(dataset):
  return [float(v) for v in dataset.as_numpy_iterator()]


def test_test_client_data_holds_each_clients_slices():
  data = _three_clients()
  assert data.client_ids == ['a', 'b', 'c']
  assert data.element_type_structure == {
      'x': tf.TensorSpec([2], tf.float32), 'y': tf.TensorSpec([], tf.int64)}
  elements = list(data.create_tf_dataset_for_client('c').as_numpy_iterator())
  assert len(elements) == 3
  np.testing.assert_array_equal(elements[1]['x'], [9., 10.])
  assert _labels(data.create_tf_dataset_for_client('c')) == [0, 0, 1]
  with pytest.raises(tff.Error, match="'z' is not a client"):
    data.create_tf_dataset_for_client('z')
  with pytest.raises(ValueError):  # As TFF raises.
    data.create_tf_dataset_for_client('z')


def test_test_client_data_takes_lists_and_tuples():
  lists = TestClientData({'a': [1.0, 2.0], 'b': [3.0]})
  assert lists.element_type_structure == tf.TensorSpec([], tf.float32)
  assert _values(lists.create_tf_dataset_for_client('a')) == [1.0, 2.0]
  pairs = TestClientData({'a': ([1, 2], [0.5, 0.25])})
  assert list(pairs.create_tf_dataset_for_client('a').as_numpy_iterator())[
      1] == (2, 0.25)


def test_all_clients_in_one_dataset_in_tffs_seeded_order():
  data = _three_clients()
  assert _labels(data.create_tf_dataset_from_all_clients(seed=1)) == [
      0, 1, 0, 0, 1, 1]  # c, b, a
  eight = TestClientData({str(i): [float(i)] for i in range(8)})
  assert _values(eight.create_tf_dataset_from_all_clients(seed=0)) == [
      6., 2., 1., 7., 3., 0., 5., 4.]
  assert _values(eight.create_tf_dataset_from_all_clients(seed=5)) == [
      7., 2., 4., 1., 0., 5., 6., 3.]
  assert _values(eight.create_tf_dataset_from_all_clients(seed=[1, 2])) == [
      2., 4., 1., 5., 6., 3., 0., 7.]
  # Seeded means repeatable; the client ids themselves stay in order.
  assert _values(eight.create_tf_dataset_from_all_clients(seed=5)) == [
      7., 2., 4., 1., 0., 5., 6., 3.]
  assert eight.client_ids == [str(i) for i in range(8)]


def test_datasets_yields_clients_in_seeded_order_up_to_a_limit():
  eight = TestClientData({str(i): [float(i)] for i in range(8)})
  firsts = [_values(d) for d in eight.datasets(limit_count=3, seed=0)]
  assert firsts == [[6.0], [2.0], [1.0]]
  assert len(list(eight.datasets())) == 8


def test_seeds_are_checked():
  data = _three_clients()
  with pytest.raises(tff.Error, match='seed must be'):
    data.create_tf_dataset_from_all_clients(seed=-1)
  with pytest.raises(TypeError, match='seed must be'):
    list(data.datasets(seed='seven'))


def test_preprocess_applies_to_every_path():
  data = _three_clients().preprocess(
      lambda d: d.map(lambda e: e['x'] * 2.0).batch(2))
  assert data.element_type_structure == tf.TensorSpec([None, 2], tf.float32)
  batches = list(data.create_tf_dataset_for_client('c').as_numpy_iterator())
  assert [b.shape for b in batches] == [(2, 2), (1, 2)]
  np.testing.assert_array_equal(batches[1], [[22., 24.]])
  shapes = [[b.shape for b in d.as_numpy_iterator()]
            for d in data.datasets(limit_count=2, seed=0)]
  assert shapes == [[(2, 2), (1, 2)], [(1, 2)]]  # c, then b (TFF's order).
  everything = list(data.create_tf_dataset_from_all_clients(
      seed=0).as_numpy_iterator())
  np.testing.assert_array_equal(everything[2], [[10., 12.]])  # b, traced.
  with pytest.raises(TypeError, match='dataset -> dataset'):
    data.preprocess('not a function')


def _counting_client_data(client_ids):
  """Client 'n' has the examples 0 .. n-1, made in TensorFlow from its id."""
  return ClientData.from_clients_and_tf_fn(
      client_ids, lambda client_id: tf.data.Dataset.range(
          tf.strings.to_number(client_id, tf.int64)))


def test_from_clients_and_tf_fn():
  data = _counting_client_data(['3', '1', '2'])
  assert data.client_ids == ['3', '1', '2']
  assert data.element_type_structure == tf.TensorSpec([], tf.int64)
  assert list(data.create_tf_dataset_for_client('3').as_numpy_iterator()) == [
      0, 1, 2]
  everything = list(data.create_tf_dataset_from_all_clients(
      seed=4).as_numpy_iterator())
  assert sorted(everything) == [0, 0, 0, 1, 1, 2]
  with pytest.raises(ValueError, match="'4' is not a client"):
    data.create_tf_dataset_for_client('4')
  with pytest.raises(TypeError, match='must return a tf.data.Dataset'):
    ClientData.from_clients_and_tf_fn(['a'], lambda client_id: [1, 2])
  with pytest.raises(ValueError, match='at least one client'):
    ClientData.from_clients_and_tf_fn([], lambda client_id: None)


def test_a_dataset_fn_tf_cannot_trace_is_named():
  table = {'a': [1.0], 'b': [2.0]}
  data = ClientData.from_clients_and_tf_fn(
      ['a', 'b'], lambda cid: tf.data.Dataset.from_tensor_slices(table[cid]))
  assert _values(data.create_tf_dataset_for_client('b')) == [2.0]
  with pytest.raises(tff.Error, match='serializable_dataset_fn must run on '
                     'a string tensor'):
    data.create_tf_dataset_from_all_clients()


def test_train_test_client_split_as_tff_draws_it():
  train, test = ClientData.train_test_client_split(_three_clients(), 1,
                                                   seed=3)
  assert (train.client_ids, test.client_ids) == (['b', 'a'], ['c'])
  assert _labels(test.create_tf_dataset_for_client('c')) == [0, 0, 1]
  assert train.element_type_structure == _three_clients(
  ).element_type_structure


def test_train_test_client_split_keeps_empty_clients_out_of_test():
  ids = ['0', '2', '3', '1']
  data = _counting_client_data(ids)
  for seed in range(6):
    train, test = ClientData.train_test_client_split(data, 3, seed=seed)
    assert '0' not in test.client_ids  # It has no data.
    assert sorted(train.client_ids + test.client_ids) == sorted(ids)
    assert len(test.client_ids) == 3
  with pytest.raises(ValueError, match='no data'):
    ClientData.train_test_client_split(
        _counting_client_data(['0', '0', '0', '5']), 2, seed=1)
  with pytest.raises(ValueError, match='at most 3 can be test clients'):
    ClientData.train_test_client_split(data, 4)
  with pytest.raises(ValueError, match='must be positive'):
    ClientData.train_test_client_split(data, 0)


def test_dataset_computation_makes_a_clients_data_from_its_id():
  data = _three_clients()
  computation = data.dataset_computation
  assert computation.parameter_specs == (tf.TensorSpec([], tf.string),)
  assert computation.result_spec == tf.data.DatasetSpec(
      data.element_type_structure)
  made = computation.invoke(tf.constant('b'))
  assert _labels(made) == [1]
  assert data.dataset_computation is computation  # Built once.
  with pytest.raises(tf.errors.InvalidArgumentError, match='has no client'):
    computation.invoke(tf.constant('nobody'))


def test_dataset_computation_inside_a_compiled_round():
  # The clients receive their ids; each makes its data where it runs.
  data = TestClientData({'a': [1.0, 2.0], 'b': [3.0], 'c': [4.0, 5.0, 6.0]})
  f32 = tff.TensorType(tf.float32)

  @tff.tf_computation(tff.SequenceType(f32))
  def total(dataset):
    return dataset.reduce(0.0, lambda acc, x: acc + x)

  @tff.federated_computation(tff.type_at_server(f32),
                             tff.type_at_clients(tf.string))
  def next_fn(state, client_ids):
    datasets = tff.federated_map(data.dataset_computation, client_ids)
    return state, tff.federated_sum(tff.federated_map(total, datasets))

  process = tff.IterativeProcess(tff.tf_computation(lambda: 0.0), next_fn)
  form = tff.compile(process)
  _, metrics = tff.run_round(form, form.initialize(),
                             [tf.constant('a'), tf.constant('c')])
  assert float(metrics) == 18.0
  _, metrics = process.next(0.0, ['b'])
  assert float(metrics) == 3.0


def test_test_client_data_refuses_what_tff_refuses():
  with pytest.raises(TypeError, match='takes a dict'):
    TestClientData([('a', [1.0])])
  point = collections.namedtuple('Point', ['x'])
  with pytest.raises(TypeError, match='_asdict'):
    TestClientData({'a': point(x=[1.0])})
  with pytest.raises(TypeError, match="client 'b' has tuple slices"):
    TestClientData({'a': [1.0], 'b': (2.0,)})
  with pytest.raises(TypeError, match='TensorFlow tensor'):
    TestClientData({'a': {'x': tf.constant([1.0])}})
  with pytest.raises(ValueError, match="client 'b' has no data"):
    TestClientData({'a': [1.0], 'b': []})
  with pytest.raises(TypeError, match='client ids must be strings'):
    TestClientData({'a': [1.0], 7: [2.0]})


def test_clients_of_different_shapes_cannot_share_one_traced_fn():
  data = TestClientData({'a': [[1.0, 2.0]], 'b': [[1.0, 2.0, 3.0]]})
  assert data.create_tf_dataset_for_client('b').element_spec.shape == [3]
  with pytest.raises(ValueError, match="client 'b' has elements"):
    data.create_tf_dataset_from_all_clients()


def test_a_data_set_not_cached_is_refused_naming_the_file(tmp_path):
  with pytest.raises(tff.simulation.datasets.DatasetNotCachedError,
                     match=r'emnist_all\.sqlite is not on this machine.*'
                     r'emnist_all\.sqlite\.lzma'):
    tff.simulation.datasets.emnist.load_data(cache_dir=str(tmp_path))
  assert not hasattr(tff.simulation.datasets, 'no_such_name')


def test_to_dict_is_what_the_runners_take(tmp_path):
  import beam_runner  # pylint: disable=g-import-not-at-top
  data = _three_clients().preprocess(lambda d: d.batch(2))
  datasets = data.to_dict()
  assert list(datasets) == ['a', 'b', 'c']
  assert len(data.to_dict(['b'])) == 1
  written = beam_runner.write_client_data(str(tmp_path / 'clients'),
                                          datasets)
  assert written.client_ids() == ['a', 'b', 'c']
  spec = tf.data.DatasetSpec(data.element_type_structure)
  written.check(spec)
  batches = list(written.read('c', spec).as_numpy_iterator())
  assert [list(b['y']) for b in batches] == [[0, 0], [1]]


def test_file_per_user_client_data(tmp_path):
  for name, lines in (('bob', ['1', '2']), ('alice', ['3'])):
    (tmp_path / name).write_text('\n'.join(lines) + '\n')
  data = tff.simulation.datasets.FilePerUserClientData.create_from_dir(
      str(tmp_path), tf.data.TextLineDataset)
  assert data.client_ids == ['alice', 'bob']
  assert data.element_type_structure == tf.TensorSpec([], tf.string)
  assert list(data.create_tf_dataset_for_client('bob').as_numpy_iterator(
  )) == [b'1', b'2']
  assert sorted(data.create_tf_dataset_from_all_clients(
      seed=0).as_numpy_iterator()) == [b'1', b'2', b'3']
  assert list(data.dataset_computation.invoke(
      tf.constant('alice')).as_numpy_iterator()) == [b'3']
  with pytest.raises(ValueError, match="'carol' is not a client"):
    data.create_tf_dataset_for_client('carol')
