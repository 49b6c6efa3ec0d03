"""TFF 0.87's `EvaluationManager`: evaluations of training checkpoints that
run beside the training loop (`train_model` starts one every
`evaluation_periodicity` rounds), each for `duration`, and resume after a
restart; and `extract_and_rewrap_metrics`, which moves a process's model
metrics under 'model_metrics' (TensorBoard's tab for them).

An evaluation of training round r (its state under the name
`evaluation_of_train_round_<r:05d>`) keeps its process's state as version
0 (the checkpoint's weights set), then one version per evaluation round,
releasing each round's 'current_round_metrics' at key r + version - 1 and,
once `duration` has passed since its start (one round at least), the
'total_rounds_metrics' at key r. The manager's own state ('eval_manager')
is the rounds in flight and their start times, two int32 arrays saved at
every change, so a restarted program resumes each one where it stopped.

Beyond TFF: a training round whose evaluation is already in flight (the
program resumed from a checkpoint older than its evaluations) is not
evaluated twice; TFF fails there with ProgramStateExistsError.
"""

import asyncio
import collections.abc
import datetime
import logging
import time

import numpy as np

from canonical import errors
from canonical.program import federated_context
from canonical.program import value_reference

_log = logging.getLogger('canonical.learning.programs')

# The key model metrics are moved under (TensorBoard's tab for them).
MODEL_METRICS_PREFIX = 'model_metrics'
# Where `build_fed_eval`'s metrics keep the round's and the running totals.
_EVAL_METRICS_PATH = ('client_work', 'eval')
_EVAL_MANAGER_KEY = 'eval_manager'
_EVAL_NAME_PATTERN = 'evaluation_of_train_round_{round_num:05d}'


class MetricsNotFoundError(errors.Error, KeyError):
  """A metrics structure without the part a path names."""

  def __str__(self):
    return str(self.args[0])


def extract_and_rewrap_metrics(metrics_structure, *, path):
  """`metrics_structure` with the part at `path` (a sequence of keys) moved
  to the top under 'model_metrics'; the mappings along the path are copied,
  never changed in place."""
  if isinstance(path, str) or not isinstance(path, collections.abc.Sequence):
    raise errors.InvalidTypeError(
        f'extract_and_rewrap_metrics: path must be a sequence of keys, got '
        f'{type(path).__name__} {path!r}.')
  if not path:
    raise errors.InvalidValueError(
        'extract_and_rewrap_metrics: path is empty; name at least one key.')
  if not isinstance(metrics_structure, collections.abc.Mapping):
    raise errors.InvalidTypeError(
        f'extract_and_rewrap_metrics: metrics_structure must be a mapping, '
        f'got {type(metrics_structure).__name__}.')
  root = current = metrics_structure.copy()
  *parents, last = path
  for i, key in enumerate(parents):
    part = current.get(key)
    if not isinstance(part, collections.abc.Mapping):
      raise MetricsNotFoundError(
          f'[{key}] of path {tuple(path)} is not a mapping in the metrics '
          f'structure {metrics_structure}'
          + ('' if i == 0 else f' (at {tuple(path[:i])})'))
    current[key] = current = part.copy()
  if current.get(last) is None:
    raise MetricsNotFoundError(
        f'[{last}] of path {tuple(path)} is not in the metrics structure '
        f'{metrics_structure}')
  root[MODEL_METRICS_PREFIX] = current.pop(last)
  return root


class _AutoVersionStateManager:
  """A program state manager whose versions count up by themselves."""

  def __init__(self, state_manager):
    self._state_manager = state_manager
    self._next_version = 0
    self._lock = asyncio.Lock()

  async def load_latest(self, structure):
    async with self._lock:
      state, version = await self._state_manager.load_latest(structure)
      self._next_version = version + 1
      return state

  async def save(self, program_state) -> None:
    async with self._lock:
      await self._state_manager.save(program_state, self._next_version)
      self._next_version += 1


def _check_callable(value, name):
  if not callable(value):
    raise errors.InvalidTypeError(
        f'EvaluationManager: {name} must be callable (an evaluation name -> '
        f'...), got {type(value).__name__}.')


class EvaluationManager:
  """Starts, tracks and resumes evaluations of training checkpoints (see
  the module's docstring).

  `create_state_manager_fn(name)` makes the program state manager of the
  manager itself ('eval_manager') and of each evaluation; for each
  evaluation, `create_process_fn(name)` gives `(process, per-round release
  manager or None)`, the process a `tff.learning.algorithms.build_fed_eval`
  one (composed with a dataset computation if `data_source` names clients).
  Each evaluation round takes `cohort_size` clients of `data_source`;
  `aggregated_metrics_manager` (or None) gets each evaluation's totals.
  """

  def __init__(self, data_source, aggregated_metrics_manager,
               create_state_manager_fn, create_process_fn, cohort_size,
               duration=datetime.timedelta(hours=24)):
    _check_callable(create_state_manager_fn, 'create_state_manager_fn')
    _check_callable(create_process_fn, 'create_process_fn')
    if isinstance(cohort_size, bool) or not isinstance(
        cohort_size, (int, np.integer)) or cohort_size < 1:
      raise errors.InvalidValueError(
          f'EvaluationManager: cohort_size must be a positive int, got '
          f'{cohort_size!r}.')
    if not isinstance(duration, datetime.timedelta):
      raise errors.InvalidTypeError(
          f'EvaluationManager: duration must be a datetime.timedelta, got '
          f'{type(duration).__name__}.')
    self._data_source = data_source
    self._aggregated_metrics_manager = aggregated_metrics_manager
    self._create_state_manager_fn = create_state_manager_fn
    self._create_process_fn = create_process_fn
    self._cohort_size = int(cohort_size)
    self._duration = duration
    self._state_manager = _AutoVersionStateManager(
        create_state_manager_fn(_EVAL_MANAGER_KEY))
    self._train_rounds = np.zeros([0], np.int32)
    self._start_timestamps = np.zeros([0], np.int32)
    self._pending_tasks = set()

  @property
  def data_source(self):
    """Where each evaluation's iterator comes from."""
    return self._data_source

  @property
  def aggregated_metrics_manager(self):
    """The release manager of each evaluation's total metrics, or None."""
    return self._aggregated_metrics_manager

  @property
  def create_state_manager_fn(self):
    """Evaluation name -> program state manager."""
    return self._create_state_manager_fn

  @property
  def create_process_fn(self):
    """Evaluation name -> (process, per-round release manager or None)."""
    return self._create_process_fn

  @property
  def cohort_size(self) -> int:
    """Clients per evaluation round."""
    return self._cohort_size

  @property
  def duration(self) -> datetime.timedelta:
    """How long each evaluation goes on evaluating rounds."""
    return self._duration

  def _in_flight(self):
    return (self._train_rounds, self._start_timestamps)

  async def wait_for_evaluations_to_finish(self) -> None:
    """Returns once every evaluation started has finished; raises the first
    error one of them raised."""
    if not self._pending_tasks:
      return
    done, self._pending_tasks = await asyncio.wait(self._pending_tasks)
    for task in done:
      task.result()

  def _finalize_task(self, task):
    """Forgets a task that finished well; one that failed stays, so that
    `wait_for_evaluations_to_finish` raises its error."""
    if task.cancelled() or task.exception() is None:
      self._pending_tasks.discard(task)
    else:
      _log.error('Evaluation failed: %r', task.exception())

  async def resume_from_previous_state(self) -> None:
    """Restarts the evaluations a previous run left in flight."""
    loaded = await self._state_manager.load_latest(self._in_flight())
    if loaded is None:
      _log.info('No previous evaluations found, nothing to resume.')
      return
    self._train_rounds, self._start_timestamps = (
        np.asarray(loaded[0], np.int32), np.asarray(loaded[1], np.int32))
    _log.info('Resuming evaluations of training rounds %s',
              self._train_rounds.tolist())
    for train_round, start in zip(self._train_rounds.tolist(),
                                  self._start_timestamps.tolist()):
      name = _EVAL_NAME_PATTERN.format(round_num=train_round)
      process, metrics_manager = self._create_process_fn(name)
      self._start_task(train_round, process, metrics_manager,
                       self._create_state_manager_fn(name),
                       datetime.datetime.fromtimestamp(start) + self._duration)

  def _start_task(self, train_round, process, metrics_manager, state_manager,
                  end_time):
    """Runs the evaluation of `train_round` (its version 0 saved) as a
    task."""

    async def run_and_record():
      await _run_evaluation(
          train_round, state_manager, process,
          _EVAL_NAME_PATTERN.format(round_num=train_round),
          self._data_source, self._cohort_size, end_time, metrics_manager,
          self._aggregated_metrics_manager)
      await self.record_evaluations_finished(train_round)
      await state_manager.remove_all()

    task = asyncio.create_task(run_and_record())
    task.add_done_callback(self._finalize_task)
    self._pending_tasks.add(task)

  async def start_evaluation(self, train_round: int,
                             start_timestamp_seconds: int,
                             model_weights) -> None:
    """Starts evaluating `model_weights`, the checkpoint of `train_round`,
    for `duration` from `start_timestamp_seconds`."""
    if int(train_round) in self._train_rounds.tolist():
      _log.info('Training round %d is being evaluated already.', train_round)
      return
    self._train_rounds = np.concatenate(
        [self._train_rounds, np.asarray([train_round], np.int32)])
    self._start_timestamps = np.concatenate(
        [self._start_timestamps,
         np.asarray([start_timestamp_seconds], np.int32)])
    name = _EVAL_NAME_PATTERN.format(round_num=train_round)
    state_manager = self._create_state_manager_fn(name)
    process, metrics_manager = self._create_process_fn(name)
    state = await value_reference.materialize_value(process.initialize())
    state = await value_reference.materialize_value(
        process.set_model_weights(state, model_weights))
    await state_manager.save(state, 0)
    end_time = (datetime.datetime.fromtimestamp(start_timestamp_seconds) +
                self._duration)
    self._start_task(train_round, process, metrics_manager, state_manager,
                     end_time)
    await self._state_manager.save(self._in_flight())

  async def record_evaluations_finished(self, train_round: int) -> None:
    """Forgets the evaluation of `train_round` (it has finished)."""
    kept = self._train_rounds != train_round
    if kept.all():
      raise errors.InvalidValueError(
          f'EvaluationManager.record_evaluations_finished: training round '
          f'{train_round} is not being evaluated (in flight: '
          f'{self._train_rounds.tolist()}).')
    self._train_rounds = self._train_rounds[kept]
    self._start_timestamps = self._start_timestamps[kept]
    await self._state_manager.save(self._in_flight())


def _learning_output(result, where):
  if not (hasattr(result, 'state') and hasattr(result, 'metrics')):
    raise errors.InvalidTypeError(
        f'{where}: the evaluation process\'s next must return a '
        'tff.learning.templates.LearningProcessOutput, got '
        f'{type(result).__name__}.')
  return result.state, result.metrics


async def _run_evaluation(train_round, state_manager, process, name,
                          data_source, cohort_size, end_time,
                          per_round_metrics_manager,
                          aggregated_metrics_manager):
  """Evaluates the checkpoint of `train_round` (saved as version 0 of
  `state_manager`) round after round until `end_time`, one round at
  least."""
  federated_context.check_in_federated_context()
  iterator = data_source.iterator()

  async def evaluate(state, eval_round):
    start = time.monotonic()
    data = iterator.select(cohort_size)
    state, metrics = _learning_output(
        await value_reference.materialize_value(process.next(state, data)),
        f'evaluation {name}')
    if per_round_metrics_manager is not None:
      await per_round_metrics_manager.release(
          extract_and_rewrap_metrics(
              metrics, path=_EVAL_METRICS_PATH + ('current_round_metrics',)),
          key=eval_round)
    _log.info('Evaluation %s, round %d: %.2f s', name,
              eval_round - train_round, time.monotonic() - start)
    return state, metrics

  state, version = await state_manager.load_latest(
      await value_reference.materialize_value(process.initialize()))
  if state is None:
    raise errors.InvalidValueError(
        f'Evaluation {name}: no saved state to start from (start_evaluation '
        'saves its version 0 first).')
  while True:
    state, metrics = await evaluate(state, train_round + version)
    version += 1
    await state_manager.save(state, version)
    if datetime.datetime.now() >= end_time:
      break
  if aggregated_metrics_manager is not None:
    await aggregated_metrics_manager.release(
        extract_and_rewrap_metrics(
            metrics, path=_EVAL_METRICS_PATH + ('total_rounds_metrics',)),
        key=train_round)
