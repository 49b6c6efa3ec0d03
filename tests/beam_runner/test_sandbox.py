"""Untrusted forms run contained (`run(..., isolation=Isolation(...))`): a
client whose work hangs, runs out of memory or kills its process is dropped
with that reason; the driver lives on, and a sandboxed run gives the same
results as a plain one."""

import os
import signal
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

import beam_runner
from beam_runner.worker_io import sandbox
import canonical as cf
from example_processes import summed_process
from example_processes import weighted_data
from example_processes import weighted_mean_process
import main_job_flags

QUIET = lambda line: None


def _misbehave(x):
  """A client's value says what its work does: x % 4 == 0 or 1 returns x, 2
  loops forever, 3 allocates x * 1.2 GB."""

  def loop_forever():
    return tf.cast(tf.while_loop(lambda i: x > -1e30, lambda i: i + 1,
                                 [tf.constant(0, tf.int64)])[0], tf.float32)

  def allocate():
    return 0.0 * tf.reduce_sum(tf.fill([tf.cast(x * 3e8, tf.int64)], 1.0))

  return tf.switch_case(tf.cast(x, tf.int32) % 4,
                        [lambda: x, lambda: x, loop_forever, allocate])


@pytest.fixture(scope='module')
def misbehaving(tmp_path_factory):
  directory = tmp_path_factory.mktemp('misbehaving')
  clients = beam_runner.write_client_data(directory / 'clients', {
      'fine': np.float32(4.0), 'also fine': np.float32(8.0),
      'loops': np.float32(2.0), 'hogs': np.float32(3.0)})
  return cf.compile(summed_process(_misbehave)), clients.directory


@pytest.mark.slow
def test_hanging_and_hogging_clients_are_dropped_and_the_run_goes_on(
    misbehaving, tmp_path):
  form, clients = misbehaving
  isolation = beam_runner.Isolation(seconds=5.0, memory_mb=1500)
  start = time.monotonic()
  result = beam_runner.run(form, clients, 1, 4, tmp_path / 'run',
                           progress=QUIET, isolation=isolation)
  outcome = result.outcomes[0]
  assert outcome['dropped_reasons'] == {'work out of memory': 1,
                                        'work timed out': 1}
  assert 'more than 5 s' in outcome['dropped_clients']['loops']
  assert 'more than 1500 MB' in outcome['dropped_clients']['hogs']
  assert outcome['clients_ok'] == 2 and outcome['metrics'] == {'value': 12.0}
  assert time.monotonic() - start < 120


@pytest.mark.slow
def test_a_sandbox_killed_by_a_signal_drops_its_client_only(misbehaving,
                                                            tmp_path):
  """As when TensorFlow aborts: the process ends by a signal mid-work."""
  form, clients = misbehaving
  path = cf.save(form, tmp_path / 'form.pb')
  box = sandbox.Sandbox(str(path), beam_runner.Isolation(seconds=60.0))
  source = beam_runner.TFRecordClientData(clients)
  work = form.work

  def call(client):
    data = sandbox.ClientDataRef(source, client)
    return box.call('work', (data, ()), work.output_spec)

  assert float(call('fine')[0][0]) == 4.0
  child = box._process  # pylint: disable=protected-access
  threading.Timer(2.0, os.kill, (child.pid, signal.SIGABRT)).start()
  with pytest.raises(sandbox.SandboxFailure,
                     match=r'work crashed: work ended its process \(signal '
                     r'SIGABRT\)') as failure:
    call('loops')
  assert failure.value.reason == sandbox.CRASHED
  assert float(call('also fine')[0][0]) == 8.0  # A fresh sandbox.
  box.close()


@pytest.mark.slow
def test_a_sandboxed_run_equals_a_plain_one(tmp_path):
  form = cf.compile(weighted_mean_process())
  clients = beam_runner.write_client_data(tmp_path / 'clients',
                                          weighted_data(3, 6)).directory
  plain = beam_runner.run(form, clients, 2, 4, tmp_path / 'plain',
                          progress=QUIET)
  boxed = beam_runner.run(form, clients, 2, 4, tmp_path / 'boxed',
                          progress=QUIET, isolation=beam_runner.Isolation())
  for a, b in zip(tf.nest.flatten(plain.state), tf.nest.flatten(boxed.state)):
    np.testing.assert_array_equal(a, b)
  assert [o['metrics'] for o in plain.outcomes] == [
      o['metrics'] for o in boxed.outcomes]


@pytest.mark.slow
@pytest.mark.parametrize('name', ['plain', 'top_k_error_feedback', 'secure8'])
def test_the_main_jobs_forms_run_isolated_as_they_run_plain(tmp_path, name):
  """The project's own forms: TFF's state (types the loader makes, which
  do not pickle), client state, secure sums. (All twelve of
  tests/data/main_job_forms_tff ran alike when this test was written.)"""
  data = {f'c{i}': d for i, d in enumerate(main_job_flags.clients())}
  clients = beam_runner.write_client_data(tmp_path / 'clients',
                                          data).directory
  path = main_job_flags.form_path(name)
  plain = beam_runner.run(path, clients, 1, 3, tmp_path / 'plain',
                          progress=QUIET)
  boxed = beam_runner.run(path, clients, 1, 3, tmp_path / 'boxed',
                          progress=QUIET, isolation=beam_runner.Isolation())
  assert boxed.outcomes[0]['clients_ok'] == 3
  for a, b in zip(tf.nest.flatten(plain.state), tf.nest.flatten(boxed.state)):
    np.testing.assert_array_equal(a, b)


def test_the_trusted_path_starts_no_sandbox(monkeypatch, tmp_path):
  started = []
  monkeypatch.setattr(sandbox.Sandbox, '_started',
                      lambda self: started.append(self))
  form = cf.compile(weighted_mean_process())
  beam_runner.run(form, weighted_data(3, 4), 1, 2, tmp_path / 'run',
                  progress=QUIET)
  assert not started


def test_isolation_needs_client_data_on_files(tmp_path):
  form = cf.compile(weighted_mean_process())
  with pytest.raises(beam_runner.ClientDataError, match='without isolation'):
    beam_runner.run(form, weighted_data(3, 4), 1, 2, tmp_path / 'run',
                    progress=QUIET, isolation=beam_runner.Isolation())
