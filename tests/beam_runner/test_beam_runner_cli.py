"""`python -m beam_runner`: write client shards, run rounds of a saved form,
Beam flags passed through, clear errors and exit statuses on bad input, a
line when a local Dask cluster starts and when it is ready. (That --help
and bad usage import neither TensorFlow nor Beam is checked with the
pipelines' command lines, tests/pipelines/test_pipelines_cli.py.)"""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import beam_runner
from beam_runner import __main__ as cli
import canonical as cf

I3 = tf.TensorSpec([3], tf.int32)
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '../..'))

_CLIENTS_MODULE = '''
import numpy as np

def clients():
  return {f'c{i}': np.full([3], i, np.int32) for i in range(4)}
'''


def _sum_form():

  @cf.federated_computation(cf.server(I3), cf.clients(I3))
  def next_fn(state, data):
    total = cf.federated_sum(data)
    return cf.federated_map(cf.tf_computation(I3, I3)(lambda s, t: s + t),
                            (state, total)), total

  return cf.compile(cf.IterativeProcess(
      cf.tf_computation(lambda: tf.zeros([3], tf.int32)), next_fn))


def _cli(args, cwd):
  return subprocess.run(
      [sys.executable, '-m', 'beam_runner', *args], cwd=cwd,
      capture_output=True, text=True, timeout=120,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2',
               PYTHONPATH=os.pathsep.join([ROOT, str(cwd)])))


@pytest.mark.slow
def test_write_clients_then_run_rounds_in_subprocesses(tmp_path):
  form_path = cf.save(_sum_form(), str(tmp_path / 'form.pb'))
  (tmp_path / 'my_clients.py').write_text(_CLIENTS_MODULE)
  written = _cli(['write-clients', '--from', 'my_clients:clients', '--output',
                  'shards'], tmp_path)
  assert written.returncode == 0, written.stderr
  assert '4 clients written' in written.stdout
  ran = _cli(['run', '--form', form_path, '--clients', 'shards', '--rounds',
              '2', '--clients-per-round', '3', '--output', 'out', '--seed',
              '7', '--min-clients', '2', '--direct_num_workers', '1',
              '--direct_running_mode', 'in_memory'], tmp_path)
  assert ran.returncode == 0, ran.stderr
  progress = [line for line in ran.stderr.splitlines()
              if line.startswith('round ')]
  assert [line.split(':')[0] for line in progress] == ['round 1/2',
                                                      'round 2/2']
  assert 'clients ok 3, dropped 0' in progress[0]
  assert '2 rounds committed' in ran.stdout
  # The same rounds as the API with the same seed.
  data = {f'c{i}': np.full([3], i, np.int32) for i in range(4)}
  expected = beam_runner.run(form_path, data, 2, 3, tmp_path / 'api', seed=7,
                             progress=lambda _: None)
  run = beam_runner.RunDir(tmp_path / 'out')
  assert run.committed_rounds() == [0, 1, 2]
  state = beam_runner.tensor_io.read_tensors(run.state_path(2),
                                             _sum_form().state_spec)
  np.testing.assert_array_equal(state, expected.state)
  with open(tmp_path / 'out' / 'metrics.jsonl') as f:
    assert [json.loads(line)['metrics'] for line in f] == \
        [o['metrics'] for o in expected.outcomes]
  # A client data type the form does not take: exit 2, nothing run.
  beam_runner.write_client_data(tmp_path / 'floats',
                                {'a': np.zeros([3], np.float32)})
  bad = _cli(['run', '--form', form_path, '--clients', 'floats', '--rounds',
              '1', '--clients-per-round', '1', '--output', 'bad'], tmp_path)
  assert bad.returncode == 2
  assert 'error:' in bad.stderr and 'float32[3]' in bad.stderr \
      and 'int32[3]' in bad.stderr
  assert 'Traceback' not in bad.stderr


def _main(capsys, *args):
  status = cli.main(list(args))
  return status, capsys.readouterr().err


def test_bad_input_gives_a_clear_error_and_status_2(tmp_path, capsys):
  form_path = cf.save(_sum_form(), str(tmp_path / 'form.pb'))
  beam_runner.write_client_data(tmp_path / 'shards',
                                {'a': np.zeros([3], np.int32)})
  common = ['--rounds', '1', '--clients-per-round', '1', '--output',
            str(tmp_path / 'out')]
  status, err = _main(capsys, 'run', '--form', str(tmp_path / 'none.pb'),
                      '--clients', str(tmp_path / 'shards'), *common)
  assert status == 2 and 'none.pb' in err and 'no such file' in err
  (tmp_path / 'junk.pb').write_bytes(b'not a form')
  status, err = _main(capsys, 'run', '--form', str(tmp_path / 'junk.pb'),
                      '--clients', str(tmp_path / 'shards'), *common)
  assert status == 2 and 'not a saved canonical form' in err
  status, err = _main(capsys, 'run', '--form', form_path, '--clients',
                      str(tmp_path / 'missing'), *common)
  assert status == 2 and 'missing' in err and 'does not exist' in err
  (tmp_path / 'empty').mkdir()
  status, err = _main(capsys, 'run', '--form', form_path, '--clients',
                      str(tmp_path / 'empty'), *common)
  assert status == 2 and 'element_spec.json' in err
  status, err = _main(capsys, 'run', '--form', form_path, '--clients',
                      str(tmp_path / 'shards'), *common, '--runer',
                      'DirectRunner')
  assert status == 2 and '--runer' in err and 'unknown flag' in err
  status, err = _main(capsys, 'run', '--form', form_path, '--clients',
                      str(tmp_path / 'shards'), '--rounds', '1',
                      '--clients-per-round', '0', '--output', 'x')
  assert status == 2 and '--clients-per-round must be 1 or more' in err
  status, err = _main(capsys, 'write-clients', '--from', 'nope',
                      '--output', str(tmp_path / 'w'))
  assert status == 2 and 'MODULE:FUNCTION' in err
  assert not (tmp_path / 'out').exists()


def test_beam_flags_reach_pipeline_options():
  options = cli.beam_options(['--runner', 'DirectRunner',
                              '--direct_num_workers', '2',
                              '--direct_running_mode=multi_processing'])
  values = options.get_all_options()
  assert values['runner'] == 'DirectRunner'
  assert values['direct_num_workers'] == 2
  assert values['direct_running_mode'] == 'multi_processing'
  with pytest.raises(cli.UsageError, match='--bogus'):
    cli.beam_options(['--bogus', '1'])


@pytest.mark.slow
def test_a_round_that_fails_exits_with_status_1(tmp_path, capsys):
  form_path = cf.save(_sum_form(), str(tmp_path / 'form.pb'))
  beam_runner.write_client_data(tmp_path / 'shards',
                                {'a': np.zeros([3], np.int32)})
  status, err = _main(capsys, 'run', '--form', form_path, '--clients',
                      str(tmp_path / 'shards'), '--rounds', '1',
                      '--clients-per-round', '1', '--min-clients', '2',
                      '--output', str(tmp_path / 'out'))
  assert status == 1 and 'min_clients=2' in err


def test_dask_and_s3_flags_are_known():
  options = cli.beam_options(['--runner', 'DaskRunner',
                              '--dask_client_address', 'tcp://10.0.0.1:8786',
                              '--dask_npartitions', '8',
                              '--s3_endpoint_url', 'http://127.0.0.1:9000'])
  values = options.get_all_options()
  assert values['runner'] == 'DaskRunner'
  assert values['address'] == 'tcp://10.0.0.1:8786'  # Beam's dest names.
  assert values['npartitions'] == 8
  assert values['s3_endpoint_url'] == 'http://127.0.0.1:9000'


def test_an_unreachable_dask_scheduler_is_one_line_and_status_2(tmp_path,
                                                                capsys):
  from s3_server import refusing_port  # pylint: disable=g-import-not-at-top
  form_path = cf.save(_sum_form(), str(tmp_path / 'form.pb'))
  beam_runner.write_client_data(tmp_path / 'shards',
                                {'a': np.zeros([3], np.int32)})
  with refusing_port() as port:
    status, err = _main(
        capsys, 'run', '--form', form_path, '--clients',
        str(tmp_path / 'shards'), '--rounds', '1', '--clients-per-round', '1',
        '--output', str(tmp_path / 'out'), '--runner', 'DaskRunner',
        '--dask_client_address', f'tcp://127.0.0.1:{port}',
        '--dask_connection_timeout', '2')
  assert status == 2
  lines = [line for line in err.splitlines() if line.startswith('error:')]
  assert len(lines) == 1 and 'Cannot reach the Dask scheduler' in lines[0]
  assert 'Traceback' not in err
  assert not (tmp_path / 'out').exists()


@pytest.mark.slow
def test_write_clients_and_run_with_every_path_on_s3(s3, tmp_path):
  form_path = cf.save(_sum_form(), f'{s3.bucket_url}/form.pb')
  (tmp_path / 'my_clients.py').write_text(_CLIENTS_MODULE)
  written = _cli(['write-clients', '--from', 'my_clients:clients', '--output',
                  f'{s3.bucket_url}/shards', *s3.flags()], tmp_path)
  assert written.returncode == 0, written.stderr
  ran = _cli(['run', '--form', form_path, '--clients',
              f'{s3.bucket_url}/shards', '--rounds', '2',
              '--clients-per-round', '3', '--output', f'{s3.bucket_url}/out',
              '--seed', '7', *s3.flags()], tmp_path)
  assert ran.returncode == 0, ran.stderr
  assert f'2 rounds committed in {s3.bucket_url}/out' in ran.stdout
  data = {f'c{i}': np.full([3], i, np.int32) for i in range(4)}
  expected = beam_runner.run(form_path, data, 2, 3, tmp_path / 'api', seed=7,
                             progress=lambda _: None)
  run = beam_runner.RunDir(f'{s3.bucket_url}/out')
  state = beam_runner.tensor_io.read_tensors(run.state_path(2),
                                             _sum_form().state_spec)
  np.testing.assert_array_equal(state, expected.state)
  missing = _cli(['run', '--form', form_path, '--clients',
                  f'{s3.bucket_url}/shards', '--rounds', '1',
                  '--clients-per-round', '1', '--output',
                  's3://no-such-bucket/out', *s3.flags()], tmp_path)
  assert missing.returncode == 2
  assert "the bucket 'no-such-bucket' does not exist" in missing.stderr
  assert 'Traceback' not in missing.stderr


@pytest.mark.slow
def test_a_local_dask_cluster_says_when_it_starts_and_when_it_is_ready(
    tmp_path):
  form_path = cf.save(_sum_form(), str(tmp_path / 'form.pb'))
  beam_runner.write_client_data(
      str(tmp_path / 'shards'),
      {f'c{i}': tf.constant([i, i, i], tf.int32) for i in range(3)})
  ran = subprocess.run(
      [sys.executable, '-m', 'beam_runner', 'run', '--form', form_path,
       '--clients', 'shards', '--rounds', '1', '--clients-per-round', '2',
       '--output', 'out', '--runner', 'DaskRunner'], cwd=tmp_path,
      capture_output=True, text=True, timeout=600,
      env=dict(os.environ, PYTHONPATH=ROOT))
  assert ran.returncode == 0, ran.stderr[-3000:]
  lines = ran.stderr.splitlines()
  workers = os.cpu_count() or 1
  start = lines.index(f'starting a local Dask cluster of {workers} worker'
                      f'{"s" if workers > 1 else ""}...')
  assert re.fullmatch(r'Dask cluster ready at tcp://127\.0\.0\.1:\d+ \(no '
                      r'dashboard\) in \d+\.\d s', lines[start + 1]), lines
  # The driver's own noise is gone (the nanny's kill notices at shutdown).
  assert 'Worker process still alive' not in ran.stderr
