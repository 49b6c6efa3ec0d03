"""Rounds with every file on S3 (a real S3 server, moto's, on 127.0.0.1),
through Beam's S3 options: the same results as on local disk, in-process and
on Dask workers, secure sums bit for bit; a run killed with SIGKILL resumes
to the uninterrupted result; two drivers (processes) on one run directory on
S3 cannot both commit a round; a second commit of a round is refused on S3
as on local disk; a missing bucket is one clear error before any round.

The driver-process tests run on S3 only: the lock and the commit are one
mechanism over `canonical.io`, whose create-only writes are tested on both
storages (tests/canonical/io/test_storage.py), and their local-disk
runs (each two drivers importing TensorFlow) took a minute of the suite.
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
from beam_runner import engines
from beam_runner import testing
from beam_runner.worker_io import tensor_io
import canonical as cf
from canonical import io as storage
from example_processes import client_state_process
from example_processes import random_floats
from example_processes import secure_sums_process

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '../..'))
QUIET = lambda _: None


def _data():
  return {k: v * 3 for k, v in random_floats(8, 6).items()}


def _assert_same_runs(a, b, form):
  for x, y in zip(tf.nest.flatten(a.state), tf.nest.flatten(b.state)):
    np.testing.assert_array_equal(x, y)
  assert [o['metrics'] for o in a.outcomes] == [o['metrics']
                                               for o in b.outcomes]
  kept_a = beam_runner.RunDir(a.output_dir).client_state_paths()
  kept_b = beam_runner.RunDir(b.output_dir).client_state_paths()
  assert sorted(kept_a) == sorted(kept_b)
  for client in kept_a:
    for x, y in zip(
        tf.nest.flatten(tensor_io.read_tensors(kept_a[client],
                                               form.client_state_spec)),
        tf.nest.flatten(tensor_io.read_tensors(kept_b[client],
                                               form.client_state_spec))):
      np.testing.assert_array_equal(x, y)


@pytest.mark.slow
def test_rounds_with_every_file_on_s3_equal_local_disk(s3, tmp_path):
  form = cf.compile(client_state_process())
  data = _data()
  bucket = s3.bucket_url
  form_path = cf.save(form, f'{bucket}/form.pb')
  shards = beam_runner.write_client_data(f'{bucket}/clients', data)
  assert shards.client_ids() == sorted(data)
  result = beam_runner.run(form_path, shards.directory, 4, 3,
                           f'{bucket}/run', pipeline_options=s3.options(),
                           progress=QUIET)
  local = beam_runner.run(form, data, 4, 3, tmp_path / 'local',
                          progress=QUIET)
  _assert_same_runs(result, local, form)
  files = storage.list_files(f'{bucket}/run')
  assert 'run.json' in files and 'metrics.jsonl' in files
  assert [f for f in files if f.startswith('commits/')] == [
      f'commits/{r:06d}.json' for r in range(5)]
  logged = [json.loads(line) for line in storage.read_bytes(
      f'{bucket}/run/metrics.jsonl').decode().splitlines()]
  assert [o['round'] for o in logged] == [1, 2, 3, 4]
  board = tensorboard_log.read(f'{bucket}/run/tensorboard')
  assert [r for r, _ in board['clients/ok']] == [1, 2, 3, 4]
  # Resuming on S3 runs nothing more and reads the same state back.
  again = beam_runner.run(form_path, shards.directory, 4, 3, f'{bucket}/run',
                          pipeline_options=s3.options(), progress=QUIET)
  assert again.rounds == 4 and again.outcomes == result.outcomes


@pytest.mark.slow
def test_dask_workers_read_and_write_s3_with_the_drivers_options(s3,
                                                                tmp_path):
  form = cf.compile(client_state_process())
  data = _data()
  bucket = s3.bucket_url
  shards = beam_runner.write_client_data(f'{bucket}/clients', data)
  cluster = engines.start_local_cluster(2, lifetime='10 minutes')
  try:
    options = dict(s3.options(), runner='DaskRunner',
                   dask_client_address=cluster.scheduler_address)
    result = beam_runner.run(form, shards.directory, 3, 4, f'{bucket}/run',
                             pipeline_options=options, progress=QUIET)
  finally:
    cluster.close()
  # Workers loaded the form the driver saved on S3 for them.
  assert storage.exists(f'{bucket}/run/form.pb')
  assert all(len(o['clients_per_worker']) == 2 for o in result.outcomes)
  local = beam_runner.run(form, data, 3, 4, tmp_path / 'local',
                          progress=QUIET)
  for x, y in zip(tf.nest.flatten(result.state),
                  tf.nest.flatten(local.state)):
    np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_secure_rounds_on_s3_are_bit_exact(s3):
  """The masking protocol with its files on S3: each client's secret made
  create-only, a batch's kept updates, inboxes and held shares; the sums
  exactly the reference's, and of the protocol's files only the clients'
  secrets outlive a commit."""
  rng = np.random.default_rng(5)
  data = {f'c{i}': rng.integers(0, 16, [3]).astype(np.int32)
          for i in range(9)}
  run = f'{s3.bucket_url}/run'
  testing.assert_rounds_match(secure_sums_process(), data, rounds=2,
                              clients_per_round=6, rtol=0, atol=0,
                              clients_per_element=3, output_dir=run,
                              pipeline_options=s3.options())
  rounds = [beam_runner.RunDir(run).clients(r) for r in (1, 2)]
  sampled = sorted(set(rounds[0]) | set(rounds[1]))
  files = storage.list_files(run)
  secrets = sorted(f for f in files if f.startswith('client_secrets/'))
  assert [f for f in secrets if f.endswith('.key')] == [
      f'client_secrets/{c}.key' for c in sampled]
  # Enrolled in the trust store; each served round and signed list kept.
  assert [f for f in secrets if '/identities/' in f] == [
      f'client_secrets/identities/{c}.pub' for c in sampled]
  for kind in ('served', 'signed'):
    assert len([f for f in secrets if f'/{kind}/' in f]) == sum(
        map(len, rounds))
  assert not [f for f in files if '/secure/' in f]


def test_a_missing_bucket_is_one_error_before_any_round(s3):
  form = cf.compile(client_state_process())
  with pytest.raises(beam_runner.RunDirError,
                     match="the bucket 'no-such-bucket' does not "
                     'exist') as error:
    beam_runner.run(form, _data(), 1, 2, 's3://no-such-bucket/run',
                    pipeline_options=s3.options())
  assert '\n' not in str(error.value)


def test_a_path_scheme_without_a_filesystem_is_one_error():
  form = cf.compile(client_state_process())
  with pytest.raises(beam_runner.RunDirError, match="scheme 'nosuch'"):
    beam_runner.run(form, _data(), 1, 2, 'nosuch://bucket/run')


# ----------------------------------------------------------------------------
# Driver processes: killed and resumed; two at once on one directory

_CHILD = textwrap.dedent('''
    import json, os, sys, time
    import beam_runner
    from beam_runner.pipeline import round as round_pipeline

    form, clients, out, rounds, slow_round, seconds, options, lock, hold = \
        sys.argv[1:10]
    work = round_pipeline.WorkFn._work
    if lock == 'bypassed':  # Two drivers that each believe they hold it.
      from beam_runner.driver import run_lock
      run_lock.RunLock.acquire = lambda self: self
      run_lock.RunLock.check = lambda self: None
      run_lock.RunLock.release = lambda self: None

    def slow_work(self, task, data, c):
      if int(slow_round) in (0, self._attempt.round):
        time.sleep(float(seconds))
      deadline = time.monotonic() + 120
      while hold and not os.path.exists(hold) and time.monotonic() < deadline:
        time.sleep(0.05)  # Held until the test lets go.
      return work(self, task, data, c)

    round_pipeline.WorkFn._work = slow_work
    try:
      beam_runner.run(form, clients, int(rounds), 3, out,
                      pipeline_options=json.loads(options), seed=5,
                      rounds_per_pipeline=1,
                      progress=lambda line: print(line, flush=True))
    except beam_runner.CommitConflict as e:
      print('CONFLICT', e, flush=True)
      sys.exit(3)
    except beam_runner.RunLocked as e:
      print('LOCKED', e, flush=True)
      sys.exit(4)
''')


def _driver(tmp_path, form_path, clients, out, rounds, options, slow_round=0,
            seconds=0.3, lock='taken', hold=''):
  """A driver in its own process; with `hold` (a path), its clients wait
  until that file exists."""
  script = tmp_path / 'driver.py'
  script.write_text(_CHILD)
  return subprocess.Popen(
      [sys.executable, str(script), form_path, clients, out, str(rounds),
       str(slow_round), str(seconds), json.dumps(options), lock, str(hold)],
      cwd=ROOT,
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=ROOT))


def _setup(where, tmp_path):
  """(form path, shards, run directory, options) on local disk or S3."""
  form = cf.compile(client_state_process())
  if where == 'local':
    base, options = str(tmp_path), {}
  else:
    s3 = where
    base, options = s3.bucket_url, s3.options()
  form_path = cf.save(form, storage.join(base, 'form.pb'))
  shards = beam_runner.write_client_data(storage.join(base, 'clients'),
                                         _data())
  return form, form_path, shards.directory, storage.join(base, 'run'), options


@pytest.mark.slow
def test_a_run_on_s3_killed_mid_round_resumes_to_the_uninterrupted_result(
    s3, tmp_path):
  form, form_path, clients, out, options = _setup(s3, tmp_path)
  child = _driver(tmp_path, form_path, clients, out, 4, options,
                  slow_round=3, seconds=0.5)
  deadline = time.monotonic() + 60
  try:
    while not any('/client_states/' in f for f in storage.list_files(
        storage.join(out, 'rounds', '000003'))):
      assert child.poll() is None, child.stdout.read()
      assert time.monotonic() < deadline, 'round 3 never started'
      time.sleep(0.05)
  finally:
    child.send_signal(signal.SIGKILL)
    child.wait()
  assert child.returncode == -signal.SIGKILL
  run = beam_runner.RunDir(out)
  assert run.committed_rounds() == [0, 1, 2]
  lines = []
  resumed = beam_runner.run(form_path, clients, 4, 3, out, seed=5,
                            pipeline_options=options, progress=lines.append)
  assert [line.split(':')[0] for line in lines] == ['round 3/4', 'round 4/4']
  whole = beam_runner.run(form, clients, 4, 3, tmp_path / 'whole', seed=5,
                          progress=QUIET)
  _assert_same_runs(resumed, whole, form)
  # The dead attempt is gone; each client keeps one state object.
  assert storage.list_names(storage.join(out, 'rounds', '000003')) == [
      beam_runner.RunDir(out).attempt(3).id]
  states = [f for f in storage.list_files(storage.join(out, 'rounds'))
            if '/client_states/' in f]
  assert len(states) == len(beam_runner.RunDir(out).client_state_paths())


@pytest.fixture(params=['local', 's3'])
def place(request):
  return 'local' if request.param == 'local' else request.getfixturevalue(
      's3')


@pytest.mark.slow
def test_a_second_driver_stops_at_the_lock_and_touches_nothing(s3, tmp_path):
  form, form_path, clients, out, options = _setup(s3, tmp_path)
  # The first driver holds the lock until the second has tried it: however
  # slowly the second starts, the first cannot finish before.
  hold = tmp_path / 'second_is_done'
  first = _driver(tmp_path, form_path, clients, out, 4, options, hold=hold)
  lock = storage.join(out, 'lock.json')
  deadline = time.monotonic() + 120
  while not storage.exists(lock):
    assert first.poll() is None, first.stdout.read()
    assert time.monotonic() < deadline, 'the first driver never took it'
    time.sleep(0.05)
  try:
    second = _driver(tmp_path, form_path, clients, out, 4, options)
    second_output = second.communicate(timeout=240)[0]
  finally:
    hold.touch()
  first_output = first.communicate(timeout=240)[0]
  assert (first.returncode, second.returncode) == (0, 4), (first_output,
                                                           second_output)
  assert f'is in use by another run (process {first.pid} on' in \
      second_output
  assert not storage.exists(lock)  # Released by the first at its end.
  whole = beam_runner.run(form, clients, 4, 3, tmp_path / 'whole', seed=5,
                          progress=QUIET)
  resumed = beam_runner.run(form_path, clients, 4, 3, out, seed=5,
                            pipeline_options=options, progress=QUIET)
  _assert_same_runs(resumed, whole, form)


@pytest.mark.slow
def test_two_drivers_on_one_run_directory_cannot_both_commit(s3, tmp_path):
  """With the lock bypassed (as when a paused driver's lease is taken
  over), commits alone keep the run whole."""
  form, form_path, clients, out, options = _setup(s3, tmp_path)
  beam_runner.run(form_path, clients, 0, 3, out, seed=5,  # Round 0 only:
                  pipeline_options=options, progress=QUIET)  # race for 1+.
  hold = tmp_path / 'both-in-round-1'
  drivers = [_driver(tmp_path, form_path, clients, out, 4, options,
                     lock='bypassed', hold=hold) for _ in range(2)]
  # Both race for round 1: neither starts its clients before both have an
  # attempt there (a driver that started late would find all rounds done).
  deadline = time.monotonic() + 120
  while len(storage.list_names(storage.join(out, 'rounds', '000001'))) < 2:
    for driver in drivers:
      assert driver.poll() is None, driver.stdout.read()
    assert time.monotonic() < deadline, 'the drivers never both reached round 1'
    time.sleep(0.05)
  hold.write_text('go')
  outputs = []
  for driver in drivers:
    outputs.append(driver.communicate(timeout=240)[0])
  codes = sorted(d.returncode for d in drivers)
  assert codes == [0, 3], outputs  # Exactly one stopped, with the error.
  loser = outputs[[d.returncode for d in drivers].index(3)]
  assert 'was committed by another driver' in loser
  assert 'two drivers must not run in one output directory' in loser
  run = beam_runner.RunDir(out)
  assert run.committed_rounds() == [0, 1, 2, 3, 4]
  whole = beam_runner.run(form, clients, 4, 3, tmp_path / 'whole', seed=5,
                          progress=QUIET)
  resumed = beam_runner.run(form_path, clients, 4, 3, out, seed=5,
                            pipeline_options=options, progress=QUIET)
  _assert_same_runs(resumed, whole, form)
  # Whoever lost left no attempt behind: one per round, the committed one.
  for number in range(5):
    assert storage.list_names(storage.join(out, 'rounds',
                                           f'{number:06d}')) == [
                                               run.attempt(number).id]


def test_a_second_commit_of_a_round_is_refused(place, tmp_path):
  base = str(tmp_path) if place == 'local' else place.bucket_url
  run = beam_runner.RunDir(storage.join(base, 'run'))
  run.claim({'what': 'test'})
  first, second = run.new_attempt(1), run.new_attempt(1)
  for attempt in (first, second):
    storage.write_bytes(attempt.outcome_path, b'{}')
    storage.write_bytes(attempt.clients_path, b'{}')
  run.commit(first)
  with pytest.raises(beam_runner.CommitConflict,
                     match=f'Round 1 .* another driver \\(attempt '
                     f'{first.id}\\)'):
    run.commit(second)
  assert beam_runner.RunDir(storage.join(base, 'run')).attempt(1).id == \
      first.id
  # The losing attempt's files are not the round's: the commit names one.
  assert storage.list_names(storage.join(base, 'run', 'rounds', '000001')) \
      == [first.id]
