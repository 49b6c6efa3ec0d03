"""`assert_rounds_match`: a process's rounds on Beam equal its plain meaning.

For users' own processes, called from pytest: the process runs a few rounds
through the reference executor (`canonical.reference.run_round`) and, compiled,
through `beam_runner.run` on Beam's in-process runner, the DirectRunner, or
any engine `pipeline_options` name (a Dask cluster, for one). The reference sees exactly the
clients the runner sampled in each round (read back from the run's committed
rounds) and, with client state, the state each client left the last time it
was sampled; per-client outputs are compared client by client. The first
round and tensor where the two differ is reported.
"""

import os
import tempfile

import numpy as np
import tensorflow as tf

from beam_runner.driver import run_dir
from beam_runner.driver import runner
from beam_runner import engines
from beam_runner.worker_io import client_data as client_data_lib
from beam_runner.worker_io import tensor_io
import canonical
from canonical import errors
from canonical.executors import reference
from canonical import io as storage_lib

RUNNING_MODES = ('in_memory', 'multi_threading', 'multi_processing')


def pipeline_options_for(running_mode, num_workers=2):
  """Beam options for a DirectRunner mode; None: the in-process runner."""
  if running_mode not in RUNNING_MODES:
    raise errors.InvalidValueError(
        f'running_mode must be one of {RUNNING_MODES}, got '
        f'{running_mode!r}.')
  if running_mode == 'in_memory':
    return None  # beam_runner.run's in-process FnApiRunner: no Prism download.
  return {'runner': 'DirectRunner', 'direct_running_mode': running_mode,
          'direct_num_workers': num_workers}


def assert_rounds_match(process, client_data, rounds=3, clients_per_round=None,
                        seed=0, rtol=1e-5, atol=1e-6, running_mode='in_memory',
                        num_workers=2, form=None, check_local=True,
                        output_dir=None, pipeline_options=None,
                        clients_per_element=None, rounds_per_pipeline=None):
  """Raises AssertionError at the first round and tensor where Beam differs.

  Args:
    process: a `canonical.IterativeProcess`: the meaning to match.
    client_data: a dict client id -> data, a client data directory written by
      `beam_runner.write_client_data`, or a client data source. For modes other
      than 'in_memory', a dict is first written as TFRecord shards.
    rounds: rounds to run and compare.
    clients_per_round: clients sampled per round (default: all of them).
    seed: the runner's sampling seed.
    rtol, atol: float tolerances (the runner's combine may sum floats in
      another order than the reference's in-order fold); 0 and 0: bit exact.
    running_mode: 'in_memory' (the in-process runner), 'multi_threading' or
      'multi_processing' (DirectRunner with `num_workers` workers).
    pipeline_options: Beam options naming another engine instead, e.g.
      {'runner': 'DaskRunner', 'dask_client_address': 'tcp://...'}.
    form: the compiled form to run on Beam (default: `canonical.compile
      (process)`); a form of another process is how to check this check.
    check_local: also run the form in the local loop (`canonical.run_round`)
      on the same clients and states, and compare it to the reference too.
    output_dir: where the run is kept (default: a temporary directory).
    clients_per_element: as `beam_runner.run`'s (more elements: more partial
      aggregates to merge).
    rounds_per_pipeline: as `beam_runner.run`'s (rounds chained in one
      pipeline; on worker processes, one start of the workers for them).

  Returns:
    The `RunResult` of the Beam run.
  """
  form = canonical.compile(process) if form is None else form
  if pipeline_options is None:
    pipeline_options = pipeline_options_for(running_mode, num_workers)
    mode = f'Beam ({running_mode})'
  else:
    running_mode = 'engine'
    mode = f'Beam ({engines.runner_name(pipeline_options)})'
  storage = storage_lib.storage_for(
      engines.pipeline_options_of(pipeline_options))
  with tempfile.TemporaryDirectory(prefix='assert_rounds_match-') as temp:
    data = client_data_lib.source_of(client_data, storage)
    if (running_mode != 'in_memory' and
        isinstance(data, client_data_lib.InMemoryClientData)):
      data = client_data_lib.write_client_data(
          os.path.join(temp, 'clients'),
          {i: data.read(i, None) for i in data.client_ids()})
    if clients_per_round is None:
      clients_per_round = len(data.client_ids())
    out = os.fspath(output_dir) if output_dir is not None else \
        os.path.join(temp, 'run')
    result = runner.run(form, data, rounds, clients_per_round, out,
                        pipeline_options=pipeline_options, seed=seed,
                        progress=lambda line: None,
                        clients_per_element=clients_per_element,
                        rounds_per_pipeline=rounds_per_pipeline)
    _compare_runs(process, form, data, rounds, run_dir.RunDir(out, storage),
                  mode, rtol, atol, check_local, result.client_outputs)
  return result


def _compare_runs(process, form, data, rounds, run, mode, rtol, atol,
                  check_local, client_outputs=None):
  kept_paths = run.client_state_paths()
  state = process.initialize.invoke()
  _compare(tensor_io.read_tensors(run.state_path(0), form.state_spec,
                                  storage=run.storage), state,
           atol=0, rtol=0, what=f'{mode}: the initial server state')
  local_state = state
  kept, local_kept, last_round = {}, {}, {}
  for number in range(1, rounds + 1):
    ids = run.clients(number)
    outcome = run.outcome(number)
    dropped = outcome.get('clients_dropped', 0)
    if dropped:
      named = outcome.get('dropped_clients') or {}
      example = ''.join(f' (e.g. client {c!r}: {m})'
                        for c, m in list(named.items())[:1])
      raise AssertionError(f'Round {number}: {mode} dropped {dropped} of '
                           f'{len(ids)} clients{example}; the reference '
                           'drops none.')
    values = [data.read(i, form.client_data_spec) for i in ids]
    expected = _reference_round(process, state, values, ids, kept)
    where = f'round {number}'
    beam_state = tensor_io.read_tensors(run.state_path(number),
                                        form.state_spec, storage=run.storage)
    _compare(beam_state, expected[0], rtol, atol,
             f'{mode}, {where}: server state', reference=True)
    _compare_metrics(outcome['metrics'], expected[1], rtol, atol,
                     f'{mode}, {where}: metrics')
    if client_outputs is not None:
      _compare_outputs(client_outputs[number], ids, expected[2], rtol, atol,
                       f'{mode}, {where}')
    if check_local:
      local = _local_round(form, local_state, values, ids, local_kept)
      what = f'local loop (canonical.run_round), {where}'
      _compare(local[0], expected[0], rtol, atol, f'{what}: server state',
               reference=True)
      _compare(local[1], expected[1], rtol, atol, f'{what}: metrics',
               reference=True)
      if form.has_client_outputs:
        _compare(local[2], expected[2], rtol, atol,
                 f'{what}: per-client outputs', reference=True)
      local_state = local[0]
    state = expected[0]
    last_round.update((i, number) for i in ids)
  for client in sorted(kept):
    if client not in kept_paths:
      raise AssertionError(f'{mode} kept no state for client {client!r}, '
                           f'sampled in round {last_round[client]}.')
    _compare(tensor_io.read_tensors(kept_paths[client],
                                    form.client_state_spec,
                                    storage=run.storage),
             kept[client], rtol, atol,
             f'{mode}: state of client {client!r} after round '
             f'{last_round[client]} (its last)', reference=True)
    if check_local:
      _compare(local_kept[client], kept[client], rtol, atol,
               f'local loop: state of client {client!r} after round '
               f'{last_round[client]} (its last)', reference=True)


def _reference_round(process, state, values, ids, kept):
  """(state, metrics, per-client outputs or None) by the plain meaning."""
  if not process.has_client_state:
    result = reference.run_round(process, state, values)
  else:
    result = reference.run_round(process, state, values,
                                 [kept.get(i) for i in ids])
    kept.update(zip(ids, result[2]))
  return result[:2] + (result[-1] if process.has_client_outputs else None,)


def _local_round(form, state, values, ids, kept):
  """(state, metrics, per-client outputs or None) by the local loop."""
  if not form.has_client_state:
    result = canonical.run_round(form, state, values)
  else:
    result = canonical.run_round(form, state, values,
                                 [kept.get(i) for i in ids])
    kept.update(zip(ids, result[2]))
  return result[:2] + (result[-1] if form.has_client_outputs else None,)


def _compare_outputs(outputs, ids, expected, rtol, atol, where):
  """A round's outputs on Beam (client id -> value) against the
  reference's list, one per sampled client."""
  if list(outputs) != list(ids):
    raise AssertionError(f'{where}: per-client outputs of clients '
                         f'{list(outputs)}, the reference of {list(ids)}.')
  for client, value in zip(ids, expected):
    _compare(outputs[client], value, rtol, atol,
             f'{where}: outputs of client {client!r}', reference=True)


def _compare_metrics(beam_metrics, expected, rtol, atol, what):
  """The run's metrics (JSON: path -> value) against the reference's X."""
  expected_paths = list(_flatten_with_paths(expected))
  if len(beam_metrics) != len(expected_paths):
    raise AssertionError(
        f'{what}: Beam reports {len(beam_metrics)} metrics '
        f'({", ".join(sorted(beam_metrics))}), the reference '
        f'{len(expected_paths)} ({", ".join(p for p, _ in expected_paths)}).')
  # The runner writes metrics by '/'-joined keys (dicts sorted) in flat order.
  for (path, leaf), (_, value) in zip(expected_paths, beam_metrics.items()):
    _compare_leaf(np.asarray(value), np.asarray(leaf), rtol, atol,
                  f'{what}, tensor {path or "(the value)"}')


def _compare(actual, expected, rtol, atol, what, reference=False):
  """Compares two structures leaf by leaf; paths come from `expected`."""
  expected_paths = list(_flatten_with_paths(expected))
  actual_leaves = tf.nest.flatten(actual)
  if len(actual_leaves) != len(expected_paths):
    raise AssertionError(
        f'{what}: {len(actual_leaves)} tensors, but the '
        f'{"reference" if reference else "expected value"} has '
        f'{len(expected_paths)}.')
  for (path, leaf), value in zip(expected_paths, actual_leaves):
    _compare_leaf(np.asarray(value), np.asarray(leaf), rtol, atol,
                  f'{what}, tensor {path or "(the value)"}')


def _compare_leaf(actual, expected, rtol, atol, what):
  if actual.shape != expected.shape:
    raise AssertionError(f'{what}: shape {actual.shape}, the reference\'s '
                         f'{expected.shape}.')
  numeric = (np.issubdtype(expected.dtype, np.number) or
             expected.dtype == np.bool_)
  try:
    if not numeric or (rtol == 0 and atol == 0):
      np.testing.assert_array_equal(actual, expected)
    else:
      np.testing.assert_allclose(actual.astype(np.float64),
                                 expected.astype(np.float64), rtol=rtol,
                                 atol=atol)
  except AssertionError as e:
    detail = str(e).strip()
    raise AssertionError(f'{what} differs from the reference executor '
                         f'(rtol={rtol}, atol={atol}; ACTUAL is this run, '
                         f'DESIRED the reference):\n{detail}') from None


def _flatten_with_paths(structure, prefix=''):
  """`(path, leaf)` in `tf.nest.flatten` order; named tuples by field name."""
  if isinstance(structure, dict):
    for key in sorted(structure):
      yield from _flatten_with_paths(structure[key], f'{prefix}{key}/')
  elif isinstance(structure, tuple) and hasattr(structure, '_fields'):
    for key, item in zip(structure._fields, structure):
      yield from _flatten_with_paths(item, f'{prefix}{key}/')
  elif isinstance(structure, (list, tuple)):
    for index, item in enumerate(structure):
      yield from _flatten_with_paths(item, f'{prefix}{index}/')
  else:
    yield prefix.rstrip('/'), structure
