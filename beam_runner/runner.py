"""`run`: a canonical form's rounds, one Beam batch pipeline per round.

The driver samples each round's clients, builds and runs the round's pipeline,
checks its outcome and commits it; a run that stops (or is killed) resumes
from its last committed round with the same sampled clients and results.
"""

import dataclasses
import json
import os
import shutil
import sys
import time

import apache_beam as beam
from apache_beam.options import pipeline_options as beam_options
from apache_beam.runners.portability import fn_api_runner
import numpy as np

import canonical
from beam_runner import client_data as client_data_lib
from beam_runner import client_states
from beam_runner import form_source
from beam_runner import round_pipeline
from beam_runner import run_dir
from beam_runner import tensor_io
from beam_runner import tensorboard_log


FORM_FILE = 'form.pb'


class RoundError(RuntimeError):
  """A round that could not complete; the state stays as it was."""


@dataclasses.dataclass
class RunResult:
  state: object          # The server state after the last committed round.
  rounds: int            # The number of that round (0: only initialized).
  outcomes: list         # One dict per committed round 1..rounds.
  output_dir: str


def sample_clients(client_ids, clients_per_round, seed, round_number):
  """The ids sampled in a round: a pure function of ids, seed and round."""
  client_ids = sorted(client_ids)
  rng = np.random.default_rng([seed, round_number])
  count = min(clients_per_round, len(client_ids))
  return [client_ids[i] for i in rng.choice(len(client_ids), count,
                                            replace=False)]


def run(form_or_path, client_data, rounds, clients_per_round, output_dir,
        pipeline_options=None, seed=0, min_clients=1, progress=None,
        evaluate=None, on_round=None):
  """Runs rounds 1..`rounds` of a form on Beam; returns a `RunResult`.

  Args:
    form_or_path: a `CanonicalForm` or the path of a saved form. On the
      in-process runner a form stays in memory; on any other runner it is
      saved to `output_dir/form.pb` and workers load it from there.
    client_data: a dict client id -> data (Dataset or tensors; in-process
      runner only), a directory written by `write_client_data`, or a client
      data source.
    rounds: the total number of rounds; committed rounds are not run again.
    clients_per_round: clients sampled (without replacement) per round.
    output_dir: where states, metrics and client states are kept.
    pipeline_options: Beam `PipelineOptions`; without a runner, rounds run on
      the in-process `FnApiRunner` (no Prism download).
    seed: the sampling seed.
    min_clients: a client whose work fails (unreadable data, an error, a NaN
      or Inf in its update or new state) is dropped and counted; a round
      with fewer than `min_clients` successes raises `RoundError`, commits
      nothing and leaves the state as it was.
    progress: called with one line per round (default: printed to stderr).
    evaluate: optional `evaluate(state) -> {name: number}`, called in the
      driver with each round's new server state before the round commits
      (e.g. test accuracy of the model); its result is committed with the
      round as the outcome's 'evaluation', and an error in it fails the
      round like any other.
    on_round: optional, called with each round's outcome once committed.

  Each committed round's outcome (metrics, clients ok and dropped with
  reasons, bits broadcast and aggregated, seconds per stage) is appended to
  `output_dir/metrics.jsonl` and written as TensorBoard scalars to
  `output_dir/tensorboard`.
  """
  options = pipeline_options_of(pipeline_options)
  in_process = options.view_as(beam_options.StandardOptions).runner is None
  source = form_source.FormSource.of(form_or_path)
  form = source.get()
  data = client_data_lib.source_of(client_data)
  if not in_process and isinstance(data, client_data_lib.InMemoryClientData):
    raise client_data_lib.ClientDataError(
        'In-memory client data reaches only the in-process runner; write it '
        'with beam_runner.write_client_data and pass the directory.')
  data.check(form.client_data_spec)
  client_ids = data.client_ids()
  if not client_ids:
    raise client_data_lib.ClientDataError(f'The {data.describe()} has no '
                                          'clients.')
  if progress is None:
    progress = lambda line: print(line, file=sys.stderr, flush=True)
  out = run_dir.RunDir(output_dir)
  out.claim({'form': form.summary(print_fn=None), 'seed': seed,
             'clients_per_round': clients_per_round})
  if not in_process and source.path is None:  # Workers load it from a file.
    source = form_source.FormSource.of(
        canonical.save(form, os.path.join(out.directory, FORM_FILE)))
  store = client_states.ClientStateStore(out.client_states_dir)
  store.discard_after(out.last_committed() or 0)
  if out.last_committed() is None:
    stage = out.new_stage(0)
    tensor_io.write_tensors(os.path.join(stage, round_pipeline.STATE_FILE),
                            form.initialize())
    out.commit(stage, 0)
  out.rebuild_metrics_log()
  board = tensorboard_log.TensorBoardLog(out.tensorboard_dir)
  board.rebuild(out.outcome(r) for r in out.committed_rounds() if r > 0)
  try:
    for round_number in range(out.last_committed() + 1, rounds + 1):
      sampled = sample_clients(client_ids, clients_per_round, seed,
                               round_number)
      outcome = run_round(source, data, store, out, round_number, sampled,
                          options, min_clients, evaluate)
      out.append_metrics(outcome)
      board.write(outcome)
      progress(progress_line(outcome, rounds))
      if on_round is not None:
        on_round(outcome)
  finally:
    board.close()
  last = out.last_committed()
  return RunResult(
      state=tensor_io.read_tensors(out.state_path(last), form.state_spec,
                                   what='server state'),
      rounds=last, outcomes=[out.outcome(r) for r in range(1, last + 1)],
      output_dir=out.directory)


def run_round(source, data, store, out, round_number, sampled,
              pipeline_options=None, min_clients=1, evaluate=None):
  """Runs and commits one round; returns its outcome.

  Raises `RoundError` (and leaves no trace of the round: no staged files, no
  client state versions) when the round cannot run or fewer than
  `min_clients` clients succeed.
  """
  start = time.perf_counter()
  if len(sampled) < min_clients:
    raise RoundError(f'Round {round_number}: {len(sampled)} clients sampled, '
                     f'fewer than min_clients={min_clients}; nothing '
                     'committed.')
  stage = out.new_stage(round_number)
  try:
    outcome = _run_pipeline(source, data, store, out, round_number, sampled,
                            pipeline_options, stage)
    ok = outcome.pop('clients_ok')
    if ok < min_clients:
      raise RoundError(
          f'Round {round_number}: {ok} of {len(sampled)} clients succeeded, '
          f'fewer than min_clients={min_clients}; nothing committed. '
          f'Dropped: {_dropped_summary(outcome)}.')
    evaluate_start = time.perf_counter()
    evaluation = _evaluate(evaluate, source, stage)
    evaluate_seconds = time.perf_counter() - evaluate_start
  except BaseException as e:
    shutil.rmtree(stage, ignore_errors=True)
    store.discard_after(round_number - 1)
    if isinstance(e, Exception) and not isinstance(e, RoundError):
      raise RoundError(f'Round {round_number} failed, nothing committed: '
                       f'{type(e).__name__}: {e}') from e
    raise
  commit_start = time.perf_counter()
  prepare = outcome.pop('prepare_seconds')
  update = outcome.pop('update_seconds')
  work_aggregate = outcome.pop('pipeline_seconds') - prepare - update
  outcome = dict(
      round=round_number, clients_ok=ok, clients_dropped=len(sampled) - ok,
      dropped_reasons=outcome.pop('dropped_reasons'),
      dropped_clients=outcome.pop('dropped_clients'),
      bits_broadcast=outcome.pop('bits_broadcast_each') * len(sampled),
      bits_aggregated=outcome.pop('bits_aggregated'),
      client_work_seconds=round(outcome.pop('client_work_seconds'), 4),
      **outcome)
  if evaluation is not None:
    outcome['evaluation'] = evaluation
  # Commit: the outcome checked and written; the rename that follows is one
  # system call and not counted.
  stages = dict(prepare=prepare, work_aggregate=max(0.0, work_aggregate),
                update=update, commit=time.perf_counter() - commit_start)
  if evaluation is not None:
    stages['evaluate'] = evaluate_seconds
  outcome['stage_seconds'] = {k: round(v, 4) for k, v in stages.items()}
  outcome['seconds'] = round(time.perf_counter() - start, 4)
  tensor_io.write_atomic(os.path.join(stage, round_pipeline.OUTCOME_FILE),
                         json.dumps(outcome).encode())
  out.commit(stage, round_number)
  return outcome


def _run_pipeline(source, data, store, out, round_number, sampled, options,
                  stage):
  """The round's pipeline, run; its raw outcome plus `pipeline_seconds`."""
  tensor_io.write_atomic(os.path.join(stage, run_dir.CLIENTS_FILE),
                         json.dumps(sampled).encode())
  start = time.perf_counter()
  pipeline = make_pipeline(options)
  round_pipeline.build(pipeline, source, data, store, sampled, round_number,
                       out.state_path(round_number - 1), stage)
  pipeline.run().wait_until_finish()
  with open(os.path.join(stage, round_pipeline.OUTCOME_FILE)) as f:
    outcome = json.load(f)
  outcome['pipeline_seconds'] = time.perf_counter() - start
  return outcome


def _evaluate(evaluate, source, stage):
  """`evaluate(new state)` as {name: float}, or None without `evaluate`."""
  if evaluate is None:
    return None
  state = tensor_io.read_tensors(
      os.path.join(stage, round_pipeline.STATE_FILE), source.get().state_spec,
      what='server state')
  result = evaluate(state)
  if not isinstance(result, dict):
    raise TypeError('evaluate must return a dict name -> number, got '
                    f'{type(result).__name__}.')
  return {str(name): float(value) for name, value in result.items()}


def _dropped_summary(outcome):
  reasons = outcome.get('dropped_reasons') or {}
  if not reasons:
    return 'none'
  named = outcome.get('dropped_clients') or {}
  text = ', '.join(f'{count} {reason}' for reason, count in reasons.items())
  if named:
    client, message = next(iter(named.items()))
    text += f' (e.g. client {client!r}: {message})'
  return text


def pipeline_options_of(options):
  """`PipelineOptions` from None, a dict, a list of flags, or options."""
  if options is None:  # Not PipelineOptions(): that would parse sys.argv.
    options = beam_options.PipelineOptions([])
  elif isinstance(options, dict):
    options = beam_options.PipelineOptions.from_dictionary(options)
  elif isinstance(options, (list, tuple)):
    options = beam_options.PipelineOptions(list(options))
  return options


def make_pipeline(options=None):
  """A pipeline on the given runner, or on the in-process FnApiRunner."""
  options = pipeline_options_of(options)
  if options.view_as(beam_options.StandardOptions).runner is None:
    return beam.Pipeline(runner=fn_api_runner.FnApiRunner(), options=options)
  return beam.Pipeline(options=options)


def progress_line(outcome, rounds):
  metrics = ', '.join(f'{k}={_short(v)}' for k, v in
                      outcome['metrics'].items())
  reasons = outcome.get('dropped_reasons') or {}
  why = ' (' + ', '.join(f'{n} {r}' for r, n in reasons.items()) + ')' \
      if reasons else ''
  evaluation = outcome.get('evaluation') or {}
  if evaluation:
    metrics += ('; ' if metrics else '') + 'evaluation ' + ', '.join(
        f'{k}={_short(v)}' for k, v in evaluation.items())
  stages = outcome.get('stage_seconds') or {}
  stage_text = ' (' + ', '.join(f'{k} {v:.2f}' for k, v in stages.items()) + \
      ')' if stages else ''
  return (f'round {outcome["round"]}/{rounds}: clients ok '
          f'{outcome["clients_ok"]}, dropped {outcome["clients_dropped"]}{why}'
          f'{"; " + metrics if metrics else ""}; bits broadcast '
          f'{outcome["bits_broadcast"]}, aggregated '
          f'{outcome["bits_aggregated"]}; {outcome["seconds"]:.2f} s'
          f'{stage_text}')


def _short(value):
  if isinstance(value, float):
    return f'{value:.4g}'
  if isinstance(value, list) and len(value) > 4:
    return f'[{len(value)} values]'
  return str(value)
