"""Run directories: one writer at a time, every committed file checked on
resume, the run bound to the whole form, client ids that never collide,
leftovers cleaned. Each damage is tried, and must give one error naming the
file, with the directory left as it was."""

import json
import os
import socket
import subprocess
import sys
import time
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf

import beam_runner
from beam_runner.driver import run_lock
from beam_runner.worker_io import client_data
import canonical as cf
from canonical import io as storage
from example_processes import client_state_process
from example_processes import weighted_data
from example_processes import weighted_mean_process

QUIET = lambda line: None


def _run(form, data, rounds, out, **kwargs):
  return beam_runner.run(form, data, rounds, 3, out, seed=1, progress=QUIET,
                         **kwargs)


@pytest.fixture(scope='module')
def form():
  return cf.compile(weighted_mean_process())


@pytest.fixture(scope='module')
def data():
  return weighted_data(0, 5)


def _snapshot(directory):
  """Every file under `directory` with its bytes."""
  files = {}
  for root, _, names in os.walk(directory):
    for name in names:
      path = os.path.join(root, name)
      with open(path, 'rb') as f:
        files[os.path.relpath(path, directory)] = f.read()
  return files


def _flip_bit(path, position):
  with open(path, 'r+b') as f:
    f.seek(position)
    byte = f.read(1)[0]
    f.seek(position)
    f.write(bytes([byte ^ 0x10]))


# ---------------------------------------------------------------------------
# Damage: one error naming the file; nothing changed.


def test_a_flipped_bit_in_the_committed_state_is_named(form, data, tmp_path):
  out = tmp_path / 'run'
  _run(form, data, 2, out)
  path = beam_runner.RunDir(out).state_path(2)
  for position in (20, os.path.getsize(path) - 10):
    _flip_bit(path, position)
    before = _snapshot(out)
    with pytest.raises(beam_runner.RunDirError,
                       match=f'{path} is damaged: the file is damaged or '
                       r'truncated .* start a new output directory'):
      _run(form, data, 3, out)
    assert _snapshot(out) == before
    _flip_bit(path, position)  # Repaired: it resumes.
  assert _run(form, data, 3, out).rounds == 3


def test_a_truncated_state_is_named(form, data, tmp_path):
  out = tmp_path / 'run'
  _run(form, data, 1, out)
  path = beam_runner.RunDir(out).state_path(1)
  with open(path, 'r+b') as f:
    f.truncate(os.path.getsize(path) // 2)
  with pytest.raises(beam_runner.RunDirError, match=f'{path} is damaged'):
    _run(form, data, 2, out)


def test_an_edited_outcome_or_client_list_is_named(form, data, tmp_path):
  out = tmp_path / 'run'
  _run(form, data, 2, out)
  attempt = beam_runner.RunDir(out).attempt(1)
  for path in (attempt.outcome_path, attempt.clients_path):
    with open(path, 'rb') as f:
      original = f.read()
    with open(path, 'wb') as f:
      f.write(original.replace(b'1', b'2', 1))
    with pytest.raises(beam_runner.RunDirError,
                       match=f'{path} is damaged: its SHA-256 differs from '
                       'the one committed with round 1'):
      _run(form, data, 3, out)
    with open(path, 'wb') as f:
      f.write(original)
  assert _run(form, data, 3, out).rounds == 3


def test_a_damaged_commit_record_is_named(form, data, tmp_path):
  out = tmp_path / 'run'
  _run(form, data, 1, out)
  marker = out / 'commits' / '000001.json'
  marker.write_text('{"attempt": ')
  with pytest.raises(beam_runner.RunDirError,
                     match=f'{marker} is damaged: not a commit record'):
    _run(form, data, 2, out)


@pytest.mark.slow
def test_a_lost_commit_marker_is_restored_with_a_line_and_nothing_lost(
    tmp_path):
  """Deleting a middle round's marker by hand once made the resume delete
  that round's attempt as a leftover, with its clients' states, silently."""
  form = cf.compile(client_state_process())
  clients = {f'c{i}': np.float32([i / 3, 1.0]) for i in range(8)}
  run = lambda out, rounds, progress=QUIET: beam_runner.run(
      form, clients, rounds, 3, out, seed=2, progress=progress)
  out = tmp_path / 'run'
  run(out, 3)
  states = beam_runner.RunDir(out).client_state_paths()
  from_round_2 = [c for c, p in states.items() if '/000002/' in p]
  assert from_round_2  # The states at stake.
  (out / 'commits' / '000002.json').unlink()
  lines = []
  result = run(out, 4, lines.append)
  restored = [line for line in lines if 'was missing' in line]
  assert len(restored) == 1 and 'commits/000002.json was missing, though ' \
      'round 3 is committed: restored it' in restored[0], lines
  intact = run(tmp_path / 'intact', 4)
  kept, expected = (beam_runner.RunDir(d).client_state_paths()
                    for d in (out, tmp_path / 'intact'))
  assert sorted(kept) == sorted(expected)
  read = lambda path: beam_runner.tensor_io.read_tensors(
      path, form.client_state_spec)
  for client in expected:
    for a, b in zip(tf.nest.flatten(read(kept[client])),
                    tf.nest.flatten(read(expected[client]))):
      np.testing.assert_array_equal(a, b)
  for a, b in zip(tf.nest.flatten(result.state),
                  tf.nest.flatten(intact.state)):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize('found', ['no attempt', '2 attempts'])
def test_a_lost_marker_that_cannot_be_restored_is_refused(form, data, tmp_path,
                                                          found):
  out = tmp_path / 'run'
  _run(form, data, 3, out)
  (out / 'commits' / '000002.json').unlink()
  round_dir = out / 'rounds' / '000002'
  assert len(os.listdir(round_dir)) == 1
  if found == 'no attempt':
    for root, dirs, names in os.walk(round_dir, topdown=False):
      for name in names:
        os.unlink(os.path.join(root, name))
      for name in dirs:
        os.rmdir(os.path.join(root, name))
  else:
    os.mkdir(round_dir / 'aaaaaaaaaaaa')
    (round_dir / 'aaaaaaaaaaaa' / 'state.tensors').write_bytes(b'other')
  before = _snapshot(out)
  with pytest.raises(beam_runner.RunDirError,
                     match=f'000002.json is missing, though round 3 is '
                     f'committed, and .*000002 holds {found}.*changed '
                     'nothing'):
    _run(form, data, 4, out)
  assert _snapshot(out) == before


def test_a_damaged_client_state_drops_that_client_named(tmp_path):
  """The run goes on; the client is dropped with the file named."""
  form = cf.compile(client_state_process())
  clients = {f'c{i}': np.float32([i, 1.0]) for i in range(3)}
  out = tmp_path / 'run'
  beam_runner.run(form, clients, 1, 3, out, progress=QUIET)
  run = beam_runner.RunDir(out)
  path = run.attempt(1).client_state_path('c1')
  _flip_bit(path, os.path.getsize(path) - 6)
  result = beam_runner.run(form, clients, 2, 3, out, progress=QUIET)
  outcome = result.outcomes[-1]
  assert outcome['dropped_reasons'] == {'unreadable client state': 1}
  assert str(path) in outcome['dropped_clients']['c1']


def test_stray_and_temporary_leftovers_do_not_stop_a_resume(form, data,
                                                            tmp_path):
  out = tmp_path / 'run'
  _run(form, data, 1, out)
  (out / 'rounds' / '000099').mkdir()  # An empty stray round.
  temporary = out / 'rounds' / '000001' / '.state.tensors.ab12.tmp'
  temporary.write_bytes(b'half a state, its writer killed')
  (out / '.metrics.jsonl.cd34.tmp').write_bytes(b'half')
  an_hour_ago = time.time() - storage.ABANDONED_AFTER_SECONDS
  for old in (temporary, out / '.metrics.jsonl.cd34.tmp'):
    os.utime(old, (an_hour_ago, an_hour_ago))
  # Another driver's write in flight: deleting it would make that write fail.
  in_flight = out / '.run.json.ef56.tmp'
  in_flight.write_bytes(b'being written')
  assert _run(form, data, 2, out).rounds == 2
  assert not temporary.exists()
  assert not (out / '.metrics.jsonl.cd34.tmp').exists()
  assert in_flight.read_bytes() == b'being written'


# ---------------------------------------------------------------------------
# The run is bound to the whole form.


def test_a_form_with_another_constant_cannot_resume_the_run(form, data,
                                                            tmp_path):
  out = tmp_path / 'run'
  _run(form, data, 1, out)
  other = cf.compile(weighted_mean_process(step_scale=0.25))
  assert other.summary(print_fn=None) == form.summary(print_fn=None)
  with pytest.raises(beam_runner.RunDirError,
                     match=r'holds a run of another form .* learning rate'):
    _run(other, data, 2, out)
  # The same form saved and loaded, or compiled again, resumes it.
  path = cf.save(cf.compile(weighted_mean_process()), tmp_path / 'f.pb')
  assert _run(path, data, 2, out).rounds == 2


# ---------------------------------------------------------------------------
# One writer at a time.


def test_a_held_lock_stops_a_second_run_before_it_changes_anything(
    form, data, tmp_path):
  out = tmp_path / 'run'
  _run(form, data, 1, out)
  before = _snapshot(out)
  with run_lock.RunLock(str(out)):
    with pytest.raises(beam_runner.RunLocked,
                       match=f'is in use by another run \\(process '
                       f'{os.getpid()} on {socket.gethostname()}'):
      _run(form, data, 2, out)
    assert _snapshot(out).keys() - before.keys() == {'lock.json'}
  assert not (out / 'lock.json').exists()
  assert _run(form, data, 2, out).rounds == 2


def _write_lock(out, **fields):
  record = dict(dict(owner='someone', host=socket.gethostname(),
                     pid=os.getpid(), expires=time.time() + 600), **fields)
  (out / 'lock.json').write_text(json.dumps(record))


def test_the_lock_of_a_dead_process_or_an_expired_lease_is_taken_over(
    form, data, tmp_path):
  out = tmp_path / 'run'
  _run(form, data, 1, out)
  dead = subprocess.Popen([sys.executable, '-c', 'pass'])
  dead.wait()
  _write_lock(out, pid=dead.pid)  # This host, no such process: at once.
  assert _run(form, data, 2, out).rounds == 2
  _write_lock(out, host='elsewhere', expires=time.time() - 1)  # Expired.
  assert _run(form, data, 3, out).rounds == 3
  _write_lock(out, host='elsewhere')  # Alive elsewhere, as far as we know.
  with pytest.raises(beam_runner.RunLocked, match='elsewhere'):
    _run(form, data, 4, out)


def test_a_run_whose_lease_was_taken_over_stops_before_committing(
    form, data, tmp_path, monkeypatch):
  monkeypatch.setattr(run_lock, 'LEASE_SECONDS', 0.3)
  out = tmp_path / 'run'
  _run(form, data, 1, out)
  lines = []

  def evaluate(state):  # Runs before each commit, in the driver.
    del state
    # A renewal under way (read, then write) may write over the takeover
    # once: take over again until the file stays the usurper's.
    for _ in range(20):
      _write_lock(out, owner='usurper', host='elsewhere')
      time.sleep(0.5)
      if json.loads((out / 'lock.json').read_text())['owner'] == 'usurper':
        break
    return {}

  with pytest.raises(beam_runner.RunLocked, match='lost .*lock.json to '
                     'process .* on elsewhere'):
    beam_runner.run(form, data, 2, 3, out, seed=1, progress=lines.append,
                    evaluate=evaluate)
  assert beam_runner.RunDir(out).committed_rounds() == [0, 1]
  # The usurper's lock is its own: left alone.
  assert json.loads((out / 'lock.json').read_text())['owner'] == 'usurper'


def test_a_lock_record_caught_mid_write_is_read_again_not_taken_as_lost(
    tmp_path):
  lock = run_lock.RunLock(str(tmp_path))
  lock.acquire()
  try:
    whole = (tmp_path / 'lock.json').read_bytes()
    reads = [b'', whole[:7], whole]  # Another writer's truncate, then write.
    lock.storage = mock.Mock(wraps=lock.storage)
    lock.storage.read_bytes.side_effect = lambda path: reads.pop(0)
    lock.check()  # Not lost: the third read is the whole record.
    reads.extend([b'{"own'] * 10)  # Never whole: its writer died mid-write.
    with pytest.raises(beam_runner.RunLocked, match='lost'):
      lock.check()
  finally:
    lock.storage = storage.default()
    lock.release()


# ---------------------------------------------------------------------------
# Client ids.


def test_client_ids_never_share_a_file_name():
  ids = ['has space', 'has%20space', '', '.', '..', '%%', 'a/b', 'x' * 240,
         'x' * 241, 'é' * 150]
  names = [client_data.file_name(i) for i in ids]
  assert len(set(names)) == len(ids), names
  for client_id, name in zip(ids, names):
    assert name and '/' not in name and len(name.encode()) <= 255
    if client_data.client_id_of(name) is not None:
      assert client_data.client_id_of(name) == client_id


def test_the_empty_and_long_ids_keep_their_own_client_states(tmp_path):
  form = cf.compile(client_state_process())
  clients = {'': np.float32([1.0, 2.0]), 'y' * 300: np.float32([3.0, 4.0]),
             'has space': np.float32([5.0, 6.0]),
             'has%20space': np.float32([7.0, 8.0])}
  result = beam_runner.run(form, clients, 2, 4, tmp_path / 'run',
                           progress=QUIET)
  assert result.outcomes[-1]['clients_ok'] == 4
  states = beam_runner.RunDir(tmp_path / 'run').client_state_paths()
  assert len(set(states.values())) == 4
  assert all(os.path.dirname(p).endswith('client_states') and
             not os.path.basename(p).startswith('.')  # '' is not '.tensors'.
             for p in states.values())
  resumed = beam_runner.run(form, clients, 3, 4, tmp_path / 'run',
                            progress=QUIET)
  assert resumed.outcomes[-1]['clients_ok'] == 4


def test_a_client_data_directory_refuses_names_that_could_collide(tmp_path):
  source = beam_runner.write_client_data(
      tmp_path / 'clients', {'has space': np.float32(1.0),
                             'b': np.float32(2.0)})
  assert source.client_ids() == ['b', 'has space']
  # A file named by hand: its name decodes to an id another file may have.
  os.rename(tmp_path / 'clients' / 'clients' / 'b.tfrecord',
            tmp_path / 'clients' / 'clients' / 'has space.tfrecord')
  with pytest.raises(beam_runner.ClientDataError,
                     match=r"has space\.tfrecord: not a name write_client_"
                     r"data gives .* would be has%20space\.tfrecord"):
    source.client_ids()
  with pytest.raises(beam_runner.ClientDataError, match='empty or longer'):
    beam_runner.write_client_data(tmp_path / 'other',
                                  {'z' * 300: np.float32(1.0)})
  assert not (tmp_path / 'other').exists()
  with pytest.raises(beam_runner.ClientDataError, match='are one id as text'):
    beam_runner.write_client_data(tmp_path / 'other',
                                  {1: np.float32(1.0), '1': np.float32(2.0)})


def test_an_emptied_or_cut_client_file_is_refused_naming_it(form, data,
                                                            tmp_path):
  """TFRecord's CRCs catch flipped bits; a cut at a record boundary (or an
  emptied file) is caught by the sizes recorded at write time."""
  source = beam_runner.write_client_data(tmp_path / 'clients', data)
  path = source.path('c1')
  with open(path, 'r+b') as f:
    f.truncate(0)
  with pytest.raises(beam_runner.ClientDataError,
                     match=f"Client 'c1': {path} holds 0 bytes, [0-9]+ were "
                     'written'):
    source.read('c1', form.client_data_spec)
  result = beam_runner.run(form, source.directory, 1, 5, tmp_path / 'run',
                           progress=QUIET)
  outcome = result.outcomes[0]
  assert outcome['dropped_reasons'] == {'unreadable data': 1}
  assert str(path) in outcome['dropped_clients']['c1']
