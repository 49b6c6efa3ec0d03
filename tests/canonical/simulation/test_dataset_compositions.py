"""tff.simulation.compose_dataset_computation_with_*: processes whose clients
receive ids and make their own data with ClientData.dataset_computation, as
the 'Working with tff's ClientData' tutorial does."""

import collections

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff

F32 = tff.TensorType(tf.float32)
POINTS = tff.SequenceType(tff.TensorType(tf.float32, [2]))


def _client_data():
  return tff.simulation.datasets.TestClientData({
      'a': {'x': np.array([[1., 2.], [3., 4.]], np.float32)},
      'b': {'x': np.array([[5., 6.]], np.float32)},
      'c': {'x': np.array([[0., 1.], [0., 1.], [0., 1.]], np.float32)},
  }).preprocess(lambda d: d.map(lambda e: e['x']))


def _process():

  @tff.tf_computation(POINTS)
  def total(points):
    return points.reduce(0.0, lambda acc, x: acc + tf.reduce_sum(x))

  @tff.tf_computation(F32, F32)
  def add(state, amount):
    return state + amount

  @tff.federated_computation(tff.type_at_server(F32),
                             tff.type_at_clients(POINTS))
  def next_fn(state, client_points):
    round_sum = tff.federated_sum(tff.federated_map(total, client_points))
    return tff.federated_map(add, (state, round_sum)), collections.OrderedDict(
        round_sum=round_sum)

  return tff.IterativeProcess(tff.tf_computation(lambda: tf.constant(0.0)),
                              next_fn)


def test_a_process_taking_client_ids():
  data = _client_data()
  process = _process()
  by_id = tff.simulation.compose_dataset_computation_with_iterative_process(
      data.dataset_computation, process)
  assert isinstance(by_id, tff.IterativeProcess)
  assert by_id.next.parameter_types[1] == tff.type_at_clients(tf.string)
  state = by_id.initialize()
  state, metrics = by_id.next(state, ['a', 'c'])
  assert float(metrics['round_sum']) == 13.0
  # The state passes between the two processes, as TFF's tutorial says.
  state, metrics = process.next(state, [data.create_tf_dataset_for_client(
      'b')])
  assert float(state) == 24.0

  form = tff.compile(by_id)
  assert form.client_data_spec == tf.TensorSpec([], tf.string)
  new_state, metrics = tff.run_round(form, form.initialize(),
                                     [tf.constant('b'), tf.constant('a')])
  assert float(new_state) == 21.0


def test_run_training_process_with_client_ids():
  data = _client_data()
  by_id = tff.simulation.compose_dataset_computation_with_iterative_process(
      data.dataset_computation, _process())
  sample = tff.simulation.build_uniform_sampling_fn(data.client_ids,
                                                    random_seed=0)
  sums = {'a': 10.0, 'b': 11.0, 'c': 3.0}
  state = tff.simulation.run_training_process(
      by_id, lambda round_num: sample(round_num, 2), 3)
  expected = sum(sums[c] for r in (1, 2, 3) for c in sample(r, 2))
  assert float(state) == pytest.approx(expected)


def test_compose_with_a_computation_keeps_the_other_parameters():
  data = _client_data()

  @tff.tf_computation(POINTS, F32)
  def scaled_total(points, scale):
    return scale * points.reduce(0.0, lambda acc, x: acc + tf.reduce_sum(x))

  @tff.federated_computation(tff.type_at_server(F32),
                             tff.type_at_clients(POINTS))
  def weighted(scale, client_points):
    return tff.federated_sum(tff.federated_map(
        scaled_total, (client_points, tff.federated_broadcast(scale))))

  composed = tff.simulation.compose_dataset_computation_with_computation(
      data.dataset_computation, weighted)
  assert composed.parameter_types == (tff.type_at_server(F32),
                                      tff.type_at_clients(tf.string))
  assert float(composed(2.0, ['a', 'b'])) == 42.0


def test_learning_process_composition_keeps_its_other_attributes():
  data = _client_data()
  process = _process()
  process.get_model_weights = lambda state: state * 10.0
  by_id = tff.simulation.compose_dataset_computation_with_learning_process(
      data.dataset_computation, process)
  assert by_id is not process and by_id.next is not process.next
  assert by_id.get_model_weights(2.0) == 20.0
  _, metrics = by_id.next(by_id.initialize(), ['b'])
  assert float(metrics['round_sum']) == 11.0


def test_mismatched_types_are_named():
  data = _client_data()

  @tff.federated_computation(tff.type_at_server(F32),
                             tff.type_at_clients(F32))
  def no_datasets(state, values):
    return state, tff.federated_sum(values)

  with pytest.raises(tff.simulation.SequenceTypeNotFoundError,
                     match='no parameter of client data sets'):
    tff.simulation.compose_dataset_computation_with_computation(
        data.dataset_computation, no_datasets)

  ints = tff.SequenceType(tff.TensorType(tf.int32))

  @tff.federated_computation(tff.type_at_clients(ints))
  def count(client_ints):
    return tff.federated_sum(tff.federated_map(
        tff.tf_computation(lambda d: d.reduce(0, lambda n, _: n + 1), ints),
        client_ints))

  with pytest.raises(tff.simulation.SequenceTypeNotAssignableError,
                     match=r'makes .*float32.* takes .*int32'):
    tff.simulation.compose_dataset_computation_with_computation(
        data.dataset_computation, count)
  with pytest.raises(TypeError, match='must return a tf.data.Dataset'):
    tff.simulation.compose_dataset_computation_with_iterative_process(
        tff.tf_computation(lambda s: tf.strings.length(s), tf.string),
        _process())


def test_on_beam_the_clients_make_their_data_from_their_ids(tmp_path):
  import beam_runner  # pylint: disable=g-import-not-at-top
  data = _client_data()
  by_id = tff.simulation.compose_dataset_computation_with_iterative_process(
      data.dataset_computation, _process())
  form_path = str(tmp_path / 'form.pb')
  tff.save(tff.compile(by_id), form_path)
  # The runner's client data is each client's own id: nothing else is sent.
  ids = {client_id: tf.constant(client_id) for client_id in data.client_ids}
  result = beam_runner.run(form_path, ids, rounds=2, clients_per_round=2,
                           output_dir=str(tmp_path / 'run'), seed=0)
  sums = {'a': 10.0, 'b': 11.0, 'c': 3.0}
  expected = sum(sums[c] for r in (1, 2) for c in beam_runner.sample_clients(
      data.client_ids, 2, 0, r))
  assert float(result.state) == pytest.approx(expected)
