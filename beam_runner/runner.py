"""`run`: a canonical form's rounds, one Beam batch pipeline per round.

The driver samples each round's clients, builds and runs the round's pipeline,
checks its outcome and commits it; a run that stops (or is killed) resumes
from its last committed round with the same sampled clients and results.
"""

import dataclasses
import json
import os
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
        pipeline_options=None, seed=0, min_clients=1, progress=None):
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
    min_clients: a round with fewer clients succeeding fails cleanly.
    progress: called with one line per round (default: printed to stderr).
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
  for round_number in range(out.last_committed() + 1, rounds + 1):
    sampled = sample_clients(client_ids, clients_per_round, seed, round_number)
    outcome = run_round(source, data, store, out, round_number, sampled,
                        options, min_clients)
    out.append_metrics(outcome)
    progress(progress_line(outcome, rounds))
  last = out.last_committed()
  return RunResult(
      state=tensor_io.read_tensors(out.state_path(last), form.state_spec,
                                   what='server state'),
      rounds=last, outcomes=[out.outcome(r) for r in range(1, last + 1)],
      output_dir=out.directory)


def run_round(source, data, store, out, round_number, sampled,
              pipeline_options=None, min_clients=1):
  """Runs and commits one round; returns its outcome."""
  start = time.perf_counter()
  stage = out.new_stage(round_number)
  tensor_io.write_atomic(os.path.join(stage, run_dir.CLIENTS_FILE),
                         json.dumps(sampled).encode())
  pipeline = make_pipeline(pipeline_options)
  round_pipeline.build(pipeline, source, data, store, sampled, round_number,
                       out.state_path(round_number - 1), stage)
  pipeline.run().wait_until_finish()
  path = os.path.join(stage, round_pipeline.OUTCOME_FILE)
  with open(path) as f:
    outcome = json.load(f)
  ok = outcome.pop('clients_ok')
  if ok < min_clients:
    raise RoundError(f'Round {round_number}: {ok} clients succeeded, fewer '
                     f'than min_clients={min_clients}; nothing committed.')
  bits_each = outcome.pop('bits_broadcast_each')
  outcome = dict(
      round=round_number, clients_ok=ok, clients_dropped=len(sampled) - ok,
      bits_broadcast=bits_each * len(sampled),
      bits_aggregated=outcome.pop('bits_aggregated'),
      seconds=round(time.perf_counter() - start, 4), **outcome)
  tensor_io.write_atomic(path, json.dumps(outcome).encode())
  out.commit(stage, round_number)
  return outcome


def pipeline_options_of(options):
  """`PipelineOptions` from None, a dict, a list of flags, or options."""
  if options is None:
    options = beam_options.PipelineOptions()
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
  return (f'round {outcome["round"]}/{rounds}: clients ok '
          f'{outcome["clients_ok"]}, dropped {outcome["clients_dropped"]}'
          f'{"; " + metrics if metrics else ""}; bits broadcast '
          f'{outcome["bits_broadcast"]}, aggregated '
          f'{outcome["bits_aggregated"]}; {outcome["seconds"]:.2f} s')


def _short(value):
  if isinstance(value, float):
    return f'{value:.4g}'
  if isinstance(value, list) and len(value) > 4:
    return f'[{len(value)} values]'
  return str(value)
