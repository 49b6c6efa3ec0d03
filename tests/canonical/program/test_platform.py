"""tff.program's platform: the contexts a program's platform lines install
(tff.framework, tff.backends.native, NativeFederatedContext), what a
context may hand back (contains_only_server_placed_data), client ids as a
data source, and releases to TensorBoard and to SavedModels (local and
S3)."""

import asyncio
import collections
import os

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff
from canonical import errors
from canonical import io as storage
from canonical import program

run = program.run_sync


@tff.federated_computation(tff.FederatedType(np.int32, tff.SERVER),
                           tff.FederatedType(tff.SequenceType(np.int32),
                                             tff.CLIENTS))
def add_sums(state, data):
  sums = tff.federated_map(
      tff.tensorflow.computation(lambda d: d.reduce(0, tf.add),
                                 tff.SequenceType(np.int32)), data)
  total = tff.federated_sum(sums)
  return (tff.federated_map(
      tff.tensorflow.computation(lambda a, b: a + b, np.int32, np.int32),
      (state, total)), collections.OrderedDict(total=total, scale=[total]))


@pytest.fixture(autouse=True)
def restores_the_context():
  previous = tff.framework.get_context_stack().current
  yield
  tff.framework.set_default_context(previous)


def _install_native_context():
  context = tff.backends.native.create_async_local_cpp_execution_context()
  tff.framework.set_default_context(tff.program.NativeFederatedContext(
      context))


def _datasets(*values):
  return [tf.data.Dataset.from_tensor_slices(np.array(v, np.int32))
          for v in values]


def test_a_native_context_returns_resolved_references_in_the_result_s_containers():
  _install_native_context()
  state, metrics = add_sums(np.int32(1), _datasets([1, 2], [3]))
  assert isinstance(state, program.NativeValueReference)
  assert isinstance(metrics, collections.OrderedDict)
  assert isinstance(metrics['scale'], list)
  assert state.type_signature == tff.TensorType(np.int32)
  # References go back in as arguments, with or without an event loop.
  state, metrics = add_sums(state, _datasets([10]))
  assert run(program.materialize_value((state, metrics))) == (
      17, collections.OrderedDict(total=10, scale=[10]))

  async def logic():  # As TFF's program logic calls it: inside a loop.
    result = add_sums(state, _datasets([5]))
    return await program.materialize_value(result)

  assert asyncio.run(logic())[0] == 22


def test_without_the_platform_lines_computations_return_values():
  assert isinstance(tff.framework.get_context_stack().current,
                    tff.framework.ExecutionContext)
  state, _ = add_sums(np.int32(1), _datasets([1, 2]))
  assert state == 4 and not isinstance(state, program.NativeValueReference)


def test_a_reference_from_elsewhere_is_awaited_outside_an_event_loop():

  class Later(program.MaterializableValueReference):
    type_signature = None

    async def get_value(self):
      await asyncio.sleep(0)
      return np.int32(5)

  _install_native_context()
  state, _ = add_sums(Later(), _datasets([1]))
  assert run(program.materialize_value(state)) == 6

  async def logic():
    return add_sums(Later(), _datasets([1]))

  with pytest.raises(errors.InvalidValueError, match='materialize_value'):
    asyncio.run(logic())


def test_an_async_context_makes_calls_awaitable_as_in_tff():
  tff.backends.native.set_async_local_cpp_execution_context()
  result = add_sums(np.int32(0), _datasets([4]))
  assert asyncio.iscoroutine(result)
  state, metrics = asyncio.run(result)
  assert (state, metrics['total']) == (4, 4)


def test_a_sync_context_and_the_context_stack():
  context = tff.backends.native.create_sync_local_cpp_execution_context(
      default_num_clients=2)
  assert context.invoke(add_sums, (np.int32(1), _datasets([1], [2])))[0] == 4
  assert context.invoke(add_sums, {'state': np.int32(1),
                                   'data': _datasets([7])})[0] == 8
  tff.framework.get_context_stack().set_default_context(context)
  assert add_sums(np.int32(0), _datasets([3]))[0] == 3
  with pytest.raises(errors.InvalidTypeError, match='expected a context'):
    tff.framework.set_default_context(object())
  with pytest.raises(errors.InvalidTypeError, match='execution context'):
    tff.program.NativeFederatedContext(context.executor)


def test_contains_only_server_placed_data():
  check = program.contains_only_server_placed_data
  assert check(add_sums.type_signature.result)
  assert not check(add_sums.type_signature)  # A function.
  assert not check(add_sums.type_signature.parameter)  # Data at CLIENTS.
  assert check(tff.TensorType(np.float32, [2]))
  assert check(tff.SequenceType(np.int32))
  assert check(tff.StructType([('a', np.int32),
                               ('b', tff.SequenceType(np.float32))]))
  with pytest.raises(errors.InvalidTypeError, match='expected a type'):
    check(3)


def test_a_native_context_refuses_results_at_the_clients():
  @tff.federated_computation(tff.FederatedType(np.int32, tff.SERVER))
  def broadcast(value):
    return tff.federated_broadcast(value)

  _install_native_context()
  with pytest.raises(ValueError, match='CLIENTS'):
    broadcast(np.int32(1))


# ClientIdDataSource.


def test_client_ids_are_selected_by_the_seed_and_the_position():
  source = program.ClientIdDataSource(['a', 'b', 'c', 'd'], seed=3)
  assert str(source.federated_type) == '{str}@CLIENTS'
  iterator = source.iterator()
  first = [iterator.select(2) for _ in range(5)]
  assert all(len(set(s)) == 2 and set(s) <= set('abcd') for s in first)
  assert len({tuple(s) for s in first}) > 1  # Drawn anew each time.
  again = program.ClientIdDataSource(['a', 'b', 'c', 'd'], seed=3).iterator()
  assert [again.select(2) for _ in range(5)] == first
  assert sorted(iterator.select(4)) == ['a', 'b', 'c', 'd']


def test_a_client_id_iterator_goes_on_where_it_was_after_a_save(tmp_path):
  iterator = program.ClientIdDataSource(['x', 'y', 'z'], seed=1).iterator()
  iterator.select(1)
  manager = program.FileProgramStateManager(str(tmp_path))
  run(manager.save({'iterator': iterator, 'round': 1}, 1))
  fresh = program.ClientIdDataSource(['x', 'y', 'z'], seed=1).iterator()
  restored, _ = run(manager.load_latest({'iterator': fresh, 'round': 0}))
  assert restored['iterator'] == iterator
  assert restored['iterator'].select(2) == iterator.select(2)
  with pytest.raises(errors.InvalidValueError, match='not an iterator'):
    program.ClientIdDataSourceIterator.from_bytes(b'{"format": "other"}')


@pytest.mark.parametrize('bad, error', [
    ('abc', errors.InvalidTypeError), ([], errors.InvalidValueError),
    (['a', 1], errors.InvalidTypeError)])
def test_client_ids_are_checked(bad, error):
  with pytest.raises(error, match='client_ids'):
    program.ClientIdDataSource(bad)
  iterator = program.ClientIdDataSource(['a']).iterator()
  with pytest.raises(errors.InvalidValueError, match='from 0 to'):
    iterator.select(2)


# Releases to TensorBoard and to SavedModels.


def _events(directory):
  """`{(tag, step): value}` of the event files under `directory`."""
  found = {}
  for name in tf.io.gfile.listdir(directory):
    for record in tf.data.TFRecordDataset(os.path.join(directory, name)):
      event = tf.compat.v1.Event.FromString(record.numpy())
      for value in event.summary.value:
        tensor = tf.make_ndarray(value.tensor)
        found[(value.tag, event.step)] = tensor.tolist()
  return found


def test_tensorboard_releases_write_event_files_tensorboard_reads(tmp_path):
  manager = program.TensorBoardReleaseManager(tmp_path / 'tb')
  value = collections.OrderedDict(
      loss=np.float32(0.5), weights=np.array([1.0, 2.0], np.float32),
      model_metrics=collections.OrderedDict(accuracy=0.75, rounds=3),
      name='skipped', done=True)
  run(manager.release(value, 1))
  run(manager.release(collections.OrderedDict(loss=0.25), key=2))
  events = _events(str(tmp_path / 'tb'))
  assert events[('loss', 1)] == 0.5 and events[('loss', 2)] == 0.25
  assert events[('model_metrics/accuracy', 1)] == 0.75
  assert events[('model_metrics/rounds', 1)] == 3.0
  assert events[('done', 1)] == 1.0
  assert ('weights', 1) in events  # A histogram.
  assert not any(tag == 'name' for tag, _ in events)
  with pytest.raises(errors.InvalidTypeError, match='key'):
    run(manager.release(value, 'one'))


def test_tensorboard_releases_reach_s3(s3, tmp_path):
  summary_dir = s3.bucket_url + '/tb'
  manager = program.TensorBoardReleaseManager(summary_dir)
  run(manager.release({'loss': 1.5}, 1))
  run(manager.release({'loss': 0.5}, 2))
  local = tmp_path / 'copy'
  local.mkdir()
  for name in storage.list_files(summary_dir):
    (local / name).write_bytes(storage.read_bytes(f'{summary_dir}/{name}'))
  assert _events(str(local)) == {('loss', 1): 1.5, ('loss', 2): 0.5}


class Checkpoint(collections.namedtuple('Checkpoint', ['weights', 'round'])):
  pass


@pytest.mark.parametrize('where', ['local', 's3'])
def test_saved_model_releases_give_their_values_back(request, tmp_path,
                                                     where):
  root = (str(tmp_path / 'releases') if where == 'local' else
          request.getfixturevalue('s3').bucket_url + '/releases')
  manager = program.SavedModelFileReleaseManager(root, prefix='model_')
  value = collections.OrderedDict(
      state=Checkpoint([np.arange(3, dtype=np.float32)], np.int64(4)),
      empty=(), label='x')
  run(manager.release(value, 'training_checkpoint_round_4'))
  got = run(manager.get_value('training_checkpoint_round_4'))
  np.testing.assert_array_equal(got['state'].weights[0], [0.0, 1.0, 2.0])
  assert got['state'].round == 4 and got['label'] == b'x'
  assert got['empty'] == ()
  # A key released again is replaced whole.
  run(manager.release({'w': np.ones([2], np.float32)},
                      'training_checkpoint_round_4'))
  np.testing.assert_array_equal(
      run(manager.get_value('training_checkpoint_round_4'))['w'], [1, 1])
  with pytest.raises(program.ReleasedValueNotFoundError, match='nope'):
    run(manager.get_value('nope'))
  if where == 'local':  # TensorFlow reads it as TFF's are read.
    loaded = tf.saved_model.load(str(tmp_path / 'releases' /
                                     'model_training_checkpoint_round_4'))
    np.testing.assert_array_equal(loaded()['w'], [1, 1])


def test_a_release_missing_its_saved_model_file_is_not_there(tmp_path):
  manager = program.SavedModelFileReleaseManager(str(tmp_path))
  run(manager.release({'w': 1.0}, 1))
  os.remove(tmp_path / 'release_1' / 'saved_model.pb')  # A write cut short.
  with pytest.raises(program.ReleasedValueNotFoundError):
    run(manager.get_value(1))
  with pytest.raises(errors.InvalidValueError, match='path separators'):
    run(manager.release({'w': 1.0}, '../escape'))
