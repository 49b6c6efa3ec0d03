"""beam_runner: faults and bad input lose nothing.

Clients whose data cannot be read, or whose update holds a NaN, are dropped
and counted; the rest of the round equals the local loop over the clients
that succeeded. Too few successes fail the round with nothing committed. A
run killed with SIGKILL mid-round resumes to the state of an uninterrupted
run. Each round's outcome shows in metrics.jsonl, TensorBoard event files and
the progress line.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import tensorflow as tf

import beam_runner
from beam_runner.driver import tensorboard_log
from beam_runner.worker_io import tensor_io
import canonical as cf
from canonical import io as storage
from tensor_asserts import assert_same

F = tf.TensorSpec([], tf.float32)
I = tf.TensorSpec([], tf.int32)
F2 = tf.TensorSpec([2], tf.float32)
BATCH = tf.TensorSpec([None, 2], tf.float32)
QUIET = lambda _: None
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '../..'))


def _counting_process():
  """Server state: a running mean of client data; each client counts the
  rounds it took part in (client state)."""

  @cf.tf_computation
  def fresh_client():
    return tf.constant(0)

  @cf.tf_computation(F2, I, F2)
  def client_step(data, count, center):
    return data - center, count + 1

  @cf.tf_computation(F2, F2, F)
  def step(state, total, clients):
    return state + total / clients

  @cf.federated_computation(cf.server(F2), cf.clients(F2), cf.clients(I))
  def next_fn(state, data, count):
    delta, new_count = cf.federated_map(
        client_step, (data, count, cf.federated_broadcast(state)))
    clients = cf.federated_sum(cf.federated_map(
        cf.tf_computation(F2)(lambda _: tf.constant(1.0)), data))
    total = cf.federated_sum(delta)
    return cf.federated_map(step, (state, total, clients)), clients, new_count

  return cf.IterativeProcess(cf.tf_computation(lambda: tf.zeros([2])),
                             next_fn, client_state_initializer=fresh_client)


@pytest.mark.slow
def test_a_client_whose_update_is_nan_is_dropped_and_shown_everywhere(
    tmp_path):
  form = cf.compile(_counting_process())
  data = {f'c{i}': np.array([i, -i], np.float32) for i in range(4)}
  data['c2'] = np.array([np.nan, 1.0], np.float32)
  data['c3'] = np.array([np.inf, 1.0], np.float32)
  lines = []
  result = beam_runner.run(form, data, 2, 4, tmp_path / 'run',
                           progress=lines.append)
  outcome = result.outcomes[0]
  assert outcome['clients_ok'] == 2 and outcome['clients_dropped'] == 2
  assert outcome['dropped_reasons'] == {'non-finite update': 2}
  assert sorted(outcome['dropped_clients']) == ['c2', 'c3']
  assert 'NaN or Inf' in outcome['dropped_clients']['c2']
  # Each round equals the local loop over the clients that succeeded.
  state, counts = form.initialize(), [None, None]
  for number in (1, 2):
    state, _, counts = cf.run_round(form, state, [data['c0'], data['c1']],
                                    counts)
    assert result.outcomes[number - 1]['metrics'] == {'value': 2.0}
  assert_same(result.state, state, exact=False, what='final state')
  # Dropped clients keep no state; the others counted both rounds.
  kept = beam_runner.RunDir(tmp_path / 'run').client_state_paths()
  assert sorted(kept) == ['c0', 'c1']
  assert int(tensor_io.read_tensors(kept['c0'], form.client_state_spec)) == 2
  assert beam_runner.RunDir(tmp_path / 'run').dropped(1) == ['c2', 'c3']
  # The progress line, metrics.jsonl and TensorBoard all show the round.
  assert len(lines) == 2
  assert lines[0].startswith('round 1/2: clients ok 2, dropped 2 '
                             '(2 non-finite update); value=2; bits broadcast '
                             f'{4 * 64}, aggregated {2 * 96}; ')
  assert all(f'{stage} ' in lines[0] for stage in
             ('prepare', 'work_aggregate', 'update', 'commit'))
  with open(tmp_path / 'run' / 'metrics.jsonl') as f:
    logged = [json.loads(line) for line in f]
  assert logged == result.outcomes
  stages = logged[0]['stage_seconds']
  assert sorted(stages) == ['commit', 'prepare', 'update', 'work_aggregate']
  assert all(v >= 0 for v in stages.values()) and stages['work_aggregate'] > 0
  assert sum(stages.values()) <= logged[0]['seconds'] + 1e-3
  events = tensorboard_log.read(tmp_path / 'run' / 'tensorboard')
  assert events['clients/ok'] == [(1, 2.0), (2, 2.0)]
  assert events['clients/dropped'] == [(1, 2.0), (2, 2.0)]
  assert events['metrics/value'] == [(1, 2.0), (2, 2.0)]
  assert events['bits/broadcast'] == [(1, 256.0), (2, 256.0)]
  assert events['bits/aggregated'] == [(1, 192.0), (2, 192.0)]
  assert [r for r, _ in events['seconds/work_aggregate']] == [1, 2]


@pytest.mark.slow
def test_corrupt_shards_are_dropped_as_unreadable(tmp_path):

  @cf.tf_computation(tf.data.DatasetSpec(BATCH))
  def local_sum(dataset):
    return dataset.reduce(tf.zeros([2]), lambda t, b: t + tf.reduce_sum(b, 0))

  @cf.federated_computation(cf.server(F2), cf.clients(
      tf.data.DatasetSpec(BATCH)))
  def next_fn(state, data):
    total = cf.federated_sum(cf.federated_map(local_sum, data))
    return cf.federated_map(cf.tf_computation(F2, F2)(lambda s, t: s + t),
                            (state, total)), total

  form = cf.compile(cf.IterativeProcess(
      cf.tf_computation(lambda: tf.zeros([2])), next_fn))
  rng = np.random.default_rng(1)
  data = {f'c{i}': tf.data.Dataset.from_tensor_slices(
      rng.normal(size=[5, 2]).astype(np.float32)).batch(2) for i in range(5)}
  shards = beam_runner.write_client_data(tmp_path / 'shards', data)
  with open(shards.path('c1'), 'r+b') as f:  # A flipped byte: bad checksum.
    f.seek(20)
    byte = f.read(1)
    f.seek(20)
    f.write(bytes([byte[0] ^ 0xFF]))
  with open(shards.path('c3'), 'r+b') as f:  # Cut short.
    f.truncate(os.path.getsize(shards.path('c3')) - 7)
  result = beam_runner.run(form, shards.directory, 1, 5, tmp_path / 'run',
                           progress=QUIET)
  outcome = result.outcomes[0]
  assert outcome['clients_ok'] == 3
  assert outcome['dropped_reasons'] == {'unreadable data': 2}
  assert sorted(outcome['dropped_clients']) == ['c1', 'c3']
  assert 'DataLoss' in outcome['dropped_clients']['c1']
  expected, _ = cf.run_round(form, form.initialize(),
                             [data['c0'], data['c2'], data['c4']])
  assert_same(result.state, expected, exact=False)


@pytest.mark.slow
def test_too_few_clients_succeeding_fails_the_round_and_keeps_the_state(
    tmp_path):
  form = cf.compile(_counting_process())
  data = {f'c{i}': np.array([i, 1], np.float32) for i in range(4)}
  data['c1'] = np.array([np.nan, 0], np.float32)
  out = tmp_path / 'run'
  first = beam_runner.run(form, data, 1, 4, out, min_clients=3,
                          progress=QUIET)
  run = beam_runner.RunDir(out)
  with open(run.state_path(1), 'rb') as f:
    state_bytes = f.read()
  states_before = run.client_state_paths()
  with pytest.raises(beam_runner.RoundError,
                     match=r'Round 2: 3 of 4 clients succeeded, fewer than '
                     r"min_clients=4.*1 non-finite update.*client 'c1'"):
    beam_runner.run(form, data, 2, 4, out, min_clients=4, progress=QUIET)
  run = beam_runner.RunDir(out)
  assert run.committed_rounds() == [0, 1]
  with open(run.state_path(1), 'rb') as f:
    assert f.read() == state_bytes
  assert not (out / 'rounds' / '000002').exists() or not os.listdir(
      out / 'rounds' / '000002')  # Its attempt, client states and all.
  assert run.client_state_paths() == states_before
  with open(out / 'metrics.jsonl') as f:
    assert [json.loads(line)['round'] for line in f] == [1]
  again = beam_runner.run(form, data, 1, 4, out, progress=QUIET)
  assert_same(again.state, first.state, exact=False)


# ----------------------------------------------------------------------------
# SIGKILL mid-round, then resume

_CHILD = textwrap.dedent('''
    import sys, time
    import beam_runner
    from beam_runner.pipeline import round as round_pipeline

    slow_round = int(sys.argv[4])
    work = round_pipeline.WorkFn._work

    def slow_work(self, task, data, c):
      if self._attempt.round == slow_round:
        time.sleep(0.4)  # Slow enough to be killed mid-round.
      return work(self, task, data, c)

    round_pipeline.WorkFn._work = slow_work
    beam_runner.run(sys.argv[1], sys.argv[2], 4, 3, sys.argv[3], seed=5,
                    progress=lambda line: print(line, flush=True))
''')


def _error_feedback_process():
  """Client state that matters: each client sends data + residual rounded to
  an integer and keeps the rest."""

  @cf.tf_computation
  def fresh_client():
    return tf.zeros([2])

  @cf.tf_computation(F2, F2, F)
  def client_step(data, residual, scale):
    value = data * scale + residual
    sent = tf.round(value)
    return tf.cast(sent, tf.int32), value - sent

  @cf.tf_computation(tf.TensorSpec([2], tf.int32), tf.TensorSpec([2],
                                                                 tf.int32))
  def add(state, total):
    return state + total

  @cf.federated_computation(cf.server(tf.TensorSpec([2], tf.int32)),
                            cf.clients(F2), cf.clients(F2))
  def next_fn(state, data, residual):
    scale = cf.federated_broadcast(cf.federated_value(
        tf.constant(1.5), cf.SERVER))
    sent, new_residual = cf.federated_map(client_step,
                                          (data, residual, scale))
    total = cf.federated_sum(sent)
    return cf.federated_map(add, (state, total)), total, new_residual

  return cf.IterativeProcess(
      cf.tf_computation(lambda: tf.zeros([2], tf.int32)), next_fn,
      client_state_initializer=fresh_client)


def _wait_for(predicate, child, timeout, what):
  deadline = time.monotonic() + timeout
  while not predicate():
    if child.poll() is not None:
      raise AssertionError(f'The run ended before {what}: '
                           f'{child.stdout.read()}')
    if time.monotonic() > deadline:
      child.kill()
      raise AssertionError(f'Timed out waiting for {what}.')
    time.sleep(0.05)


@pytest.mark.slow
def test_a_run_killed_mid_round_resumes_to_the_uninterrupted_result(
    tmp_path):
  form = cf.compile(_error_feedback_process())
  form_path = cf.save(form, str(tmp_path / 'form.pb'))
  rng = np.random.default_rng(4)
  data = {f'c{i}': (rng.normal(size=[2]) * 3).astype(np.float32)
          for i in range(5)}
  shards = beam_runner.write_client_data(tmp_path / 'shards', data)
  out = tmp_path / 'killed'
  script = tmp_path / 'child.py'
  script.write_text(_CHILD)
  child = subprocess.Popen(
      [sys.executable, str(script), form_path, shards.directory, str(out),
       '3'], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
      text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2',
                          PYTHONPATH=ROOT))

  def round_3_wrote_a_client_state():
    return any('/client_states/' in f for f in storage.list_files(
        out / 'rounds' / '000003'))

  try:
    # Killed once round 3's first worker wrote a client state.
    _wait_for(round_3_wrote_a_client_state, child, 45, 'round 3 started work')
  finally:
    child.send_signal(signal.SIGKILL)
    child.wait()
  assert child.returncode == -signal.SIGKILL
  committed = beam_runner.RunDir(out).committed_rounds()
  assert 3 not in committed and committed[:2] == [0, 1]
  assert len(os.listdir(out / 'rounds' / '000003')) == 1  # A dead attempt.
  lines = []
  resumed = beam_runner.run(form_path, shards.directory, 4, 3, out, seed=5,
                            progress=lines.append)
  assert [line.split(':')[0] for line in lines] == [
      f'round {r}/4' for r in range(committed[-1] + 1, 5)]
  whole = beam_runner.run(form_path, data, 4, 3, tmp_path / 'whole', seed=5,
                          progress=QUIET)
  np.testing.assert_array_equal(resumed.state, whole.state)
  for a, b in zip(resumed.outcomes, whole.outcomes, strict=True):
    assert a['metrics'] == b['metrics'] and a['clients_ok'] == b['clients_ok']
  run = beam_runner.RunDir(out)
  kept = run.client_state_paths()
  whole_kept = beam_runner.RunDir(tmp_path / 'whole').client_state_paths()
  assert sorted(kept) == sorted(whole_kept)
  for client in kept:
    np.testing.assert_array_equal(
        tensor_io.read_tensors(kept[client], form.client_state_spec),
        tensor_io.read_tensors(whole_kept[client], form.client_state_spec))
  # Nothing of the dead attempt is left; one state file per client.
  assert os.listdir(out / 'rounds' / '000003') == [run.attempt(3).id]
  state_files = [f for f in storage.list_files(out / 'rounds')
                 if '/client_states/' in f]
  assert len(state_files) == len(kept)
  events = tensorboard_log.read(out / 'tensorboard')
  assert [r for r, _ in events['clients/ok']] == [1, 2, 3, 4]
  with open(out / 'metrics.jsonl') as f:
    assert [json.loads(line)['round'] for line in f] == [1, 2, 3, 4]
