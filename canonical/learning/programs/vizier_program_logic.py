"""TFF 0.87's `train_model_with_vizier`: hyperparameter tuning of a
training program with a Google Vizier study, as in TFF.

Each of `num_parallel_trials` workers asks the study for a trial until it
holds `total_trials`, builds a training process for it, sets its
hyperparameters (`update_hparams(get_hparams(state), trial.parameters)`)
and runs `train_model_program_logic` (`train_model`, say) with it: every
training round's metrics become an intermediate measurement of the trial
(unless the study stops it early), and each evaluation's total metrics its
final one. Needs `google-vizier` (`pip install google-vizier`; the extra
`vizier` of this project); a study needs Vizier's service (a local one
needs `google-vizier[jax]`).
"""

import asyncio
import collections
import datetime

from canonical import errors
from canonical.learning.programs import evaluation_program_logic
from canonical.program import release_manager
from canonical.program import structure
from canonical.program import value_reference


def _pyvizier():
  try:
    from vizier import pyvizier  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise errors.FederatedError(
        'train_model_with_vizier needs Google Vizier: pip install '
        f'google-vizier (or this project\'s extra [vizier]); {e}.') from None
  return pyvizier


async def _measurement(value, steps, creation_time):
  """A Vizier measurement of `value`'s leaves, named by their paths."""
  pyvizier = _pyvizier()
  value = await value_reference.materialize_value(value)
  metrics = {structure.path_name(path): leaf
             for path, leaf in structure.flatten_with_path(value)}
  elapsed = datetime.datetime.now().astimezone() - creation_time
  return pyvizier.Measurement(metrics=metrics,
                              elapsed_secs=elapsed.total_seconds(),
                              steps=steps)


class _IntermediateMeasurementReleaseManager(release_manager.ReleaseManager):
  """Releases metrics as a trial's intermediate measurements."""

  def __init__(self, trial):
    self._trial = trial

  async def release(self, value, key) -> None:
    measurement = await _measurement(
        value, key, self._trial.materialize().creation_time)
    if not self._trial.check_early_stopping():
      self._trial.add_measurement(measurement)


class _FinalMeasurementReleaseManager(release_manager.ReleaseManager):
  """Releases metrics as a trial's final measurement (completing it)."""

  def __init__(self, trial):
    self._trial = trial

  async def release(self, value, key) -> None:
    measurement = await _measurement(
        value, key, self._trial.materialize().creation_time)
    self._trial.complete(measurement)


async def train_model_with_vizier(*,
                                  study,
                                  total_trials: int,
                                  num_parallel_trials: int = 1,
                                  update_hparams,
                                  train_model_program_logic,
                                  train_process_factory,
                                  train_data_source,
                                  total_rounds: int,
                                  num_clients: int,
                                  program_state_manager_factory,
                                  model_output_manager_factory,
                                  train_metrics_manager_factory=None,
                                  evaluation_manager_factory,
                                  evaluation_periodicity) -> None:
  """Runs trials of `study` (see the module); each factory takes the trial
  and makes that trial's process or manager."""
  _pyvizier()  # Fails early, naming what to install.
  for name, value in (('total_trials', total_trials),
                      ('num_parallel_trials', num_parallel_trials)):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise errors.InvalidValueError(
          f'train_model_with_vizier: {name} must be a positive int, got '
          f'{value!r}.')

  async def one_worker(worker_name):
    while len(list(study.trials().get())) < total_trials:
      trials = list(study.suggest(count=1, client_id=worker_name))
      if not trials:
        break
      trial = trials[0]
      train_process = train_process_factory(trial)
      state = await value_reference.materialize_value(
          train_process.initialize())
      hparams = update_hparams(train_process.get_hparams(state),
                               collections.OrderedDict(trial.parameters))
      state = train_process.set_hparams(state, hparams)

      train_metrics_manager = _IntermediateMeasurementReleaseManager(trial)
      if train_metrics_manager_factory is not None:
        train_metrics_manager = release_manager.GroupingReleaseManager([
            train_metrics_manager_factory(trial), train_metrics_manager])
      evaluation_manager = evaluation_manager_factory(trial)
      aggregated = _FinalMeasurementReleaseManager(trial)
      if evaluation_manager.aggregated_metrics_manager is not None:
        aggregated = release_manager.GroupingReleaseManager([
            evaluation_manager.aggregated_metrics_manager, aggregated])
      evaluation_manager = evaluation_program_logic.EvaluationManager(
          data_source=evaluation_manager.data_source,
          aggregated_metrics_manager=aggregated,
          create_state_manager_fn=evaluation_manager.create_state_manager_fn,
          create_process_fn=evaluation_manager.create_process_fn,
          cohort_size=evaluation_manager.cohort_size,
          duration=evaluation_manager.duration)
      await train_model_program_logic(
          initial_train_state=state,
          train_process=train_process,
          train_data_source=train_data_source,
          train_per_round_clients=num_clients,
          train_total_rounds=total_rounds,
          program_state_manager=program_state_manager_factory(trial),
          model_output_manager=model_output_manager_factory(trial),
          train_metrics_manager=train_metrics_manager,
          evaluation_manager=evaluation_manager,
          evaluation_periodicity=evaluation_periodicity)

  await asyncio.gather(*[one_worker(f'vizier_worker_{i}')
                         for i in range(num_parallel_trials)])
