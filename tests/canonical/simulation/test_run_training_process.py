"""tff.simulation.run_training_process on a real process: a server total
that each round adds the sampled clients' sums, with client data from a
TestClientData sampled by build_uniform_sampling_fn.

The program state and release managers are small fakes with TFF 0.87's
method names (`load_latest`, `save`, `release`), async as TFF's are, or
plain methods. Which keys are released and which versions saved were
checked by hand against TFF 0.87's loop on the same schedule.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff

F32 = tff.TensorType(tf.float32)
DATA = tff.SequenceType(F32)
CLIENTS = {'a': [1.0, 2.0], 'b': [3.0], 'c': [4.0, 5.0, 6.0], 'd': [10.0]}
SUMS = {client: sum(values) for client, values in CLIENTS.items()}


def _summing_process():

  @tff.tf_computation
  def initialize():
    return tf.constant(0.0)

  @tff.tf_computation(DATA)
  def total(dataset):
    return dataset.reduce(0.0, lambda acc, x: acc + x)

  @tff.tf_computation(F32, F32)
  def add(state, amount):
    return state + amount

  @tff.federated_computation(tff.type_at_server(F32),
                             tff.type_at_clients(DATA))
  def next_fn(state, data):
    sums = tff.federated_map(total, data)
    round_sum = tff.federated_sum(sums)
    return tff.federated_map(add, (state, round_sum)), collections.OrderedDict(
        round_sum=round_sum, client_mean=tff.federated_mean(sums))

  return tff.IterativeProcess(initialize, next_fn)


class ProgramStateManager:
  """TFF's ProgramStateManager methods, kept in memory."""

  def __init__(self):
    self.saved = {}

  async def load_latest(self, structure):
    del structure
    if not self.saved:
      return None, 0
    version = max(self.saved)
    return self.saved[version], version

  async def save(self, program_state, version):
    self.saved[version] = program_state


class ReleaseManager:
  """TFF's MemoryReleaseManager, async."""

  def __init__(self):
    self.values = {}

  async def release(self, value, key):
    self.values[key] = value


class PlainReleaseManager:
  """A release manager with a plain (sync) release."""

  def __init__(self):
    self.keys = []

  def release(self, value, key):
    del value
    self.keys.append(key)


def _selection(client_data, seed=1, size=2):
  sample = tff.simulation.build_uniform_sampling_fn(client_data.client_ids,
                                                    random_seed=seed)

  def select(round_num):
    return [client_data.create_tf_dataset_for_client(c)
            for c in sample(round_num, size)]

  return select, lambda round_num: sum(SUMS[c] for c in sample(round_num,
                                                               size))


def _evaluation(state, datasets):
  # A server-side evaluation: how far the state is from the data's total.
  total = sum(float(x) for d in datasets for x in d)
  return {'distance': float(state) - total}


def test_trains_for_the_rounds_asked_and_releases_each_rounds_metrics():
  data = tff.simulation.datasets.TestClientData(CLIENTS)
  select, expected_sum = _selection(data)
  released, plain = ReleaseManager(), PlainReleaseManager()
  state = tff.simulation.run_training_process(
      _summing_process(), select, total_rounds=4,
      metrics_managers=[released, plain])
  expected = sum(expected_sum(r) for r in range(1, 5))
  assert float(state) == pytest.approx(expected)
  assert sorted(released.values) == [1, 2, 3, 4] == plain.keys
  for round_num, metrics in released.values.items():
    assert metrics[tff.simulation.ROUND_NUMBER_KEY] == round_num
    assert metrics['round_sum'] == pytest.approx(expected_sum(round_num))
    assert metrics['client_mean'] == pytest.approx(expected_sum(round_num) / 2)
    assert metrics[tff.simulation.TRAINING_TIME_KEY] >= 0.0
    assert isinstance(metrics['round_sum'], np.floating)  # Not a tf.Tensor.
  assert tff.simulation.TRAINING_TIME_KEY == 'training_time_in_seconds'


def test_evaluates_round_zero_and_every_nth_round():
  data = tff.simulation.datasets.TestClientData(CLIENTS)
  select, expected_sum = _selection(data)
  evaluation_data = [data.create_tf_dataset_for_client('d')]
  released = ReleaseManager()
  state = tff.simulation.run_training_process(
      _summing_process(), select, 3, evaluation_fn=_evaluation,
      evaluation_selection_fn=lambda round_num: evaluation_data,
      rounds_per_evaluation=2, metrics_managers=[released])
  key = tff.simulation.EVALUATION_METRICS_PREFIX + 'distance'
  time_key = (tff.simulation.EVALUATION_METRICS_PREFIX +
              tff.simulation.EVALUATION_TIME_KEY)
  assert sorted(released.values[0]) == sorted([key, time_key])
  assert released.values[0][key] == -10.0  # The initial state, 0.
  assert key in released.values[2] and 'round_sum' in released.values[2]
  assert key not in released.values[1] and key not in released.values[3]
  assert released.values[2][key] == pytest.approx(
      expected_sum(1) + expected_sum(2) - 10.0)
  assert float(state) == pytest.approx(sum(expected_sum(r) for r in (1, 2, 3)))


def test_saves_program_state_and_resumes_after_the_latest_version():
  data = tff.simulation.datasets.TestClientData(CLIENTS)
  select, expected_sum = _selection(data, seed=5)
  process = _summing_process()
  uninterrupted = tff.simulation.run_training_process(process, select, 5)

  manager = ProgramStateManager()
  tff.simulation.run_training_process(
      process, select, 3, program_state_manager=manager,
      rounds_per_saving_program_state=2)
  assert sorted(manager.saved) == [0, 2]  # Round 3 was not saved.
  assert float(manager.saved[2]) == pytest.approx(
      expected_sum(1) + expected_sum(2))

  released = ReleaseManager()
  resumed = tff.simulation.run_training_process(
      process, select, 5, evaluation_fn=_evaluation,
      evaluation_selection_fn=lambda round_num: [],
      program_state_manager=manager, rounds_per_saving_program_state=2,
      metrics_managers=[released])
  assert sorted(released.values) == [3, 4, 5]  # No round 0 on resume.
  assert sorted(manager.saved) == [0, 2, 4]
  assert float(resumed) == pytest.approx(float(uninterrupted))
  assert float(resumed) == pytest.approx(
      sum(expected_sum(r) for r in range(1, 6)))

  # Past the last round, the saved state comes back without a round run.
  def no_rounds(round_num):
    raise AssertionError(f'round {round_num} should not run')

  assert float(tff.simulation.run_training_process(
      process, no_rounds, 4, program_state_manager=manager)) == (
          pytest.approx(float(manager.saved[4])))


def test_sync_program_state_managers_work_too():

  class SyncManager:

    def __init__(self):
      self.saved = {}

    def load_latest(self, structure):
      assert float(structure) == 0.0  # The initial state, for its structure.
      return (self.saved[max(self.saved)], max(self.saved)) if (
          self.saved) else (None, 0)

    def save(self, program_state, version):
      self.saved[version] = program_state

  data = tff.simulation.datasets.TestClientData(CLIENTS)
  select, _ = _selection(data)
  manager = SyncManager()
  tff.simulation.run_training_process(_summing_process(), select, 2,
                                      program_state_manager=manager)
  assert sorted(manager.saved) == [0, 1, 2]


def test_learning_process_outputs_and_plain_metrics():
  process = _summing_process()
  output = collections.namedtuple('LearningProcessOutput',
                                  ['state', 'metrics'])

  class LearningProcess:

    def initialize(self):
      return process.initialize()

    def next(self, state, data):
      new_state, metrics = process.next(state, data)
      return output(state=new_state, metrics=metrics['round_sum'])

  data = tff.simulation.datasets.TestClientData(CLIENTS)
  released = ReleaseManager()
  state = tff.simulation.run_training_process(
      LearningProcess(), lambda r: [data.create_tf_dataset_for_client('c')],
      2, metrics_managers=[released])
  assert float(state) == 30.0
  # Metrics that are not a mapping are released under 'metrics'.
  assert released.values[2]['metrics'] == 15.0
  assert released.values[2][tff.simulation.ROUND_NUMBER_KEY] == 2


def test_errors_name_what_is_wrong():
  data = tff.simulation.datasets.TestClientData(CLIENTS)
  select, _ = _selection(data)
  with pytest.raises(tff.Error, match='rounds_per_evaluation must be an '
                     'integer of at least 1'):
    tff.simulation.run_training_process(_summing_process(), select, 2,
                                        rounds_per_evaluation=0)
  with pytest.raises(TypeError, match='has no callable initialize'):
    tff.simulation.run_training_process(object(), select, 2)

  class StateOnly:

    def initialize(self):
      return 0.0

    def next(self, state, data):
      return state

  with pytest.raises(TypeError, match=r'must return \(state, metrics\)'):
    tff.simulation.run_training_process(StateOnly(), select, 1)


def test_a_process_with_client_state_is_sent_to_the_runners():
  import example_processes  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError, match='keeps state at the clients'):
    tff.simulation.run_training_process(
        example_processes.client_state_process(), lambda r: [], 1)


def test_runs_inside_a_running_event_loop():
  # A notebook cell: a loop already runs in this thread.
  import asyncio  # pylint: disable=g-import-not-at-top
  data = tff.simulation.datasets.TestClientData(CLIENTS)
  select, expected_sum = _selection(data)
  manager, released = ProgramStateManager(), ReleaseManager()

  async def cell():
    return tff.simulation.run_training_process(
        _summing_process(), select, 2, program_state_manager=manager,
        metrics_managers=[released])

  state = asyncio.run(cell())
  assert float(state) == pytest.approx(expected_sum(1) + expected_sum(2))
  assert sorted(manager.saved) == [0, 1, 2] and sorted(released.values) == [
      1, 2]


def test_with_tff_program_managers(tmp_path):
  program = pytest.importorskip('canonical.program')
  data = tff.simulation.datasets.TestClientData(CLIENTS)
  select, expected_sum = _selection(data, seed=3)
  process = _summing_process()
  tff.simulation.run_training_process(
      process, select, 3,
      program_state_manager=program.FileProgramStateManager(str(tmp_path)),
      rounds_per_saving_program_state=2)
  released = program.MemoryReleaseManager()
  state = tff.simulation.run_training_process(
      process, select, 4,
      program_state_manager=program.FileProgramStateManager(str(tmp_path)),
      metrics_managers=[released])
  assert float(state) == pytest.approx(
      sum(expected_sum(r) for r in range(1, 5)))
  assert sorted(dict(released.values())) == [3, 4]  # Resumed after 2.
