"""tff.learning.programs as a TFF 0.87 user writes a training program: the
program guide's platform lines, a FedAvg process over client ids
(`ClientIdDataSource` with `compose_dataset_computation_with_learning_
process`, as TFF needs), a `FileProgramStateManager`, release managers, an
`EvaluationManager`, and `train_model` (or `train_model_with_vizier`).

The released keys and values are the ones TFF 0.87 releases for the same
program and data (recorded from a real TFF 0.87; each selection is both
clients, so TFF's random choice of them cannot change a number).
"""

import asyncio
import collections
import datetime
import os
import sys
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

import canonical as tff
from canonical import errors

programs = tff.learning.programs


def model_fn():
  keras_model = keras.Sequential([
      keras.Input(shape=(4,)),
      keras.layers.Dense(3, kernel_initializer='zeros')])
  return tff.learning.models.from_keras_model(
      keras_model,
      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=(tf.TensorSpec([None, 4], tf.float32),
                  tf.TensorSpec([None], tf.int32)),
      metrics=[keras.metrics.SparseCategoricalAccuracy()])


def _client_data():
  rng = np.random.default_rng(0)

  def slices(n):
    x = rng.normal(size=(n, 4)).astype(np.float32)
    return (x, (x[:, 0] > 0).astype(np.int32))

  train = tff.simulation.datasets.TestClientData(
      {'a': slices(5), 'b': slices(3)}).preprocess(lambda d: d.batch(2))
  evaluation = tff.simulation.datasets.TestClientData(
      {'c': slices(4), 'd': slices(6)}).preprocess(lambda d: d.batch(2))
  return train, evaluation


@pytest.fixture(scope='module')
def task():
  train_data, eval_data = _client_data()

  def train_process(learning_rate=0.1):
    return tff.simulation.compose_dataset_computation_with_learning_process(
        train_data.dataset_computation,
        tff.learning.algorithms.build_weighted_fed_avg(
            model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(
                learning_rate=learning_rate)))

  eval_process = tff.simulation.compose_dataset_computation_with_learning_process(
      eval_data.dataset_computation,
      tff.learning.algorithms.build_fed_eval(model_fn))
  return types.SimpleNamespace(
      train_process=train_process(), eval_process=eval_process,
      train_ids=train_data.client_ids, eval_ids=eval_data.client_ids)


@pytest.fixture(autouse=True)
def platform():
  """The program guide's platform lines; the context is restored after."""
  previous = tff.framework.get_context_stack().current
  context = tff.backends.native.create_async_local_cpp_execution_context()
  context = tff.program.NativeFederatedContext(context)
  tff.framework.set_default_context(context)
  yield
  tff.framework.set_default_context(previous)


# What TFF 0.87 released for this program (train_model_program.py, below).
TFF_TRAIN_LOSS = {1: 1.0763588, 2: 0.9175571, 3: 0.80005813, 4: 0.71293867,
                  5: 0.646955}
TFF_TRAIN_ACCURACY = {1: 0.5, 2: 0.875, 3: 0.875, 4: 0.875, 5: 0.875}
TFF_EVAL_LOSS = {2: 0.9465736, 3: 0.8983465, 4: 0.86223698, 5: 0.8346733}
TFF_BIAS = {3: [0.31166202, -0.08755566, -0.22410637],
            5: [0.44818613, -0.11408937, -0.33409685]}


class Managers:
  """The program's managers: memory releases a test reads, state on disk."""

  def __init__(self, task, root):
    self.train_metrics = tff.program.MemoryReleaseManager()
    self.model_output = tff.program.MemoryReleaseManager()
    self.aggregated = tff.program.MemoryReleaseManager()
    self.per_round = collections.defaultdict(
        tff.program.MemoryReleaseManager)
    self.program_state = tff.program.FileProgramStateManager(
        os.path.join(root, 'state'))
    self.evaluation = programs.EvaluationManager(
        data_source=tff.program.ClientIdDataSource(task.eval_ids),
        aggregated_metrics_manager=self.aggregated,
        create_state_manager_fn=lambda name: (
            tff.program.FileProgramStateManager(
                os.path.join(root, 'eval', name))),
        create_process_fn=lambda name: (task.eval_process,
                                        self.per_round[name]),
        cohort_size=2,
        duration=datetime.timedelta(seconds=0))


class FailingProcess:
  """The training process, failing on its `fail_at`-th `next` (a lost
  worker)."""

  def __init__(self, process, fail_at=0):
    self._process, self.fail_at, self.calls = process, fail_at, 0
    self.initialize = process.initialize
    self.get_model_weights = process.get_model_weights

  def next(self, state, data):
    self.calls += 1
    if self.calls == self.fail_at:
      raise RuntimeError('worker lost')
    return self._process.next(state, data)


def run_program(task, managers, total_rounds, process=None, **kwargs):
  asyncio.run(programs.train_model(
      train_process=process or task.train_process,
      train_data_source=tff.program.ClientIdDataSource(task.train_ids),
      train_per_round_clients=2,
      train_total_rounds=total_rounds,
      program_state_manager=managers.program_state,
      model_output_manager=managers.model_output,
      train_metrics_manager=managers.train_metrics,
      evaluation_manager=managers.evaluation,
      evaluation_periodicity=kwargs.pop('evaluation_periodicity', 2),
      **kwargs))


def _losses(manager):
  return {k: float(v['model_metrics']['loss'])
          for k, v in manager.values().items()}


def _leaves(value, prefix=''):
  if isinstance(value, dict):
    found = {}
    for key, item in value.items():
      found.update(_leaves(item, f'{prefix}{key}/'))
    return found
  if isinstance(value, tuple):
    return {}
  return {prefix.rstrip('/'): float(value)}


@pytest.mark.slow
def test_train_model_releases_what_tff_releases(task, tmp_path):
  managers = Managers(task, str(tmp_path))
  run_program(task, managers, 5)

  train = managers.train_metrics.values()
  assert list(train) == [1, 2, 3, 4, 5]
  assert _leaves(train[1]) == pytest.approx({
      'finalizer/update_non_finite': 0, 'model_metrics/loss': 1.0763588,
      'model_metrics/sparse_categorical_accuracy': 0.5,
      'model_metrics/num_examples': 8, 'model_metrics/num_batches': 5})
  assert list(train[1]) == ['distributor', 'client_work', 'aggregator',
                            'finalizer', 'model_metrics']
  assert train[1]['client_work'] == collections.OrderedDict()
  assert _losses(managers.train_metrics) == pytest.approx(TFF_TRAIN_LOSS)
  assert {k: float(v['model_metrics']['sparse_categorical_accuracy'])
          for k, v in train.items()} == TFF_TRAIN_ACCURACY
  # Evaluations at TFF's periodicity (every 2 rounds, and the last).
  assert _losses(managers.aggregated) == pytest.approx(
      {k: TFF_EVAL_LOSS[k] for k in (2, 4, 5)})
  aggregated = managers.aggregated.values()[2]
  assert _leaves(aggregated) == pytest.approx({
      f'{prefix}/{name}': value
      for prefix in ('client_work/eval/current_round_metrics',
                     'model_metrics')
      for name, value in (('loss', 0.9465736), ('num_examples', 10),
                          ('num_batches', 5),
                          ('sparse_categorical_accuracy', 0.6))})
  assert sorted(managers.per_round) == [
      'evaluation_of_train_round_00002', 'evaluation_of_train_round_00004',
      'evaluation_of_train_round_00005']
  assert list(managers.per_round['evaluation_of_train_round_00004'].values()
             ) == [4]
  assert list(managers.model_output.values()) == [
      'training_checkpoint_round_5']
  checkpoint = managers.model_output.values()['training_checkpoint_round_5']
  assert type(checkpoint).__name__ == 'LearningAlgorithmState'
  np.testing.assert_allclose(checkpoint.global_model_weights.trainable[1],
                             TFF_BIAS[5], rtol=1e-5)
  # TFF's versions kept (keep_total=5, the first kept); finished
  # evaluations leave no state.
  assert asyncio.run(managers.program_state.get_versions()) == [0, 2, 3, 4, 5]
  for name in managers.per_round:
    assert os.listdir(tmp_path / 'eval' / name) == []


@pytest.mark.slow
def test_a_program_run_again_for_more_rounds_goes_on_as_tff_does(task,
                                                                  tmp_path):
  first = Managers(task, str(tmp_path))
  run_program(task, first, 3)
  assert _losses(first.aggregated) == pytest.approx(
      {2: TFF_EVAL_LOSS[2], 3: TFF_EVAL_LOSS[3]})
  np.testing.assert_allclose(first.model_output.values()[
      'training_checkpoint_round_3'].global_model_weights.trainable[1],
                             TFF_BIAS[3], rtol=1e-5)

  second = Managers(task, str(tmp_path))
  process = FailingProcess(task.train_process)
  run_program(task, second, 5, process=process)
  assert process.calls == 2
  assert _losses(second.train_metrics) == pytest.approx(
      {4: TFF_TRAIN_LOSS[4], 5: TFF_TRAIN_LOSS[5]})
  assert _losses(second.aggregated) == pytest.approx(
      {4: TFF_EVAL_LOSS[4], 5: TFF_EVAL_LOSS[5]})
  assert asyncio.run(second.program_state.get_versions()) == [0, 2, 3, 4, 5]

  third = Managers(task, str(tmp_path))  # Nothing left to train.
  run_program(task, third, 5, process=process)
  assert process.calls == 2 and not third.train_metrics.values()


@pytest.mark.slow
def test_a_failed_program_resumes_from_its_saved_state(task, tmp_path):
  first = Managers(task, str(tmp_path))
  with pytest.raises(RuntimeError, match='worker lost'):
    run_program(task, first, 5,
                process=FailingProcess(task.train_process, fail_at=4))
  # Every round that finished is saved (TFF's event loop may cancel those
  # saves still in flight, and its restart then fails).
  assert asyncio.run(first.program_state.get_versions()) == [0, 1, 2, 3]

  second = Managers(task, str(tmp_path))
  process = FailingProcess(task.train_process)
  run_program(task, second, 5, process=process)
  assert process.calls == 2
  released = {**first.train_metrics.values(), **second.train_metrics.values()}
  assert _losses(types.SimpleNamespace(values=lambda: released)) == (
      pytest.approx(TFF_TRAIN_LOSS))
  assert sorted({**first.aggregated.values(),
                 **second.aggregated.values()}) == [2, 4, 5]
  np.testing.assert_allclose(second.model_output.values()[
      'training_checkpoint_round_5'].global_model_weights.trainable[1],
                             TFF_BIAS[5], rtol=1e-5)


def test_an_evaluation_in_flight_is_resumed_by_a_restarted_manager(task,
                                                                   tmp_path):
  state = task.train_process.initialize()
  for _ in range(2):
    state = task.train_process.next(state, ['a', 'b']).state
  weights = asyncio.run(tff.program.materialize_value(
      task.train_process.get_model_weights(state)))
  first = Managers(task, str(tmp_path))

  async def start_and_stop():
    await first.evaluation.start_evaluation(2, 1_000_000, weights)
    # The program stops here: its evaluation task never ran.

  asyncio.run(start_and_stop())
  assert not first.aggregated.values()
  second = Managers(task, str(tmp_path))

  async def resume():
    await second.evaluation.resume_from_previous_state()
    await second.evaluation.wait_for_evaluations_to_finish()

  asyncio.run(resume())
  assert _losses(second.aggregated) == pytest.approx({2: TFF_EVAL_LOSS[2]})
  in_flight, _ = asyncio.run(tff.program.FileProgramStateManager(
      str(tmp_path / 'eval' / 'eval_manager')).load_latest(None))
  assert [a.tolist() for a in in_flight] == [[], []]  # None left.


def test_evaluation_periodicity_as_a_time(task, tmp_path):
  managers = Managers(task, str(tmp_path))
  run_program(task, managers, 3,
              evaluation_periodicity=datetime.timedelta(hours=1))
  # The first round starts the clock; the last is always evaluated.
  assert sorted(managers.aggregated.values()) == [1, 3]
  saved, _ = asyncio.run(managers.program_state.load_latest(None))
  assert saved.next_evaluation_timestamp_seconds > datetime.datetime.now(
  ).timestamp()


def test_a_discarded_round_is_run_again_from_the_same_data(task, tmp_path):
  managers = Managers(task, str(tmp_path))
  discarded = []

  def should_discard_round(output):
    discarded.append(float(output.metrics['client_work']['train']['loss']))
    return len(discarded) == 2

  process = FailingProcess(task.train_process)
  run_program(task, managers, 2, process=process,
              should_discard_round=should_discard_round)
  assert process.calls == 3
  assert discarded[1] == discarded[2]
  assert _losses(managers.train_metrics) == pytest.approx(
      {1: TFF_TRAIN_LOSS[1], 2: TFF_TRAIN_LOSS[2]})


def test_extract_and_rewrap_metrics_moves_the_model_metrics():
  metrics = collections.OrderedDict(
      distributor=(), client_work=collections.OrderedDict(
          train=collections.OrderedDict(loss=1.0)), finalizer=3)
  rewrapped = programs.extract_and_rewrap_metrics(
      metrics, path=('client_work', 'train'))
  assert rewrapped == collections.OrderedDict(
      distributor=(), client_work=collections.OrderedDict(), finalizer=3,
      model_metrics=collections.OrderedDict(loss=1.0))
  assert metrics['client_work']['train'] == {'loss': 1.0}  # Unchanged.
  with pytest.raises(KeyError, match=r'\[eval\] of path'):
    programs.extract_and_rewrap_metrics(metrics, path=('client_work', 'eval'))
  with pytest.raises(ValueError, match='empty'):
    programs.extract_and_rewrap_metrics(metrics, path=())


def test_train_model_checks_its_arguments(task, tmp_path):
  managers = Managers(task, str(tmp_path))
  with pytest.raises(errors.InvalidTypeError, match='evaluation_periodicity'):
    run_program(task, managers, 1, evaluation_periodicity=1.5)
  with pytest.raises(errors.InvalidTypeError, match='LearningProcess'):
    run_program(task, managers, 1, process=object())


# Vizier: the study is a test double with grid suggestions (TFF's own
# recording used the same one), Vizier's real measurements.


class _Trial:

  def __init__(self, trial_id, parameters):
    self.id, self.parameters = trial_id, dict(parameters)
    self.measurements, self.final_measurement = [], None
    self._created = datetime.datetime.now().astimezone()

  def materialize(self):
    return types.SimpleNamespace(creation_time=self._created)

  def check_early_stopping(self):
    return False

  def add_measurement(self, measurement):
    self.measurements.append(measurement)

  def complete(self, measurement):
    self.final_measurement = measurement


class GridStudy:
  """Vizier's study interface as `train_model_with_vizier` uses it."""

  def __init__(self, grid):
    self._grid, self.all_trials = list(grid), []

  def suggest(self, count, client_id):
    del client_id
    trials = []
    while self._grid and len(trials) < count:
      trials.append(_Trial(len(self.all_trials) + 1, self._grid.pop(0)))
      self.all_trials.append(trials[-1])
    return trials

  def trials(self):
    return types.SimpleNamespace(get=lambda: list(self.all_trials))


def _measured(measurement):
  return {name: metric.value for name, metric in measurement.metrics.items()
          if name.startswith('model_metrics/')}


@pytest.mark.slow
def test_train_model_with_vizier_measures_trials_as_tff(task, tmp_path):
  pytest.importorskip('vizier')
  hparams_type = task.train_process.get_hparams.type_signature.result

  @tff.tensorflow.computation(hparams_type, tff.StructWithPythonType(
      [('learning_rate', np.float32)], collections.OrderedDict))
  def update_hparams(hparams, parameters):
    return collections.OrderedDict(
        client_work=collections.OrderedDict(
            learning_rate=parameters['learning_rate']),
        finalizer=hparams['finalizer'])

  def evaluation_manager_factory(trial):
    return programs.EvaluationManager(
        data_source=tff.program.ClientIdDataSource(task.eval_ids),
        aggregated_metrics_manager=None,
        create_state_manager_fn=lambda name: (
            tff.program.FileProgramStateManager(
                str(tmp_path / f'trial{trial.id}' / 'eval' / name))),
        create_process_fn=lambda name: (task.eval_process, None),
        cohort_size=2, duration=datetime.timedelta(seconds=0))

  study = GridStudy([{'learning_rate': 0.5}, {'learning_rate': 0.05}])
  asyncio.run(programs.train_model_with_vizier(
      study=study, total_trials=2, update_hparams=update_hparams,
      train_model_program_logic=programs.train_model,
      train_process_factory=lambda trial: task.train_process,
      train_data_source=tff.program.ClientIdDataSource(task.train_ids),
      total_rounds=2, num_clients=2,
      program_state_manager_factory=lambda trial: (
          tff.program.FileProgramStateManager(
              str(tmp_path / f'trial{trial.id}' / 'state'))),
      model_output_manager_factory=lambda trial: (
          tff.program.MemoryReleaseManager()),
      evaluation_manager_factory=evaluation_manager_factory,
      evaluation_periodicity=1))

  # TFF 0.87's measurements of the same trials.
  tff_losses = {1: ([1.006303, 0.5412096], 0.7356898),
                2: ([1.0872557, 1.0023538], 1.0128866)}
  assert [t.parameters for t in study.all_trials] == [
      {'learning_rate': 0.5}, {'learning_rate': 0.05}]
  for trial in study.all_trials:
    intermediate, final = tff_losses[trial.id]
    assert [m.steps for m in trial.measurements] == [1, 2]
    assert [_measured(m)['model_metrics/loss'] for m in trial.measurements
           ] == pytest.approx(intermediate)
    assert sorted(trial.measurements[0].metrics) == [
        'finalizer/update_non_finite', 'model_metrics/loss',
        'model_metrics/num_batches', 'model_metrics/num_examples',
        'model_metrics/sparse_categorical_accuracy']
    assert trial.final_measurement.steps == 2
    assert _measured(trial.final_measurement) == pytest.approx({
        'model_metrics/loss': final, 'model_metrics/num_batches': 5,
        'model_metrics/num_examples': 10,
        'model_metrics/sparse_categorical_accuracy': 0.6})


def test_train_model_with_vizier_names_what_to_install(monkeypatch):
  monkeypatch.setitem(sys.modules, 'vizier', None)  # Not installed.
  with pytest.raises(errors.FederatedError, match='pip install google-vizier'):
    asyncio.run(programs.train_model_with_vizier(
        study=None, total_trials=1, update_hparams=None,
        train_model_program_logic=None, train_process_factory=None,
        train_data_source=None, total_rounds=1, num_clients=1,
        program_state_manager_factory=None, model_output_manager_factory=None,
        evaluation_manager_factory=None, evaluation_periodicity=1))
