"""pipelines/ with every output on S3 (moto's server on 127.0.0.1): prepared
data, the main job's form, run, summary, plot and TensorBoard files; the same
bytes as on local disk; the manifest commit on an object store; command lines
with Beam's S3 flags, and a missing bucket as one error line.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

import beam_runner
from beam_runner import engines
from canonical import io as storage
from pipelines import datasets
from pipelines import fedavg
from pipelines import prepare_data

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '../..'))
PREPARED = ['client_sizes.json', 'clients/client_0000.tfrecord',
            'clients/client_0001.tfrecord',
            'clients/client_0002.tfrecord', 'clients/client_0003.tfrecord',
            'clients/client_0004.tfrecord', 'element_spec.json',
            'manifest.json', 'test.npz']


def _tiny():
  rng = np.random.default_rng(0)
  x = rng.random((40, 3, 2, 1), dtype=np.float32)
  y = (np.arange(40) % 3).astype(np.int32)
  return datasets.Dataset('tiny', x, y, x[:5], y[:5], 3)


def _client_bytes(prepared):
  return {c: storage.read_bytes(prepared.client_data.path(c))
          for c in prepared.client_data.client_ids()}


def _command(module, *args):
  return subprocess.run(
      [sys.executable, '-m', module, *args], cwd=ROOT, capture_output=True,
      text=True, timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'))


def _error_lines(text):
  return [line for line in text.splitlines() if line.startswith('error: ')]


def test_prepared_data_on_s3_reads_back_and_equals_local_disk(s3, tmp_path):
  url = s3.bucket_url + '/digits'
  prepared = prepare_data.prepare('digits', url, 5, batch_size=16,
                                  pipeline_options=s3.flags())
  assert prepared.directory == url and not prepared.reused
  assert storage.list_files(url) == PREPARED  # No staging files left.
  local = prepare_data.prepare('digits', tmp_path / 'digits', 5,
                               batch_size=16)
  assert _client_bytes(prepared) == _client_bytes(local)
  again = prepare_data.load_prepared(url)
  assert again.manifest == local.manifest
  for ours, theirs in zip(again.test_set(), local.test_set()):
    np.testing.assert_array_equal(ours, theirs)
  source = again.client_data
  batches = list(source.read('client_0003', source.spec).as_numpy_iterator())
  assert sum(len(y) for _, y in batches) == \
      again.manifest['examples_per_client']['client_0003']
  assert prepare_data.prepare('digits', url, 5, batch_size=16).reused
  with pytest.raises(prepare_data.PreparedDataError, match='batch_size'):
    prepare_data.prepare('digits', url, 5, batch_size=8)


def test_the_manifest_commit_on_s3(s3):
  """Foreign objects are refused; an interrupted prepare's objects are
  written over; of two prepares at once, one commits and one reuses."""
  mine = s3.bucket_url + '/mine'
  storage.write_bytes(mine + '/notes.txt', b'precious')
  with pytest.raises(prepare_data.PreparedDataError, match='notes.txt'):
    prepare_data.prepare(_tiny(), mine, 3)
  assert storage.list_files(mine) == ['notes.txt']

  out = s3.bucket_url + '/out'
  prepare_data.prepare(_tiny(), out, 7, batch_size=5)
  storage.delete([out + '/manifest.json'])  # Killed before the commit...
  storage.write_bytes(out + '/_staging/dead.npz', b'...with its staging.')
  resumed = prepare_data.prepare(_tiny(), out, 5, batch_size=3)
  assert not resumed.reused and storage.list_files(out) == PREPARED

  import concurrent.futures  # pylint: disable=g-import-not-at-top
  import threading  # pylint: disable=g-import-not-at-top
  barrier = threading.Barrier(2)

  def prepare(_):
    barrier.wait()
    return prepare_data.prepare(_tiny(), s3.bucket_url + '/race', 5,
                                batch_size=3)

  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    a, b = pool.map(prepare, range(2))
  assert sorted([a.reused, b.reused]) == [False, True]
  assert _client_bytes(a) == _client_bytes(resumed)
  assert storage.list_files(s3.bucket_url + '/race') == PREPARED


@pytest.mark.slow
def test_the_main_job_on_s3_writes_every_output_there_and_resumes(s3):
  config = fedavg.Config(output_dir=s3.bucket_url + '/exp', rounds=2,
                         num_clients=5, clients_per_round=3)
  assert config.data_dir == s3.bucket_url + '/exp/data'
  result = fedavg.run_experiment(config, s3.flags(), print_fn=lambda _: None)
  assert [p['round'] for p in result.curve] == [1, 2]
  assert result.final_test_accuracy > 0.3  # Chance: 0.1.
  files = storage.list_files(config.output_dir)
  for name in ('config.json', 'form.pb', 'summary.json',
               'accuracy_vs_bits.png', 'run/metrics.jsonl',
               'data/manifest.json'):
    assert name in files, name
  assert [f for f in files if f.startswith('run/commits/')] == [
      f'run/commits/{r:06d}.json' for r in range(3)]
  assert len([f for f in files if f.startswith('run/tensorboard/')]) == 2
  assert storage.read_bytes(result.plot_path)[:8] == b'\x89PNG\r\n\x1a\n'
  board = beam_runner.tensorboard_log.read(result.run_dir + '/tensorboard')
  assert [step for step, _ in board['evaluation/accuracy']] == [1, 2]
  assert result.form_path == config.output_dir + '/form.pb'

  lines = []
  again = fedavg.run_experiment(config, s3.flags(), print_fn=lines.append)
  assert again.curve == result.curve
  assert any('resuming after round 2' in line for line in lines)
  assert storage.list_files(config.output_dir) == files  # Nothing new ran.


@pytest.mark.slow  # ~5 s: a fresh Python importing TensorFlow and Beam.
def test_prepare_data_command_writes_to_s3(s3):
  url = s3.bucket_url + '/cli'
  completed = _command('pipelines.prepare_data', '--dataset', 'digits',
                       '--num-clients', '5', '--output-dir', url, *s3.flags())
  assert completed.returncode == 0, completed.stderr[-3000:]
  assert completed.stdout.startswith(f'{url}: 5 clients')
  assert storage.list_files(url) == PREPARED


@pytest.mark.parametrize('main', [prepare_data.main, fedavg.main])
def test_a_missing_bucket_is_one_error_line(s3, main, capsys):
  code = main(['--dataset', 'digits', '--num-clients', '10', '--output-dir',
               's3://no-such-bucket-here/out', *s3.flags()])
  err = capsys.readouterr().err
  assert code == 2
  errors = _error_lines(err)
  assert len(errors) == 1 and 'no-such-bucket-here' in errors[0]
  assert 'bucket' in errors[0].split('no-such-bucket-here', 1)[1]
  assert 'Traceback' not in err


@pytest.mark.slow  # ~13 s: a local Dask cluster of two worker processes.
def test_prepare_on_dask_workers_writes_the_same_bytes_to_s3(s3, tmp_path):
  cluster = engines.start_local_cluster(2, lifetime='10 minutes')
  try:
    on_dask = prepare_data.prepare(
        'digits', s3.bucket_url + '/dask', 5, pipeline_options=s3.flags() + [
            '--runner', 'DaskRunner',
            f'--dask_client_address={cluster.scheduler_address}'])
  finally:
    cluster.close()
  local = prepare_data.prepare('digits', tmp_path / 'local', 5)
  assert on_dask.manifest == local.manifest
  assert _client_bytes(on_dask) == _client_bytes(local)
