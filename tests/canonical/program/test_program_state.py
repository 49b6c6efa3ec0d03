"""tff.program.FileProgramStateManager over canonical.io: round trips of
nested state, versions kept as TFF keeps them, and saves that publish a
version whole or not at all, on local disk and on S3 (a local moto server)."""

import collections
import concurrent.futures
import dataclasses
import os
import time
from typing import NamedTuple

import numpy as np
import pytest
import tensorflow as tf

from canonical import errors
from canonical import io as storage
from canonical import program
from canonical.io import local

run = program.run_sync


class TrainState(NamedTuple):
  weights: object
  round_num: int


@dataclasses.dataclass
class Optimizer:
  learning_rate: float
  moments: dict = dataclasses.field(default_factory=dict)


@pytest.fixture(params=['local', 's3'])
def root(request, tmp_path):
  """A state directory on each kind of storage."""
  if request.param == 'local':
    storage.configure(None)
    return str(tmp_path / 'state')
  return request.getfixturevalue('s3').bucket_url + '/state'


def _state(round_num):
  return TrainState(
      weights=collections.OrderedDict(
          dense=[tf.constant([[1.0, 2.0], [3.0, 4.0]]) * round_num,
                 np.arange(3, dtype=np.int64)],
          bias=np.float32(0.5)),
      round_num=round_num)


def test_round_trip_restores_structure_values_and_types(root):
  manager = program.FileProgramStateManager(root)
  value = {
      'train': _state(3),
      'optimizer': Optimizer(0.1, {'m': np.ones([2], np.float16)}),
      'python': [1, 2.5, True, 'text', b'\x00bytes', None, 1 + 2j, 2**70],
      'empty': ((), [], {}),
      'strings': tf.constant([[b'a', b'b\x00']]),
      'scalar_string': tf.constant('hello'),
      'numpy_scalars': (np.int8(-3), np.float64(0.1), np.bool_(True)),
  }
  run(manager.save(value, 1))

  loaded = run(manager.load(1, value))

  train = loaded['train']
  assert isinstance(train, TrainState) and train.round_num == 3
  assert isinstance(train.weights, collections.OrderedDict)
  assert list(train.weights) == ['dense', 'bias']
  np.testing.assert_array_equal(train.weights['dense'][0],
                                [[3.0, 6.0], [9.0, 12.0]])
  assert train.weights['dense'][0].dtype == np.float32
  np.testing.assert_array_equal(train.weights['dense'][1], [0, 1, 2])
  assert train.weights['bias'] == np.float32(0.5)
  assert isinstance(train.weights['bias'], np.float32)
  optimizer = loaded['optimizer']
  assert isinstance(optimizer, Optimizer) and optimizer.learning_rate == 0.1
  assert optimizer.moments['m'].dtype == np.float16
  python = loaded['python']
  assert python == [1, 2.5, True, 'text', b'\x00bytes', None, 1 + 2j, 2**70]
  assert [type(x) for x in python[:5]] == [int, float, bool, str, bytes]
  assert loaded['empty'] == ((), [], {})
  assert loaded['strings'].tolist() == [[b'a', b'b\x00']]
  assert loaded['scalar_string'] == b'hello'  # As TF's numpy() gives it.
  assert [type(x) for x in loaded['numpy_scalars']] == [
      np.int8, np.float64, np.bool_]
  assert loaded['numpy_scalars'][1] == 0.1


def test_load_puts_values_into_the_callers_containers(tmp_path):
  manager = program.FileProgramStateManager(str(tmp_path))
  run(manager.save(({'w': np.zeros([2])}, 7), 1))  # Saved as plain tuple.

  state, version = run(manager.load_latest(
      TrainState(weights={'w': np.ones([2])}, round_num=0)))

  assert version == 1
  assert state == TrainState(weights={'w': state.weights['w']}, round_num=7)
  np.testing.assert_array_equal(state.weights['w'], [0.0, 0.0])
  as_saved = run(manager.load(1, None))
  assert isinstance(as_saved, tuple) and as_saved[1] == 7


def test_load_refuses_a_structure_that_does_not_fit(tmp_path):
  manager = program.FileProgramStateManager(str(tmp_path))
  run(manager.save(TrainState({'w': 1.0}, 2), 1))

  with pytest.raises(errors.InvalidValueError) as raised:
    run(manager.load(1, TrainState({'w': 1.0, 'b': 0.0}, 0)))
  assert "structure['weights']" in str(raised.value)
  assert "keys ['w']" in str(raised.value)
  assert "keys ['b', 'w']" in str(raised.value)
  with pytest.raises(errors.InvalidValueError, match='tuple of 3 items'):
    run(manager.load(1, (1, 2, 3)))


def test_load_latest_and_get_versions_when_nothing_is_saved(root):
  manager = program.FileProgramStateManager(root)
  assert run(manager.get_versions()) is None
  assert run(manager.load_latest(_state(0))) == (None, 0)
  with pytest.raises(program.ProgramStateNotFoundError, match='version: 4'):
    run(manager.load(4, _state(0)))


def test_versions_and_keep_total(root):
  manager = program.FileProgramStateManager(root, keep_total=3)
  for version in range(1, 7):
    run(manager.save(_state(version), version))
    assert run(manager.load_latest(_state(0)))[1] == version

  assert run(manager.get_versions()) == [1, 5, 6]
  state, version = run(manager.load_latest(_state(0)))
  assert version == 6 and state.round_num == 6
  assert run(manager.load(1, _state(0))).round_num == 1
  with pytest.raises(program.ProgramStateNotFoundError):
    run(manager.load(3, _state(0)))
  run(manager.remove_all())
  assert run(manager.get_versions()) is None


# The versions TFF 0.87's own manager keeps after saving versions 1 to 8
# (run against it while writing this test).
@pytest.mark.parametrize('keep, kept', [
    (dict(keep_total=3), [1, 7, 8]),
    (dict(keep_total=3, keep_first=False), [6, 7, 8]),
    (dict(keep_total=0), [1, 2, 3, 4, 5, 6, 7, 8]),
    (dict(keep_total=3, keep_every_k=3), [1, 6, 8]),
    (dict(keep_total=0, keep_every_k=2, keep_first=False), [2, 4, 6, 8]),
    (dict(keep_total=1), [1]),
])
def test_versions_kept_as_tff_keeps_them(tmp_path, keep, kept):
  manager = program.FileProgramStateManager(str(tmp_path), **keep)
  for version in range(1, 9):
    run(manager.save(1.0, version))
  assert run(manager.get_versions()) == kept


def test_a_version_is_saved_once(root):
  manager = program.FileProgramStateManager(root)
  run(manager.save(_state(1), 1))
  with pytest.raises(program.ProgramStateExistsError, match='version 1'):
    run(manager.save(_state(2), 1))
  assert run(manager.load(1, _state(0))).round_num == 1


def test_of_two_managers_saving_one_version_exactly_one_wins(root):
  managers = [program.FileProgramStateManager(root) for _ in range(4)]

  def save(i):
    try:
      run(managers[i].save(_state(i), 5))
      return i
    except program.ProgramStateExistsError:
      return None

  with concurrent.futures.ThreadPoolExecutor(4) as pool:
    winners = [i for i in pool.map(save, range(4)) if i is not None]
  assert len(winners) == 1
  assert run(managers[0].load(5, _state(0))).round_num == winners[0]


def test_an_interrupted_save_leaves_no_version(tmp_path, monkeypatch):
  manager = program.FileProgramStateManager(str(tmp_path))
  run(manager.save(_state(1), 1))
  run(manager.save(_state(2), 2))
  real_create_only = local.LocalStore.create_only

  def dies_half_way(self, path, data):
    # What a writer killed mid-write leaves: part of a temporary file.
    temporary = os.path.join(os.path.dirname(path),
                             f'.{os.path.basename(path)}.abc.tmp')
    with open(temporary, 'wb') as f:
      f.write(data[:len(data) // 2])
    raise OSError('No space left on device')

  monkeypatch.setattr(local.LocalStore, 'create_only', dies_half_way)
  with pytest.raises(OSError, match='No space left'):
    run(manager.save(_state(3), 3))

  assert run(manager.get_versions()) == [1, 2]
  state, version = run(program.FileProgramStateManager(
      str(tmp_path)).load_latest(_state(0)))
  assert (version, state.round_num) == (2, 2)
  # Once abandoned (an hour old), the next save deletes the leftover.
  leftover = tmp_path / '.program_state_3.abc.tmp'
  old = time.time() - 2 * 3600
  os.utime(leftover, (old, old))
  monkeypatch.setattr(local.LocalStore, 'create_only', real_create_only)
  run(manager.save(_state(3), 3))
  assert sorted(os.listdir(tmp_path)) == [
      'program_state_1', 'program_state_2', 'program_state_3']


def test_a_value_that_cannot_be_saved_writes_nothing(root):
  manager = program.FileProgramStateManager(root)
  with pytest.raises(errors.InvalidTypeError) as raised:
    run(manager.save({'weights': [np.zeros(2), object()]}, 1))
  assert "state['weights'][1]" in str(raised.value)
  with pytest.raises(errors.InvalidTypeError, match='tf.data.Dataset'):
    run(manager.save({'data': tf.data.Dataset.range(3)}, 1))
  assert run(manager.get_versions()) is None
  assert storage.list_files(root) == []


def test_a_damaged_latest_version_is_an_error_naming_it(tmp_path):
  manager = program.FileProgramStateManager(str(tmp_path))
  run(manager.save(_state(1), 1))
  data = (tmp_path / 'program_state_1').read_bytes()
  (tmp_path / 'program_state_2').write_bytes(data[:len(data) - 40])
  damaged = bytearray(data)
  damaged[data.index(b'\x93NUMPY') + 130] ^= 0xFF  # A flipped array byte.
  (tmp_path / 'program_state_3').write_bytes(bytes(damaged))

  with pytest.raises(errors.InvalidValueError, match='program_state_3'):
    run(manager.load_latest(_state(0)))
  with pytest.raises(errors.InvalidValueError, match='program_state_2'):
    run(manager.load(2, _state(0)))


def test_files_that_are_not_versions_are_ignored(tmp_path):
  manager = program.FileProgramStateManager(str(tmp_path), prefix='ckpt_')
  run(manager.save(1, 10))
  for name in ('ckpt_010', 'ckpt_x', 'other_12', 'ckpt_+11', '.ckpt_12.a.tmp'):
    (tmp_path / name).write_bytes(b'')
  assert run(manager.get_versions()) == [10]
  assert run(manager.load_latest(0)) == (1, 10)


def test_bad_arguments_are_named(tmp_path):
  with pytest.raises(errors.InvalidValueError, match='root_dir is empty'):
    program.FileProgramStateManager('')
  with pytest.raises(errors.InvalidTypeError, match='keep_total'):
    program.FileProgramStateManager(str(tmp_path), keep_total='5')
  manager = program.FileProgramStateManager(tmp_path)
  with pytest.raises(errors.InvalidTypeError, match='version must be an int'):
    run(manager.save(1, 1.5))


def test_run_sync_inside_a_running_event_loop(tmp_path):
  manager = program.FileProgramStateManager(str(tmp_path))

  async def notebook_cell():
    # A library called from a coroutine, that itself runs synchronously.
    run(manager.save({'x': 1}, 1))
    return await manager.load(1, {'x': 0})

  import asyncio  # pylint: disable=g-import-not-at-top
  assert asyncio.run(notebook_cell()) == {'x': 1}
