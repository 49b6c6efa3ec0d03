"""`run_training_process`: TFF's simulation loop over a training process.

Round 0 is the initial state (evaluated, released and saved); rounds 1 to
`total_rounds` each call `next(state, training_selection_fn(round))`. Every
`rounds_per_saving_program_state` rounds the state is saved as version
`round`; a later call with the same program state manager resumes after the
latest saved version.

Program state managers and release managers are duck-typed to TFF 0.87's
`tff.program` methods: `load_latest(structure) -> (state or None, version)`,
`save(state, version)`, `release(value, key)`. Each may be a plain method or
a coroutine (TFF's are `async`, and so are `canonical.program`'s);
coroutines are awaited on an event loop of this call's own.
"""

import asyncio
import collections
import concurrent.futures
from collections.abc import Callable, Iterable, Mapping
import inspect
import numbers
import time
from typing import Any

import tensorflow as tf

from canonical import errors

ROUND_TIME_KEY = 'round_time_in_seconds'
ROUND_NUMBER_KEY = 'round_number'
TRAINING_TIME_KEY = 'training_time_in_seconds'
EVALUATION_METRICS_PREFIX = 'evaluation/'
EVALUATION_TIME_KEY = 'evaluation_time_in_seconds'

# Metrics that are not a mapping (a process returning one tensor) go under
# this key, since the loop adds its own keys beside them.
METRICS_KEY = 'metrics'


class _Awaiter:
  """Waits for what managers return: values pass, coroutines run on one
  event loop of this call's own, made on first need and closed with the
  call; in a thread where a loop already runs (a notebook), that loop of
  ours runs in a worker thread."""

  def __init__(self):
    self._loop = None
    self._thread = None

  def _run(self, coroutine):
    if self._loop is None:
      self._loop = asyncio.new_event_loop()
    try:
      asyncio.get_running_loop()
    except RuntimeError:
      return self._loop.run_until_complete(coroutine)
    if self._thread is None:
      self._thread = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    return self._thread.submit(self._loop.run_until_complete,
                               coroutine).result()

  def all(self, results):
    pending = [r for r in results if inspect.isawaitable(r)]
    if not pending:
      return list(results)
    done = iter(self._run(_gather(pending)))
    return [next(done) if inspect.isawaitable(r) else r for r in results]

  def one(self, result):
    return self.all([result])[0]

  def close(self):
    if self._thread is not None:
      self._thread.shutdown()
    if self._loop is not None:
      self._loop.close()


async def _gather(awaitables):
  return await asyncio.gather(*awaitables)


def _numpy(structure):
  """Eager tensors as numpy values, as TFF's runtime hands metrics over."""
  return tf.nest.map_structure(
      lambda v: v.numpy() if isinstance(v, tf.Tensor) and hasattr(
          v, 'numpy') else v, structure)


def _as_metrics(value):
  value = _numpy(value)
  if isinstance(value, Mapping):
    return collections.OrderedDict(value)
  return collections.OrderedDict([(METRICS_KEY, value)])


def _state_and_metrics(process, result):
  """`(state, metrics)` of what `next` returned: a LearningProcessOutput
  (`.state`, `.metrics`) or a `(state, metrics)` pair."""
  if hasattr(result, 'state') and hasattr(result, 'metrics'):
    return result.state, result.metrics
  if isinstance(result, (tuple, list)):
    if len(result) == 3 and getattr(process, 'has_client_outputs', False):
      result = result[:2]  # Per-client outputs: not metrics, not kept.
    if len(result) == 2:
      return result[0], result[1]
  raise errors.InvalidTypeError(
      'run_training_process: training_process.next must return (state, '
      'metrics) or an object with .state and .metrics (a '
      f'LearningProcessOutput); it returned {type(result).__name__}'
      f'{f" of {len(result)}" if isinstance(result, (tuple, list)) else ""}.')


def _check_arguments(training_process, training_selection_fn, total_rounds,
                     rounds_per_evaluation, rounds_per_saving_program_state):
  where = 'run_training_process'
  for name in ('initialize', 'next'):
    if not callable(getattr(training_process, name, None)):
      raise errors.InvalidTypeError(
          f'{where}: training_process must have callable initialize and '
          f'next (an IterativeProcess); {type(training_process).__name__} '
          f'has no callable {name}.')
  if getattr(training_process, 'has_client_state', False):
    raise errors.InvalidValueError(
        f'{where}: the training process keeps state at the clients, which '
        'this loop (TFF\'s) cannot pass; run it with canonical.run_round or '
        'beam_runner.run, which keep each client\'s state.')
  if not callable(training_selection_fn):
    raise errors.InvalidTypeError(
        f'{where}: training_selection_fn must be a function round number -> '
        f'client data, got {type(training_selection_fn).__name__}.')
  for name, value, least in (
      ('total_rounds', total_rounds, 0),
      ('rounds_per_evaluation', rounds_per_evaluation, 1),
      ('rounds_per_saving_program_state', rounds_per_saving_program_state,
       1)):
    if not isinstance(value, numbers.Integral) or value < least:
      raise errors.InvalidValueError(
          f'{where}: {name} must be an integer of at least {least}, got '
          f'{value!r}.')


def run_training_process(
    training_process: Any,
    training_selection_fn: Callable[[int], Any],
    total_rounds: int,
    evaluation_fn: Callable[[Any, Any], Mapping[str, Any]] | None = None,
    evaluation_selection_fn: Callable[[int], Any] | None = None,
    rounds_per_evaluation: int = 1,
    program_state_manager: Any = None,
    rounds_per_saving_program_state: int = 1,
    metrics_managers: Iterable[Any] | None = None):
  """Runs `training_process` to round `total_rounds`; returns its state.

  Args:
    training_process: has `initialize()` and `next(state, client_data)`,
      returning `(state, metrics)` or a `LearningProcessOutput`.
    training_selection_fn: round number -> the round's client data (a list
      of per-client data, as `next` takes it).
    total_rounds: the last round to run.
    evaluation_fn: optional `(state, client data) -> metrics mapping`, run
      on the initial state (round 0) and after every `rounds_per_evaluation`
      rounds, with `evaluation_selection_fn(round)`'s data; its metrics are
      released under `EVALUATION_METRICS_PREFIX`.
    evaluation_selection_fn: round number -> evaluation client data.
    rounds_per_evaluation: rounds between evaluations.
    program_state_manager: optional; the state is saved as version 0 and
      every `rounds_per_saving_program_state` rounds, and a run starts after
      its latest saved version.
    rounds_per_saving_program_state: rounds between saves.
    metrics_managers: optional release managers; each round's metrics (with
      `ROUND_NUMBER_KEY` and `TRAINING_TIME_KEY`) are released to each with
      the round number as key.
  """
  _check_arguments(training_process, training_selection_fn, total_rounds,
                   rounds_per_evaluation, rounds_per_saving_program_state)
  managers = None if metrics_managers is None else list(metrics_managers)
  evaluating = evaluation_fn is not None and (
      evaluation_selection_fn is not None)
  wait = _Awaiter()

  def evaluate(state, round_num):
    start = time.time()
    metrics = _as_metrics(evaluation_fn(
        state, evaluation_selection_fn(round_num)))
    metrics[EVALUATION_TIME_KEY] = time.time() - start
    return collections.OrderedDict(
        (EVALUATION_METRICS_PREFIX + str(k), v) for k, v in metrics.items())

  def release(metrics, round_num):
    if managers is not None:
      wait.all([m.release(metrics, key=round_num) for m in managers])

  try:
    state, version = None, 0
    if program_state_manager is not None:
      # TFF passes the initial state as the structure to load into.
      state, version = wait.one(program_state_manager.load_latest(
          training_process.initialize()))
    if state is not None:
      start_round = version + 1
    else:
      state = training_process.initialize()
      start_round = 1
      if evaluating:
        release(evaluate(state, 0), 0)
      if program_state_manager is not None:
        wait.one(program_state_manager.save(state, 0))

    for round_num in range(start_round, total_rounds + 1):
      start = time.time()
      state, metrics = _state_and_metrics(training_process, (
          training_process.next(state, training_selection_fn(round_num))))
      metrics = _as_metrics(metrics)
      metrics[TRAINING_TIME_KEY] = time.time() - start
      metrics[ROUND_NUMBER_KEY] = round_num
      if evaluating and round_num % rounds_per_evaluation == 0:
        metrics.update(evaluate(state, round_num))
      release(metrics, round_num)
      if (program_state_manager is not None and
          round_num % rounds_per_saving_program_state == 0):
        wait.one(program_state_manager.save(state, round_num))
    return state
  finally:
    wait.close()
