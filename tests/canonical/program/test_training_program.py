"""A federated training program as a TFF 0.87 user writes it with
tff.program: await-style program logic over a data source, a program state
manager and release managers. A run that fails mid-way and is started again
goes on from its last saved round and ends where an uninterrupted run ends.
"""

import asyncio
import collections
from typing import NamedTuple

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff
from canonical import io as storage
from canonical import program

F = tff.TensorType(tf.float32)
CLIENT_VALUES = [[1.0, 2.0], [3.0], [6.0, 6.0, 9.0], [-2.0], [4.0, 0.0]]


@tff.tf_computation
def initial_weight():
  return tf.constant(0.0)


@tff.federated_computation
def initialize():
  return tff.federated_eval(initial_weight, tff.SERVER)


@tff.tf_computation(tff.SequenceType(F), F)
def client_delta(data, weight):
  total, count = data.reduce(
      (0.0, 0.0), lambda acc, x: (acc[0] + x, acc[1] + 1.0))
  return total / count - weight


@tff.tf_computation(F, F)
def apply_delta(weight, delta):
  return weight + 0.5 * delta


@tff.federated_computation(tff.type_at_server(F),
                           tff.type_at_clients(tff.SequenceType(F)))
def train(state, data):
  """Moves the weight half-way to the mean of the clients' means."""
  deltas = tff.federated_map(client_delta,
                             (data, tff.federated_broadcast(state)))
  mean_delta = tff.federated_mean(deltas)
  return (tff.federated_map(apply_delta, (state, mean_delta)),
          collections.OrderedDict(mean_delta=mean_delta))


class ProgramState(NamedTuple):
  state: object
  round_num: int
  iterator: program.FederatedDataSourceIterator


async def train_model(
    *,
    initialize_fn,
    train_fn,
    train_data_source: tff.program.FederatedDataSource,
    total_rounds: int,
    num_clients: int,
    metrics_manager: tff.program.ReleaseManager[
        tff.program.ReleasableStructure, int],
    program_state_manager: tff.program.ProgramStateManager[
        tff.program.ProgramStateStructure],
) -> object:
  """The program logic: TFF's own example's shape, unchanged but its import."""
  tff.program.check_in_federated_context()
  initial_state = initialize_fn()
  structure = ProgramState(initial_state, 0, train_data_source.iterator())
  program_state, version = await program_state_manager.load_latest(structure)
  if program_state is not None:
    state = program_state.state
    start_round = program_state.round_num + 1
    iterator = program_state.iterator
  else:
    state, start_round = initial_state, 1
    iterator = train_data_source.iterator()
  for round_num in range(start_round, total_rounds + 1):
    state, metrics = train_fn(state, iterator.select(num_clients))
    await metrics_manager.release(metrics, key=round_num)
    version += 1
    await program_state_manager.save(
        ProgramState(state, round_num, iterator), version)
  return state


def _data_source():
  return tff.program.DatasetDataSource(
      [tf.data.Dataset.from_tensor_slices(v) for v in CLIENT_VALUES], seed=5)


def _expected_weights(rounds, num_clients):
  """The weights, round by round, computed in numpy from the same draws."""
  iterator = _data_source().iterator()
  weight, weights = 0.0, []
  for _ in range(rounds):
    means = [float(np.mean(list(d.as_numpy_iterator())))
             for d in iterator.select(num_clients)]
    weight += 0.5 * float(np.mean([m - weight for m in means]))
    weights.append(weight)
  return weights


class _FailsAtRound:
  """`train`, failing on its `round_num`-th call (a lost worker, say)."""

  def __init__(self, round_num):
    self.calls, self.round_num = 0, round_num

  def __call__(self, state, data):
    self.calls += 1
    if self.calls == self.round_num:
      raise RuntimeError('worker lost')
    return train(state, data)


def test_uninterrupted_run_releases_every_round(tmp_path):
  metrics = tff.program.MemoryReleaseManager()
  final = asyncio.run(train_model(
      initialize_fn=initialize, train_fn=train,
      train_data_source=_data_source(), total_rounds=4, num_clients=3,
      metrics_manager=metrics,
      program_state_manager=tff.program.FileProgramStateManager(
          str(tmp_path), keep_total=2)))

  expected = _expected_weights(4, 3)
  np.testing.assert_allclose(final, expected[-1], rtol=1e-6)
  assert list(metrics.values()) == [1, 2, 3, 4]
  deltas = [m['mean_delta'] for m in metrics.values().values()]
  np.testing.assert_allclose(
      deltas, np.diff([0.0] + expected) / 0.5, rtol=1e-5)
  assert sorted(p.name for p in tmp_path.iterdir()) == [
      'program_state_1', 'program_state_4']


@pytest.mark.parametrize('where', ['local', 's3'])
def test_a_failed_run_resumes_from_its_last_saved_round(request, tmp_path,
                                                         where):
  if where == 'local':
    storage.configure(None)
    root = str(tmp_path)
  else:
    root = request.getfixturevalue('s3').bucket_url + '/program'
  state_dir = storage.join(root, 'state')
  csv_path = storage.join(root, 'metrics.csv')

  def run_program(train_fn):
    return asyncio.run(train_model(
        initialize_fn=initialize, train_fn=train_fn,
        train_data_source=_data_source(), total_rounds=5, num_clients=2,
        metrics_manager=tff.program.GroupingReleaseManager([
            tff.program.CSVFileReleaseManager(csv_path),
            tff.program.LoggingReleaseManager()]),
        program_state_manager=tff.program.FileProgramStateManager(
            state_dir)))

  with pytest.raises(RuntimeError, match='worker lost'):
    run_program(_FailsAtRound(4))
  manager = tff.program.FileProgramStateManager(state_dir)
  assert tff.program.run_sync(manager.get_versions()) == [1, 2, 3]

  resumed = _FailsAtRound(0)
  final = run_program(resumed)

  assert resumed.calls == 2  # Rounds 4 and 5 only.
  expected = _expected_weights(5, 2)
  np.testing.assert_allclose(final, expected[-1], rtol=1e-6)
  saved, version = tff.program.run_sync(manager.load_latest(
      ProgramState(np.float32(0), 0, _data_source().iterator())))
  assert (version, saved.round_num, saved.iterator.position) == (5, 5, 5)
  rows = storage.read_bytes(csv_path).decode().splitlines()
  assert [r.split(',')[0] for r in rows] == ['key', '1', '2', '3', '4', '5']
  np.testing.assert_allclose(
      [float(r.split(',')[1]) for r in rows[1:]],
      np.diff([0.0] + expected) / 0.5, rtol=1e-5)


def test_check_in_federated_context_needs_an_executor():
  from canonical.core import context  # pylint: disable=g-import-not-at-top
  tff.program.check_in_federated_context()  # import canonical installed one.
  previous = context.set_executor(None)
  try:
    with pytest.raises(tff.FederatedError, match='Not in a federated context'):
      tff.program.check_in_federated_context()
  finally:
    context.set_executor(previous)
