"""tff.program's release managers: in memory, to the log, to a CSV file on
local disk or S3 (byte for byte what TFF 0.87 writes), and the managers that
group, filter, thin out and delay releases."""

import asyncio
import collections
import datetime
import logging
from typing import NamedTuple

import numpy as np
import pytest
import tensorflow as tf

from canonical import errors
from canonical import io as storage
from canonical import program

run = program.run_sync


class Metrics(NamedTuple):
  loss: float
  accuracy: float


class _Reference(program.MaterializableValueReference):
  """A value a platform has not fetched yet."""

  def __init__(self, value, delay=0):
    self._value = value
    self._delay = delay
    self.fetched = 0

  @property
  def type_signature(self):
    return None

  async def get_value(self):
    self.fetched += 1
    await asyncio.sleep(self._delay * 0.01)
    return self._value


@pytest.fixture(params=['local', 's3'])
def root(request, tmp_path):
  if request.param == 'local':
    storage.configure(None)
    return str(tmp_path)
  return request.getfixturevalue('s3').bucket_url + '/releases'


def test_memory_release_manager_keeps_values_by_key():
  manager = program.MemoryReleaseManager()
  reference = _Reference(np.float32(0.25))

  async def program_logic():
    await manager.release({'loss': 1.0}, key=1)
    await manager.release({'loss': reference, 'n': [1, 2]}, key=2)
    await manager.release({'loss': 0.5}, key=1)  # Replaces, keeps its place.

  asyncio.run(program_logic())
  values = manager.values()
  assert list(values) == [1, 2]
  assert values[1] == {'loss': 0.5}
  assert values[2] == {'loss': np.float32(0.25), 'n': [1, 2]}
  assert reference.fetched == 1
  values.clear()  # A copy: the manager keeps its own.
  assert len(manager.values()) == 2
  manager.remove_all()
  assert not manager.values()
  with pytest.raises(errors.InvalidTypeError, match='hashable'):
    run(manager.release(1.0, key=[1]))


def test_native_value_reference_awaits_its_task_once():
  calls = []

  async def compute():
    calls.append(1)
    return np.array([1, 2])

  async def program_logic():
    reference = program.NativeValueReference(asyncio.create_task(compute()),
                                             None)
    manager = program.MemoryReleaseManager()
    await manager.release(reference, key='a')
    await manager.release((reference,), key='b')
    return manager.values()

  values = asyncio.run(program_logic())
  np.testing.assert_array_equal(values['a'], [1, 2])
  np.testing.assert_array_equal(values['b'][0], [1, 2])
  assert calls == [1]


def test_logging_release_manager_logs_value_and_key(caplog):
  with caplog.at_level(logging.INFO, logger='canonical.program'):
    run(program.LoggingReleaseManager().release({'loss': _Reference(2.0)}, 3))
  assert caplog.messages == ['Releasing', "  value: {'loss': 2.0}",
                             '  key: 3']


def test_csv_release_manager_writes_what_tff_writes(root):
  # The bytes TFF 0.87's own CSVFileReleaseManager wrote for these releases.
  path = storage.join(root, 'metrics', 'train.csv')
  manager = program.CSVFileReleaseManager(path)
  assert storage.read_bytes(path) == b'key\r\n'

  async def program_logic():
    await manager.release({'loss': 1.0, 'acc': np.float32(0.5),
                           't': tf.constant([[1, 2], [3, 4]])}, key=1)
    await manager.release({'loss': 2.0, 'acc': np.float32(0.25), 'new': 'x',
                           't': tf.constant([[1, 2], [3, 4]])}, key=2)
    await manager.release({'loss': 3.0}, key=2)  # Round 2 again.

  asyncio.run(program_logic())
  assert storage.read_bytes(path) == (
      b'key,acc,loss,t,new\r\n1,0.5,1.0,"[[1, 2], [3, 4]]",\r\n2,,3.0,,\r\n')

  other = storage.join(root, 'other.csv')
  manager = program.CSVFileReleaseManager(
      other, save_mode=program.CSVSaveMode.WRITE)
  run(manager.release(collections.OrderedDict(b=1, a=[1.5, 2]), key=0))
  run(manager.release(5, key=1))  # A lone value: the column ''.
  assert storage.read_bytes(other) == (
      b'key,a/0,a/1,b,\r\n0,1.5,2,1,\r\n1,,,,5\r\n')


def test_csv_release_manager_resumes_an_existing_file(tmp_path):
  path = str(tmp_path / 'metrics.csv')
  first = program.CSVFileReleaseManager(path)
  for round_num in range(1, 5):
    run(first.release(Metrics(loss=1.0 / round_num, accuracy=0.5), round_num))

  # A restarted program goes on from round 3: rounds 3 and 4 are rewritten.
  second = program.CSVFileReleaseManager(path)
  run(second.release(Metrics(loss=9.0, accuracy=0.75), 3))

  lines = (tmp_path / 'metrics.csv').read_text().splitlines()
  assert lines == ['key,loss,accuracy', '1,1.0,0.5', '2,0.5,0.5',
                   '3,9.0,0.75']
  run(second.release({'loss': 1.0}, 0))  # Back to the start: columns too.
  assert (tmp_path / 'metrics.csv').read_text().splitlines() == [
      'key,loss', '0,1.0']


def test_csv_release_manager_refuses_a_file_without_its_key(tmp_path):
  (tmp_path / 'other.csv').write_text('round,loss\r\n1,0.5\r\n')
  with pytest.raises(program.CSVKeyFieldnameNotFoundError, match="'key'"):
    program.CSVFileReleaseManager(str(tmp_path / 'other.csv'))
  manager = program.CSVFileReleaseManager(str(tmp_path / 'other.csv'),
                                          key_fieldname='round')
  run(manager.release({'loss': 0.25}, 2))
  assert (tmp_path / 'other.csv').read_text().splitlines() == [
      'round,loss', '1,0.5', '2,0.25']
  with pytest.raises(errors.InvalidTypeError, match='key must be an int'):
    run(manager.release({'loss': 0.25}, 'three'))


def test_csv_releases_running_at_once_write_in_the_order_they_started(
    tmp_path):
  manager = program.CSVFileReleaseManager(str(tmp_path / 'm.csv'))

  async def program_logic():
    # The first release's value is ready last: were it written last, it
    # would drop every later round's row.
    await asyncio.gather(*[manager.release({'x': _Reference(i, 9 - i)}, i)
                           for i in range(1, 9)])

  asyncio.run(program_logic())
  rows = (tmp_path / 'm.csv').read_text().splitlines()[1:]
  assert rows == [f'{i},{i}' for i in range(1, 9)]


def test_grouping_release_manager_releases_to_each():
  first, second = program.MemoryReleaseManager(), program.MemoryReleaseManager()
  grouped = program.GroupingReleaseManager([first, second])
  run(grouped.release({'loss': 1.0}, key=4))
  assert first.values() == second.values() == {4: {'loss': 1.0}}
  with pytest.raises(errors.InvalidValueError, match='empty'):
    program.GroupingReleaseManager([])
  with pytest.raises(errors.InvalidTypeError, match=r'release_managers\[1\]'):
    program.GroupingReleaseManager([first, 'not a manager'])


@pytest.mark.parametrize('filter_fn, released', [
    (lambda path: True, {'loss': 1.0, 'extra': {'a': 1, 'b': [2, 3]}}),
    (lambda path: path == ('loss',), {'loss': 1.0}),
    (lambda path: path[:1] == ('extra',) and path != ('extra', 'b', 0),
     {'extra': {'a': 1, 'b': [3]}}),
    (lambda path: path[-1:] == ('b',) or len(path) == 3,
     {'extra': {'b': [2, 3]}}),
])
def test_filtering_release_manager_releases_the_paths_accepted(
    filter_fn, released):
  memory = program.MemoryReleaseManager()
  manager = program.FilteringReleaseManager(memory, filter_fn)
  run(manager.release({'loss': 1.0, 'extra': {'a': 1, 'b': [2, 3]}}, key=1))
  assert memory.values() == {1: released}


def test_filtering_release_manager_edge_cases():
  memory = program.MemoryReleaseManager()
  nothing = program.FilteringReleaseManager(memory, lambda path: False)
  run(nothing.release({'loss': 1.0}, key=1))
  assert not memory.values()  # Nothing left: nothing released.
  lone = program.FilteringReleaseManager(memory, lambda path: path == ())
  run(lone.release(2.0, key=2))
  assert memory.values() == {2: 2.0}
  whole = program.FilteringReleaseManager(
      memory, lambda path: path[0] == 'metrics')
  run(whole.release({'metrics': Metrics(1.0, 0.5), 'x': 3}, key=3))
  assert memory.values()[3] == {'metrics': Metrics(1.0, 0.5)}
  cut = program.FilteringReleaseManager(
      memory, lambda path: path != ('metrics', 'accuracy'))
  with pytest.raises(program.NotFilterableError, match=r"\['accuracy'\]"):
    run(cut.release({'metrics': Metrics(1.0, 0.5)}, key=4))


def test_periodic_release_manager_releases_every_nth():
  memory = program.MemoryReleaseManager()
  manager = program.PeriodicReleaseManager(memory, periodicity=3)
  for key in range(1, 11):
    run(manager.release(key * 10, key))
  assert list(memory.values()) == [3, 6, 9]
  by_time = program.PeriodicReleaseManager(
      memory, periodicity=datetime.timedelta(hours=1))
  run(by_time.release(0, 99))
  assert 99 not in memory.values()  # An hour has not passed.
  with pytest.raises(errors.InvalidValueError, match='periodicity'):
    program.PeriodicReleaseManager(memory, periodicity=0)


def test_delayed_release_manager_starts_at_the_delay():
  memory = program.MemoryReleaseManager()
  manager = program.DelayedReleaseManager(memory, delay=3)
  for key in range(1, 6):
    run(manager.release(key, key))
  assert list(memory.values()) == [3, 4, 5]
  with pytest.raises(errors.InvalidValueError, match='delay'):
    program.DelayedReleaseManager(memory, delay=0)
