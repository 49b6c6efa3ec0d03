"""TFF 0.87's federated program (the "Program" guide and its example under
`examples/program/`): computations summing the clients' integers, program
logic that trains for some rounds, saving its program state after each so a
restarted program resumes, releasing metrics and the final state, then
evaluating; and the program that runs it with a `DatasetDataSource`, release
managers and a `FileProgramStateManager`. Written as a TFF user writes it
(the logic async, as TFF's example is), with only the import line changed;
the released values are the ones TFF 0.87 releases for the same program.

The program's platform lines run as written (`tff.backends.native.
create_async_local_cpp_execution_context()`, `tff.program.
NativeFederatedContext(context)`, `tff.framework.set_default_context`): once
they have run, a computation called from Python returns value references, as
in TFF, which the logic awaits with `tff.program.materialize_value`.

The logic's type checks (`_check_expected_type_signatures`, as in TFF's
example: `isinstance(t, tff.StructType)`, unpacking a computation's
parameters, `is_assignable_from`) run as written, and refuse a computation
of the wrong type.
"""

import asyncio
import collections
import typing
from typing import NamedTuple, Optional

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff

# The computations (TFF's `computations.py`).

METRICS_TOTAL_SUM = 'total_sum'


@tff.federated_computation()
def initialize():
  """Returns the initial state."""
  return tff.federated_value(0, tff.SERVER)


@tff.tensorflow.computation(tff.SequenceType(np.int32))
def _sum_dataset(dataset: tf.data.Dataset) -> int:
  """Returns the sum of all the integers in `dataset`."""
  return dataset.reduce(tf.cast(0, tf.int32), tf.add)


@tff.tensorflow.computation(np.int32, np.int32)
def _sum_integers(x: int, y: int) -> int:
  """Returns the sum two integers."""
  return x + y


@tff.federated_computation(
    tff.FederatedType(np.int32, tff.SERVER),
    tff.FederatedType(tff.SequenceType(np.int32), tff.CLIENTS),
)
def train(server_state: int, client_data: tf.data.Dataset):
  """The sum of the clients' integers, added to the state, and as metrics."""
  client_sums = tff.federated_map(_sum_dataset, client_data)
  total_sum = tff.federated_sum(client_sums)
  updated_state = tff.federated_map(_sum_integers, (server_state, total_sum))
  metrics = collections.OrderedDict([(METRICS_TOTAL_SUM, total_sum)])
  metrics = tff.federated_zip(metrics)
  return updated_state, metrics


@tff.federated_computation(
    tff.FederatedType(np.int32, tff.SERVER),
    tff.FederatedType(tff.SequenceType(np.int32), tff.CLIENTS),
)
def evaluation(server_state: int, client_data: tf.data.Dataset):
  """The sum of the clients' integers, as metrics."""
  del server_state  # Unused.
  client_sums = tff.federated_map(_sum_dataset, client_data)
  total_sum = tff.federated_sum(client_sums)
  metrics = collections.OrderedDict([(METRICS_TOTAL_SUM, total_sum)])
  metrics = tff.federated_zip(metrics)
  return metrics


# The program logic (TFF's `program_logic.py`): it knows only the abstract
# interfaces of `tff.program`, not the platform.


class UnexpectedTypeSignatureError(Exception):
  pass


def _expect(condition, message):
  if not condition:
    raise UnexpectedTypeSignatureError(message)


def _is_at(type_spec, placement):
  return (isinstance(type_spec, tff.FederatedType) and
          type_spec.placement is placement)


def _check_expected_type_signatures(*, initialize, train, train_data_source,
                                    evaluation, evaluation_data_source):
  # pylint: disable=redefined-outer-name
  """`initialize: ( -> S@SERVER)`, `train: (<S@SERVER,D1@CLIENTS> ->
  <S@SERVER,M1@SERVER>)`, `evaluation: (<S@SERVER,D2@CLIENTS> -> M2@SERVER)`,
  the data sources yielding D1 and D2 at CLIENTS."""
  for name, comp in (('initialize', initialize), ('train', train),
                     ('evaluation', evaluation)):
    _expect(isinstance(comp.type_signature, tff.FunctionType),
            f'`{name}` is not a function: {comp.type_signature}.')
  _expect(initialize.type_signature.parameter is None,
          'Expected `initialize` to have no parameters.')
  state_type = initialize.type_signature.result
  _expect(_is_at(state_type, tff.SERVER),
          f'`initialize` returns {state_type}, not a value at SERVER.')

  result = train.type_signature.result
  _expect(isinstance(result, tff.StructType) and len(result) == 2,
          f'Expected `train` to return two results, found {result}.')
  new_state_type, metrics_type = result
  _expect(_is_at(new_state_type, tff.SERVER) and
          _is_at(metrics_type, tff.SERVER),
          f'`train` returns {result}, not two values at SERVER.')
  for name, comp, data_source in (
      ('train', train, train_data_source),
      ('evaluation', evaluation, evaluation_data_source)):
    parameter = comp.type_signature.parameter
    _expect(isinstance(parameter, tff.StructType) and len(parameter) == 2,
            f'Expected `{name}` to have two parameters, found {parameter}.')
    state_parameter, data_parameter = parameter
    _expect(_is_at(state_parameter, tff.SERVER) and
            state_parameter.is_assignable_from(new_state_type),
            f'`{name}` takes the state as {state_parameter}, not '
            f'{new_state_type}.')
    _expect(_is_at(data_parameter, tff.CLIENTS) and
            data_parameter.is_assignable_from(data_source.federated_type),
            f'`{name}` takes {data_parameter}, its data source yields '
            f'{data_source.federated_type}.')
  _expect(_is_at(evaluation.type_signature.result, tff.SERVER),
          'Expected `evaluation` to return a value at SERVER.')


class _TaskGroup:
  """Tasks started in the block, all awaited when it ends (as TFF's example
  program logic keeps them; unlike `asyncio.TaskGroup`, a failed task does
  not cancel the others)."""

  def __init__(self):
    self._tasks = set()

  async def __aenter__(self):
    return self

  async def __aexit__(self, exc_type, exc_value, traceback):
    if self._tasks:
      await asyncio.wait(self._tasks)

  def create_task(self, coro):
    task = asyncio.create_task(coro)
    self._tasks.add(task)
    task.add_done_callback(self._tasks.discard)
    return task


class _ProgramState(NamedTuple):
  """What the logic needs to resume after a failure.

  Attributes:
    state: The server state after `round_num`.
    round_num: The last round trained.
    iterator: The training data's `tff.program.FederatedDataSourceIterator`.
  """
  state: object
  round_num: int
  iterator: tff.program.FederatedDataSourceIterator


async def train_federated_model(
    *,
    initialize: tff.Computation,  # pylint: disable=redefined-outer-name
    train: tff.Computation,  # pylint: disable=redefined-outer-name
    train_data_source: tff.program.FederatedDataSource,
    evaluation: tff.Computation,  # pylint: disable=redefined-outer-name
    evaluation_data_source: tff.program.FederatedDataSource,
    total_rounds: int,
    num_clients: int,
    train_metrics_manager: Optional[tff.program.ReleaseManager] = None,
    evaluation_metrics_manager: Optional[tff.program.ReleaseManager] = None,
    model_output_manager: Optional[tff.program.ReleaseManager] = None,
    program_state_manager: Optional[tff.program.ProgramStateManager] = None,
) -> None:
  """Trains for rounds 1 to `total_rounds` (round 0 is the initial state),
  resuming after the last round saved; then evaluates once and releases the
  state."""
  tff.program.check_in_federated_context()
  _check_expected_type_signatures(
      initialize=initialize,
      train=train,
      train_data_source=train_data_source,
      evaluation=evaluation,
      evaluation_data_source=evaluation_data_source,
  )

  state = initialize()
  start_round = 1
  train_data_iterator = train_data_source.iterator()

  # Restore the latest program state, if a previous run saved one.
  if program_state_manager is not None:
    state = await tff.program.materialize_value(state)
    structure = _ProgramState(state=state, round_num=0,
                              iterator=train_data_iterator)
    program_state, version = await program_state_manager.load_latest(
        structure)
    program_state = typing.cast(_ProgramState, program_state)
  else:
    program_state = None
    version = 0
  if program_state is not None:
    state = program_state.state
    start_round = program_state.round_num + 1
    train_data_iterator = program_state.iterator

  # Releases and saves are coroutines: run them concurrently, all awaited
  # before the logic returns.
  async with _TaskGroup() as task_group:
    for round_num in range(start_round, total_rounds + 1):
      train_data = train_data_iterator.select(num_clients)
      state, metrics = train(state, train_data)

      if train_metrics_manager is not None:
        task_group.create_task(
            train_metrics_manager.release(metrics, key=round_num))

      if program_state_manager is not None:
        program_state = _ProgramState(state=state, round_num=round_num,
                                      iterator=train_data_iterator)
        version = version + 1
        task_group.create_task(
            program_state_manager.save(program_state, version))

    evaluation_data_iterator = evaluation_data_source.iterator()
    evaluation_data = evaluation_data_iterator.select(num_clients)
    evaluation_metrics = evaluation(state, evaluation_data)

    if evaluation_metrics_manager is not None:
      task_group.create_task(evaluation_metrics_manager.release(
          evaluation_metrics, key=total_rounds + 1))

    if model_output_manager is not None:
      task_group.create_task(model_output_manager.release(state, key=None))


# The program (TFF's `program.py`), with its platform lines apart.

_NUM_CLIENTS = 1


def _filter_metrics(path) -> bool:
  return path == (METRICS_TOTAL_SUM,)


def run_program(output_dir, total_rounds, managers):
  """Runs the program logic as TFF's example program does; `managers` are
  the MemoryReleaseManagers a test reads, behind the program's filters."""
  # Configure the platform: a context in which to execute the program
  # logic.
  context = tff.backends.native.create_async_local_cpp_execution_context()
  context = tff.program.NativeFederatedContext(context)
  tff.framework.set_default_context(context)

  # Create data sources that are compatible with the context and
  # computations.
  datasets = [tf.data.Dataset.range(10, output_type=tf.int32)] * 3
  train_data_source = tff.program.DatasetDataSource(datasets)
  evaluation_data_source = tff.program.DatasetDataSource(datasets)

  train_metrics_managers = [tff.program.LoggingReleaseManager(),
                            managers['train']]
  evaluation_metrics_managers = [tff.program.LoggingReleaseManager(),
                                 managers['evaluation']]
  csv_path = f'{output_dir}/evaluation_metrics.csv'
  evaluation_metrics_managers.append(
      tff.program.CSVFileReleaseManager(csv_path))

  train_metrics_manager = tff.program.FilteringReleaseManager(
      tff.program.GroupingReleaseManager(train_metrics_managers),
      _filter_metrics,
  )
  evaluation_metrics_manager = tff.program.FilteringReleaseManager(
      tff.program.GroupingReleaseManager(evaluation_metrics_managers),
      _filter_metrics,
  )
  program_state_manager = tff.program.FileProgramStateManager(
      f'{output_dir}/program_state')

  asyncio.run(
      train_federated_model(
          initialize=initialize,
          train=train,
          train_data_source=train_data_source,
          evaluation=evaluation,
          evaluation_data_source=evaluation_data_source,
          total_rounds=total_rounds,
          num_clients=_NUM_CLIENTS,
          train_metrics_manager=train_metrics_manager,
          evaluation_metrics_manager=evaluation_metrics_manager,
          model_output_manager=managers['model_output'],
          program_state_manager=program_state_manager,
      ))
  return program_state_manager


def _memory_managers():
  return {name: tff.program.MemoryReleaseManager()
          for name in ('train', 'evaluation', 'model_output')}


@pytest.fixture(autouse=True)
def restores_the_context():
  # The program's platform lines install a context for the whole process.
  previous = tff.framework.get_context_stack().current
  yield
  tff.framework.set_default_context(previous)


def test_the_computations_type_signatures():
  assert str(initialize.type_signature) == '( -> int32@SERVER)'
  assert str(train.type_signature) == (
      '(<server_state=int32@SERVER,client_data={int32*}@CLIENTS> -> '
      '<int32@SERVER,<total_sum=int32>@SERVER>)')
  assert str(evaluation.type_signature) == (
      '(<server_state=int32@SERVER,client_data={int32*}@CLIENTS> -> '
      '<total_sum=int32>@SERVER)')


def test_the_program_trains_releases_and_saves(tmp_path):
  managers = _memory_managers()
  program_state_manager = run_program(tmp_path, 10, managers)
  assert managers['train'].values() == collections.OrderedDict(
      (round_num, collections.OrderedDict(total_sum=45))
      for round_num in range(1, 11))
  assert managers['evaluation'].values() == collections.OrderedDict(
      [(11, collections.OrderedDict(total_sum=45))])
  assert managers['model_output'].values() == collections.OrderedDict(
      [(None, 450)])
  # FileProgramStateManager keeps 5 versions by default: the first and the
  # latest 4.
  assert asyncio.run(program_state_manager.get_versions()) == [1, 7, 8, 9, 10]
  with open(tmp_path / 'evaluation_metrics.csv') as f:
    assert f.read().splitlines() == ['key,total_sum', '11,45']


def test_a_restarted_program_resumes_after_its_last_saved_round(tmp_path):
  first = _memory_managers()
  run_program(tmp_path, 4, first)  # Then it stops, as if it had failed.
  assert list(first['train'].values()) == [1, 2, 3, 4]
  assert first['model_output'].values()[None] == 180

  second = _memory_managers()
  program_state_manager = run_program(tmp_path, 10, second)
  assert list(second['train'].values()) == [5, 6, 7, 8, 9, 10]
  assert second['model_output'].values()[None] == 450
  assert asyncio.run(program_state_manager.get_versions()) == [1, 7, 8, 9, 10]
  program_state, version = asyncio.run(program_state_manager.load_latest(
      _ProgramState(state=0, round_num=0,
                    iterator=tff.program.DatasetDataSource(
                        [tf.data.Dataset.range(10, output_type=tf.int32)]
                    ).iterator())))
  assert version == 10
  assert program_state.state == 450 and program_state.round_num == 10


def test_under_the_platform_lines_computations_return_value_references():
  context = tff.backends.native.create_async_local_cpp_execution_context()
  tff.framework.set_default_context(tff.program.NativeFederatedContext(context))
  tff.program.check_in_federated_context()

  state = initialize()
  assert isinstance(state, tff.program.NativeValueReference)
  data = tff.program.DatasetDataSource(
      [tf.data.Dataset.range(10, output_type=tf.int32)] * 2).iterator()
  state, metrics = train(state, data.select(2))  # A reference goes back in.
  assert isinstance(metrics['total_sum'], tff.program.MaterializableValueReference)
  assert asyncio.run(tff.program.materialize_value((state, metrics))) == (
      90, collections.OrderedDict(total_sum=90))
  assert state.type_signature == tff.TensorType(np.int32)


def test_a_computation_returning_client_values_is_refused_by_the_context():
  @tff.federated_computation(tff.FederatedType(np.int32, tff.SERVER))
  def to_clients(value):
    return tff.federated_broadcast(value)

  context = tff.backends.native.create_async_local_cpp_execution_context()
  tff.framework.set_default_context(tff.program.NativeFederatedContext(context))
  with pytest.raises(ValueError, match='int32@CLIENTS'):
    to_clients(1)


def test_computations_are_tff_computations():
  assert isinstance(train, tff.Computation)


def test_the_program_logic_type_checks_pass():
  datasets = [tf.data.Dataset.range(10, output_type=tf.int32)]
  _check_expected_type_signatures(
      initialize=initialize,
      train=train,
      train_data_source=tff.program.DatasetDataSource(datasets),
      evaluation=evaluation,
      evaluation_data_source=tff.program.DatasetDataSource(datasets),
  )


def test_the_program_logic_type_checks_refuse_mismatched_computations():
  ints = [tf.data.Dataset.range(10, output_type=tf.int32)]
  floats = [tf.data.Dataset.range(10).map(lambda x: tf.cast(x, tf.float32))]

  @tff.federated_computation()
  def float_initialize():
    return tff.federated_value(0.0, tff.SERVER)

  checks = dict(initialize=initialize, train=train,
                train_data_source=tff.program.DatasetDataSource(ints),
                evaluation=evaluation,
                evaluation_data_source=tff.program.DatasetDataSource(ints))
  with pytest.raises(UnexpectedTypeSignatureError, match='float32'):
    _check_expected_type_signatures(
        **{**checks, 'train_data_source': tff.program.DatasetDataSource(
            floats)})
  with pytest.raises(UnexpectedTypeSignatureError, match='two results'):
    _check_expected_type_signatures(**{**checks, 'train': evaluation})
  # train returns int32 state; a float32 state is not assignable to it.
  assert not train.type_signature.parameter[0].is_assignable_from(
      float_initialize.type_signature.result)
