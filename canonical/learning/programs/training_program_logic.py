"""TFF 0.87's `train_model`: a learning process trained round after round,
its program state saved every round, evaluations started beside it, as in
TFF.

    version 0           the initial state (saved before round 1)
    round r             next(state, select(train_per_round_clients));
                        saved as version r (`ProgramState`), its metrics'
                        'client_work/train' released under 'model_metrics'
                        at key r; evaluated if r is a multiple of an int
                        `evaluation_periodicity` (or a timedelta of it has
                        passed since the last), and always at the last
                        round; the state released as
                        'training_checkpoint_round_<r>' every 10 rounds and
                        at the last.

A program started again with the same program state manager goes on after
the latest saved round, with the data iterator saved with it, and resumes
the evaluations left in flight. Beyond TFF: when a round fails, the saves
and releases already started are finished before the error is raised, so
a restart loses no round that completed (TFF's event loop cancels them).
"""

import asyncio
import copy
import datetime
import logging
from typing import Any, NamedTuple

import numpy as np

from canonical import errors
from canonical.learning.programs import evaluation_program_logic
from canonical.program import federated_context
from canonical.program import value_reference

_log = logging.getLogger('canonical.learning.programs')

# The training checkpoint is released every this many rounds (and at the
# last), under 'training_checkpoint_round_<r>', as TFF does.
CHECKPOINT_RELEASE_PERIOD = 10


class ProgramState(NamedTuple):
  """What `train_model` saves each round.

  Attributes:
    state: the learning process's state after `round_number`.
    round_number: the last round trained (0: the initial state).
    next_evaluation_timestamp_seconds: when a timedelta periodicity's next
      evaluation is due, or None.
    data_iterator: the training data's iterator, where it is.
  """
  state: Any
  round_number: int
  next_evaluation_timestamp_seconds: int | None
  data_iterator: Any


class _TaskManager:
  """Tasks the loop started (saves, releases), awaited together."""

  def __init__(self):
    self._pending = set()

  def add_task(self, coroutine) -> None:
    task = asyncio.create_task(coroutine)
    task.add_done_callback(self._pending.discard)
    self._pending.add(task)

  async def wait_for_all_tasks(self) -> None:
    """Waits for every task; raises the first error one raised."""
    if not self._pending:
      return
    done, _ = await asyncio.wait(set(self._pending))
    for task in done:
      if not task.cancelled() and task.exception() is not None:
        raise task.exception()


def _check_arguments(train_process, train_per_round_clients,
                     train_total_rounds, evaluation_manager,
                     evaluation_periodicity, program_state_manager,
                     model_output_manager):
  where = 'train_model'
  for name in ('initialize', 'next', 'get_model_weights'):
    if not callable(getattr(train_process, name, None)):
      raise errors.InvalidTypeError(
          f'{where}: train_process must be a tff.learning.templates.'
          f'LearningProcess; {type(train_process).__name__} has no callable '
          f'{name}.')
  for name, value in (('train_per_round_clients', train_per_round_clients),
                      ('train_total_rounds', train_total_rounds)):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
        or value < 0:
      raise errors.InvalidValueError(
          f'{where}: {name} must be a non-negative int, got {value!r}.')
  if isinstance(evaluation_periodicity, bool) or not isinstance(
      evaluation_periodicity, (int, datetime.timedelta)):
    raise errors.InvalidTypeError(
        f'{where}: evaluation_periodicity must be an int (rounds) or a '
        f'datetime.timedelta, got {type(evaluation_periodicity).__name__}.')
  if isinstance(evaluation_periodicity, int) and evaluation_periodicity < 1:
    raise errors.InvalidValueError(
        f'{where}: evaluation_periodicity must be at least 1 round, got '
        f'{evaluation_periodicity}.')
  if evaluation_manager is not None and not isinstance(
      evaluation_manager, evaluation_program_logic.EvaluationManager):
    raise errors.InvalidTypeError(
        f'{where}: evaluation_manager must be a tff.learning.programs.'
        f'EvaluationManager or None, got {type(evaluation_manager).__name__}.')
  for name, value in (('program_state_manager', program_state_manager),
                      ('model_output_manager', model_output_manager)):
    if value is None:
      raise errors.InvalidValueError(
          f'{where}: {name} is required (TFF has no default for it).')


async def train_model(*,
                      train_process,
                      initial_train_state=None,
                      train_data_source,
                      train_per_round_clients: int,
                      train_total_rounds: int,
                      should_discard_round=None,
                      program_state_manager,
                      model_output_manager,
                      train_metrics_manager=None,
                      evaluation_manager,
                      evaluation_periodicity) -> None:
  """Trains `train_process` to round `train_total_rounds` (see the module).

  Args:
    train_process: a `tff.learning.templates.LearningProcess`.
    initial_train_state: the state to start from; None: `initialize()`'s.
    train_data_source: a `tff.program.FederatedDataSource` whose selections
      `train_process.next` takes.
    train_per_round_clients: clients selected each round.
    train_total_rounds: the last round to train.
    should_discard_round: None, or `LearningProcessOutput -> bool`; a round
      it accepts is thrown away and run again from the same data position.
    program_state_manager: a `tff.program.ProgramStateManager`.
    model_output_manager: a release manager for the training checkpoints.
    train_metrics_manager: None, or a release manager for each round's
      training metrics.
    evaluation_manager: None, or an `EvaluationManager`.
    evaluation_periodicity: an int (rounds) or a `datetime.timedelta`.
  """
  _check_arguments(train_process, train_per_round_clients,
                   train_total_rounds, evaluation_manager,
                   evaluation_periodicity, program_state_manager,
                   model_output_manager)
  federated_context.check_in_federated_context()
  tasks = _TaskManager()
  if evaluation_manager is not None:
    await evaluation_manager.resume_from_previous_state()

  data_iterator = train_data_source.iterator()
  if initial_train_state is None:
    initial_train_state = await value_reference.materialize_value(
        train_process.initialize())
  if initial_train_state is None:
    raise errors.InvalidValueError('train_model: the initial state is None.')
  train_state = initial_train_state
  program_state, version = await program_state_manager.load_latest(
      ProgramState(train_state, 0, 0, data_iterator))
  if program_state is not None:
    train_state = program_state.state
    start_round = program_state.round_number
    next_evaluation_timestamp = program_state.next_evaluation_timestamp_seconds
    data_iterator = program_state.data_iterator
    _log.info('Resuming from program state version %d (round %d).', version,
              start_round)
    if start_round >= train_total_rounds:
      if evaluation_manager is not None:
        await evaluation_manager.wait_for_evaluations_to_finish()
      return
  else:
    start_round, next_evaluation_timestamp = 0, None
    await program_state_manager.save(
        ProgramState(train_state, 0, None, copy.deepcopy(data_iterator)), 0)

  next_evaluation_time = (
      datetime.datetime.fromtimestamp(next_evaluation_timestamp)
      if next_evaluation_timestamp else None)

  def should_evaluate(round_num, finished_time):
    nonlocal next_evaluation_time
    if round_num == train_total_rounds:
      return True
    if isinstance(evaluation_periodicity, int):
      return round_num % evaluation_periodicity == 0
    if next_evaluation_time is None or next_evaluation_time < finished_time:
      next_evaluation_time = finished_time + evaluation_periodicity
      return True
    return False

  try:
    round_num = start_round + 1
    while round_num <= train_total_rounds:
      previous_iterator = copy.deepcopy(data_iterator)
      data = data_iterator.select(train_per_round_clients)
      result = await value_reference.materialize_value(
          train_process.next(train_state, data))
      if should_discard_round is not None and should_discard_round(result):
        _log.info('Round %d discarded; running it again.', round_num)
        data_iterator = previous_iterator
        continue
      if not (hasattr(result, 'state') and hasattr(result, 'metrics')):
        raise errors.InvalidTypeError(
            'train_model: train_process.next must return a tff.learning.'
            'templates.LearningProcessOutput, got '
            f'{type(result).__name__}.')
      train_state, train_metrics = result.state, result.metrics

      finished_time = datetime.datetime.now()
      if evaluation_manager is not None and should_evaluate(round_num,
                                                            finished_time):
        model_weights = await value_reference.materialize_value(
            train_process.get_model_weights(train_state))
        await evaluation_manager.start_evaluation(
            round_num, int(finished_time.timestamp()), model_weights)
      timestamp = (int(next_evaluation_time.timestamp())
                   if next_evaluation_time else None)
      tasks.add_task(program_state_manager.save(
          ProgramState(train_state, round_num, timestamp,
                       copy.deepcopy(data_iterator)), round_num))
      if train_metrics_manager is not None:
        try:
          released = evaluation_program_logic.extract_and_rewrap_metrics(
              train_metrics, path=('client_work', 'train'))
        except evaluation_program_logic.MetricsNotFoundError as e:
          raise evaluation_program_logic.MetricsNotFoundError(
              'train_model: train_process.next\'s metrics must hold '
              f'client_work/train (a tff.learning LearningProcess\'s do): '
              f'{e}') from None
        tasks.add_task(train_metrics_manager.release(released, key=round_num))
      if (round_num % CHECKPOINT_RELEASE_PERIOD == 0 or
          round_num == train_total_rounds):
        tasks.add_task(model_output_manager.release(
            train_state, key=f'training_checkpoint_round_{round_num}'))
      round_num += 1
  except Exception:
    try:
      await tasks.wait_for_all_tasks()
    except Exception as e:  # pylint: disable=broad-except
      _log.error('A save or release failed too: %r', e)
    raise
  await tasks.wait_for_all_tasks()
  if evaluation_manager is not None:
    await evaluation_manager.wait_for_evaluations_to_finish()
