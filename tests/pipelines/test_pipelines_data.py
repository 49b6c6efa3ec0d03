"""The data layer of pipelines/: datasets, partitions, prepared client data."""

import concurrent.futures
import gzip
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import tensorflow as tf

from beam_runner.worker_io import client_data as client_data_lib
from canonical import io as storage_lib
from pipelines import datasets
from pipelines import partition
from pipelines import prepare_data
from s3_server import refusing_port
import storage_spy

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '../..'))


def _write_idx(path, array, gz=False, code=None):
  codes = {np.dtype('uint8'): 0x08, np.dtype('int8'): 0x09,
           np.dtype('int16'): 0x0B, np.dtype('int32'): 0x0C,
           np.dtype('float32'): 0x0D, np.dtype('float64'): 0x0E}
  array = np.asarray(array)
  header = bytes([0, 0, code or codes[array.dtype], array.ndim])
  header += np.asarray(array.shape, '>u4').tobytes()
  data = header + array.astype(array.dtype.newbyteorder('>')).tobytes()
  with (gzip.open if gz else open)(path, 'wb') as f:
    f.write(data)
  return path


def _idx_dir(directory, n_train=30, n_test=10, gz=True, prefix='',
             test_word='t10k'):
  os.makedirs(directory, exist_ok=True)
  rng = np.random.default_rng(0)
  ext = '.gz' if gz else ''
  arrays = {
      f'{prefix}train-images-idx3-ubyte': rng.integers(0, 256, (n_train, 5, 4),
                                                       dtype=np.uint8),
      f'{prefix}train-labels-idx1-ubyte': rng.integers(0, 3, n_train,
                                                       dtype=np.uint8),
      f'{prefix}{test_word}-images-idx3-ubyte': rng.integers(
          0, 256, (n_test, 5, 4), dtype=np.uint8),
      f'{prefix}{test_word}-labels-idx1-ubyte': rng.integers(0, 4, n_test,
                                                             dtype=np.uint8)}
  for name, array in arrays.items():
    _write_idx(os.path.join(directory, name + ext), array, gz=gz)
  return arrays


# --- datasets ---------------------------------------------------------------

def test_digits_shapes_ranges_and_a_disjoint_stratified_split():
  from sklearn.datasets import load_digits
  ds = datasets.load('digits', seed=0)
  assert ds.name == 'digits' and ds.num_classes == 10
  assert ds.train_x.shape[1:] == (8, 8, 1) and ds.test_x.shape[1:] == (8, 8, 1)
  assert len(ds.train_x) + len(ds.test_x) == 1797
  assert 0.19 < len(ds.test_x) / 1797 < 0.21
  for x, y in ((ds.train_x, ds.train_y), (ds.test_x, ds.test_y)):
    assert x.dtype == np.float32 and y.dtype == np.int32
    assert x.min() == 0.0 and x.max() == 1.0 and len(x) == len(y)
  assert set(np.unique(ds.test_y)) == set(range(10))
  # Train and test together are exactly the original examples, each once.
  full = load_digits()
  original = sorted((full.images[i] / 16).astype(np.float32).tobytes()
                    + bytes([full.target[i]]) for i in range(1797))
  ours = sorted(x.tobytes() + bytes([y])
                for xs, ys in ((ds.train_x, ds.train_y), (ds.test_x, ds.test_y))
                for x, y in zip(xs[..., 0], ys))
  assert ours == original
  again, other = datasets.load('digits', seed=0), datasets.load('digits', 1)
  np.testing.assert_array_equal(again.test_x, ds.test_x)
  assert not np.array_equal(other.test_y, ds.test_y) or \
      not np.array_equal(other.test_x, ds.test_x)


def test_digits_without_scikit_learn_says_how_to_install(monkeypatch):
  monkeypatch.setitem(sys.modules, 'sklearn', None)  # import now fails
  with pytest.raises(datasets.DatasetError, match='pip install scikit-learn'):
    datasets.load('digits')


@pytest.mark.parametrize('gz', [False, True])
@pytest.mark.parametrize('dtype', ['uint8', 'int8', 'int16', 'int32',
                                   'float32', 'float64'])
def test_read_idx_round_trip(tmp_path, gz, dtype):
  array = (np.arange(24).reshape(2, 3, 4) * 3 - 5).astype(dtype)
  if dtype == 'uint8':
    array = (np.arange(24) * 11).astype(np.uint8).reshape(2, 3, 4)
  got = datasets.read_idx(_write_idx(tmp_path / 'a', array, gz=gz))
  np.testing.assert_array_equal(got, array)
  assert got.dtype == array.dtype and got.dtype.isnative


def test_read_idx_errors_name_the_file_and_the_fault(tmp_path):
  good = _write_idx(tmp_path / 'good', np.zeros((3, 2, 2), np.uint8))
  data = open(good, 'rb').read()
  cases = {
      'bad_magic': (b'\x01' + data[1:], 'magic'),
      'bad_type': (data[:2] + b'\x07' + data[3:], 'type code 0x07'),
      'truncated': (data[:-1], 'truncated'),
      'header_cut': (data[:9], 'truncated'),
      'extra': (data + b'\x00', 'longer than its header'),
  }
  for name, (content, words) in cases.items():
    (tmp_path / name).write_bytes(content)
    with pytest.raises(datasets.DatasetError, match=words) as e:
      datasets.read_idx(tmp_path / name)
    assert str(tmp_path / name) in str(e.value)
  (tmp_path / 'cut.gz').write_bytes(gzip.compress(data)[:-6])
  with pytest.raises(datasets.DatasetError, match='cut.gz'):
    datasets.read_idx(tmp_path / 'cut.gz')
  with pytest.raises(datasets.DatasetError, match='missing'):
    datasets.read_idx(tmp_path / 'missing')


@pytest.mark.parametrize('gz', [False, True])
def test_idx_directory_loads_as_stored(tmp_path, gz):
  arrays = _idx_dir(tmp_path / 'd', gz=gz)
  ds = datasets.load(str(tmp_path / 'd'))
  assert ds.name == str(tmp_path / 'd')
  assert ds.train_x.shape == (30, 5, 4, 1) and ds.test_x.shape == (10, 5, 4, 1)
  np.testing.assert_allclose(
      ds.train_x[..., 0], arrays['train-images-idx3-ubyte'] / 255.0, rtol=1e-6)
  np.testing.assert_array_equal(ds.test_y, arrays['t10k-labels-idx1-ubyte'])
  assert ds.num_classes == int(max(arrays['train-labels-idx1-ubyte'].max(),
                                   arrays['t10k-labels-idx1-ubyte'].max())) + 1


def test_emnist_style_names(tmp_path):
  _idx_dir(tmp_path / 'e', prefix='emnist-digits-', test_word='test')
  ds = datasets.load(tmp_path / 'e')
  assert ds.train_x.shape == (30, 5, 4, 1) and len(ds.test_y) == 10


def test_idx_directory_errors(tmp_path):
  d = tmp_path / 'd'
  _idx_dir(d)
  _write_idx(d / 'train-labels-idx1-ubyte', np.zeros(30, np.uint8))  # 2nd copy
  with pytest.raises(datasets.DatasetError,
                     match='exactly one train labels file') as e:
    datasets.load(str(d))
  assert 'train-labels-idx1-ubyte, train-labels-idx1-ubyte.gz' in str(e.value)
  os.remove(d / 'train-labels-idx1-ubyte')
  _write_idx(d / 'train-labels-idx1-ubyte.gz', np.zeros(29, np.uint8), gz=True)
  with pytest.raises(datasets.DatasetError, match='30 images but .*29 labels'):
    datasets.load(str(d))
  _write_idx(d / 'train-labels-idx1-ubyte.gz', np.zeros((30, 1), np.uint8),
             gz=True)
  with pytest.raises(datasets.DatasetError, match='1 dimension'):
    datasets.load(str(d))
  _write_idx(d / 'train-labels-idx1-ubyte.gz', np.full(30, -1, np.int8),
             gz=True)
  with pytest.raises(datasets.DatasetError, match='out of range'):
    datasets.load(str(d))
  os.remove(d / 't10k-images-idx3-ubyte.gz')
  with pytest.raises(datasets.DatasetError, match='test images file.*none'):
    datasets.load(str(d))


def test_unknown_name_and_missing_fashion_mnist(tmp_path, monkeypatch):
  with pytest.raises(datasets.DatasetError,
                     match='digits, fashion_mnist.*directory of.*IDX'):
    datasets.load(str(tmp_path / 'nowhere'))
  monkeypatch.setenv('FASHION_MNIST_DIR', str(tmp_path))
  with pytest.raises(datasets.DatasetError,
                     match='apt-get install dataset-fashion-mnist') as e:
    datasets.load('fashion_mnist')
  assert str(tmp_path) in str(e.value)


@pytest.mark.skipif(not os.path.isdir(datasets.FASHION_MNIST_DIR),
                    reason='dataset-fashion-mnist is not installed')
def test_fashion_mnist(monkeypatch):
  monkeypatch.delenv('FASHION_MNIST_DIR', raising=False)
  ds = datasets.load('fashion_mnist')
  assert ds.train_x.shape == (60000, 28, 28, 1)
  assert ds.test_x.shape == (10000, 28, 28, 1)
  assert ds.num_classes == 10
  assert set(np.unique(ds.train_y)) == set(range(10)) == set(
      np.unique(ds.test_y))
  assert 0 <= ds.train_x.min() and ds.train_x.max() <= 1


# --- partitions -------------------------------------------------------------

LABELS = np.repeat(np.arange(10), [300, 5, 50, 200, 1, 30, 30, 30, 30, 124])


@pytest.mark.parametrize('scheme', partition.SCHEMES)
@pytest.mark.parametrize('num_clients', [1, 7, 100, 400])
def test_partition_covers_each_example_once(scheme, num_clients):
  parts = partition.partition(LABELS, num_clients, scheme, seed=3, alpha=0.1)
  assert len(parts) == num_clients
  assert all(p.dtype == np.int64 and len(p) > 0 for p in parts)
  np.testing.assert_array_equal(np.sort(np.concatenate(parts)),
                                np.arange(len(LABELS)))


@pytest.mark.parametrize('scheme', partition.SCHEMES)
def test_partition_is_a_function_of_the_seed(scheme):
  def run(seed):
    return partition.partition(LABELS, 20, scheme, seed)
  assert all(np.array_equal(a, b) for a, b in zip(run(5), run(5)))
  assert not all(np.array_equal(a, b) for a, b in zip(run(5), run(6)))


def _classes_per_client(parts, labels=LABELS):
  return np.array([len(np.unique(labels[p])) for p in parts])


def test_dirichlet_small_alpha_is_more_skewed():
  labels = np.repeat(np.arange(10), 100)
  def mean_classes(alpha):
    return np.mean([_classes_per_client(
        partition.dirichlet(labels, 20, alpha, seed), labels).mean()
                    for seed in range(5)])
  few, many = mean_classes(0.05), mean_classes(100.0)
  assert few < 3 and many > 9, (few, many)


@pytest.mark.parametrize('shards_per_client', [1, 2, 3])
def test_shards_limit_the_classes_per_client(shards_per_client):
  parts = partition.label_shards(LABELS, 30, shards_per_client, seed=0)
  assert _classes_per_client(parts).max() <= shards_per_client
  # On balanced classes the shards (and so the clients) are near-equal.
  balanced = np.repeat(np.arange(10), 60)
  parts = partition.label_shards(balanced, 30, shards_per_client, seed=0)
  sizes = np.array([len(p) for p in parts])
  assert sizes.max() - sizes.min() <= shards_per_client
  assert _classes_per_client(parts, balanced).max() <= shards_per_client


def test_partition_errors():
  with pytest.raises(ValueError, match='only 3'):
    partition.iid(3, 4, 0)
  with pytest.raises(ValueError, match='only 3'):
    partition.dirichlet([0, 1, 2], 4, 0.5, 0)
  with pytest.raises(ValueError, match='alpha'):
    partition.dirichlet(LABELS, 4, 0.0, 0)
  with pytest.raises(ValueError, match='need at least 20 examples'):
    partition.label_shards(np.arange(19) % 3, 10, 2, 0)
  with pytest.raises(ValueError, match='iid, dirichlet, shards'):
    partition.partition(LABELS, 4, 'pathological', 0)


# --- prepare ----------------------------------------------------------------

DIGITS_ARGS = dict(num_clients=12, scheme='dirichlet', alpha=0.3,
                   batch_size=16, seed=4)


@pytest.fixture(scope='module')
def prepared(tmp_path_factory):
  out = tmp_path_factory.mktemp('prep') / 'digits12'
  return prepare_data.prepare('digits', out, **DIGITS_ARGS)


def _read_client(source, client_id):
  batches = list(source.read(client_id, source.spec).as_numpy_iterator())
  return (batches, np.concatenate([b[0] for b in batches]),
          np.concatenate([b[1] for b in batches]))


def _rows(x, y):
  return sorted(xi.tobytes() + int(yi).to_bytes(4, 'little')
                for xi, yi in zip(x, y))


def test_prepare_writes_exactly_the_partition(prepared):
  ds = datasets.load('digits', seed=DIGITS_ARGS['seed'])
  parts = partition.dirichlet(ds.train_y, 12, 0.3, DIGITS_ARGS['seed'])
  source = client_data_lib.TFRecordClientData(prepared.directory)
  ids = source.client_ids()
  assert ids == prepare_data.client_ids(12) == [f'client_{k:04d}'
                                                for k in range(12)]
  assert source.spec == tf.data.DatasetSpec((
      tf.TensorSpec([None, 8, 8, 1], tf.float32),
      tf.TensorSpec([None], tf.int32)))
  for client_id, part in zip(ids, parts):
    batches, x, y = _read_client(source, client_id)
    assert [len(b[1]) for b in batches[:-1]] == [16] * (len(batches) - 1)
    assert 0 < len(batches[-1][1]) <= 16
    assert _rows(x, y) == _rows(ds.train_x[part], ds.train_y[part])
  assert not [n for n in os.listdir(os.path.join(prepared.directory, 'clients'))
              if not n.endswith('.tfrecord')]
  assert sorted(os.listdir(prepared.directory)) == [
      'client_sizes.json', 'clients', 'element_spec.json', 'manifest.json',
      'test.npz']


def test_prepare_manifest_and_test_set(prepared):
  ds = datasets.load('digits', seed=DIGITS_ARGS['seed'])
  parts = partition.dirichlet(ds.train_y, 12, 0.3, DIGITS_ARGS['seed'])
  m = prepared.manifest
  assert m == json.load(open(os.path.join(prepared.directory,
                                          'manifest.json')))
  assert {k: m[k] for k in prepare_data.PARAMETERS} == dict(
      dataset='digits', scheme='dirichlet', alpha=0.3, shards_per_client=None,
      num_clients=12, batch_size=16, seed=4)
  assert m['image_shape'] == [8, 8, 1] and m['num_classes'] == 10
  assert m['num_train_examples'] == len(ds.train_y)
  ids = prepare_data.client_ids(12)
  assert m['examples_per_client'] == {c: len(p) for c, p in zip(ids, parts)}
  assert m['label_counts_per_client'] == {
      c: np.bincount(ds.train_y[p], minlength=10).tolist()
      for c, p in zip(ids, parts)}
  test_x, test_y = prepared.test_set()
  np.testing.assert_array_equal(test_x, ds.test_x)
  np.testing.assert_array_equal(test_y, ds.test_y)
  again = prepare_data.load_prepared(prepared.directory)
  assert again.manifest == m and not again.reused


def test_prepare_reuses_same_parameters_and_refuses_others(prepared, caplog):
  caplog.set_level('INFO', logger='pipelines.prepare_data')
  mtime = os.path.getmtime(os.path.join(prepared.directory, 'manifest.json'))
  same = prepare_data.prepare('digits', prepared.directory,
                              **dict(DIGITS_ARGS, shards_per_client=7))
  assert same.reused and same.manifest == prepared.manifest
  assert 'Reusing' in caplog.text
  assert os.path.getmtime(os.path.join(prepared.directory,
                                       'manifest.json')) == mtime
  with pytest.raises(ValueError, match=r'alpha \(there: 0\.3, asked: 0\.5\); batch_size'):
    prepare_data.prepare('digits', prepared.directory,
                         **dict(DIGITS_ARGS, alpha=0.5, batch_size=8))


def test_prepare_refuses_a_directory_that_is_not_prepared_data(tmp_path):
  (tmp_path / 'mine').mkdir()
  (tmp_path / 'mine' / 'notes.txt').write_text('precious')
  with pytest.raises(ValueError, match='no manifest.json.*notes.txt'):
    prepare_data.prepare('digits', tmp_path / 'mine', 3)
  assert (tmp_path / 'mine' / 'notes.txt').read_text() == 'precious'
  with pytest.raises(ValueError, match='no manifest.json'):
    prepare_data.load_prepared(tmp_path / 'mine')
  assert os.listdir(tmp_path / 'mine') == ['notes.txt']


def test_prepare_refuses_client_data_it_did_not_write(tmp_path):
  # A write_client_data directory: clients/, element_spec.json and
  # client_sizes.json, as a prepare writes, but client files a prepare never
  # names so.
  mine = client_data_lib.write_client_data(
      tmp_path / 'mine', {'alice': tf.zeros([2]), 'bob': tf.ones([2])})
  before = {n: open(os.path.join(mine.directory, 'clients', n), 'rb').read()
            for n in os.listdir(os.path.join(mine.directory, 'clients'))}
  with pytest.raises(prepare_data.PreparedDataError,
                     match='clients/alice.tfrecord.*left alone'):
    prepare_data.prepare(datasets.Dataset('tiny', *_tiny(), 3),
                         tmp_path / 'mine', 2)
  assert {n: open(os.path.join(mine.directory, 'clients', n), 'rb').read()
          for n in os.listdir(os.path.join(mine.directory, 'clients'))
          } == before
  assert sorted(os.listdir(mine.directory)) == [
      'client_sizes.json', 'clients', 'element_spec.json']


def test_prepare_is_deterministic_and_leaves_no_partial_dirs(tmp_path):
  small = datasets.Dataset('tiny', *[np.asarray(a) for a in _tiny()], 3)
  a = prepare_data.prepare(small, tmp_path / 'a', 4, scheme='shards',
                           batch_size=3, seed=1)
  b = prepare_data.prepare(small, tmp_path / 'b', 4, scheme='shards',
                           batch_size=3, seed=1)
  for client_id in a.client_data.client_ids():
    assert open(a.client_data.path(client_id), 'rb').read() == \
        open(b.client_data.path(client_id), 'rb').read()
  assert sorted(os.listdir(tmp_path)) == ['a', 'b']
  assert max(len(np.flatnonzero(c)) for c in
             a.manifest['label_counts_per_client'].values()) <= 2


def _tiny():
  rng = np.random.default_rng(0)
  x = rng.random((40, 3, 2, 1), dtype=np.float32)
  y = (np.arange(40) % 3).astype(np.int32)
  return x, y, x[:5], y[:5]


def _client_files(prepared):
  return {c: open(prepared.client_data.path(c), 'rb').read()
          for c in prepared.client_data.client_ids()}


def test_a_failed_prepare_leaves_no_manifest_and_a_rerun_completes(
    tmp_path, monkeypatch):
  small = datasets.Dataset('tiny', *_tiny(), 3)
  reference = prepare_data.prepare(small, tmp_path / 'ref', 4)
  write = prepare_data.WriteClient._write

  def fail_on_client_2(self, path, members):
    if path.endswith('client_0002.tfrecord'):
      raise OSError('disk full (simulated)')
    write(self, path, members)

  monkeypatch.setattr(prepare_data.WriteClient, '_write', fail_on_client_2)
  with pytest.raises(Exception, match='disk full'):
    prepare_data.prepare(small, tmp_path / 'out', 4)
  # Not prepared data (no manifest), and no staging files left behind.
  assert 'manifest.json' not in os.listdir(tmp_path / 'out')
  assert '_staging' not in os.listdir(tmp_path / 'out')
  with pytest.raises(prepare_data.PreparedDataError, match='no manifest'):
    prepare_data.load_prepared(tmp_path / 'out')
  monkeypatch.setattr(prepare_data.WriteClient, '_write', write)
  again = prepare_data.prepare(small, tmp_path / 'out', 4)
  assert not again.reused and again.manifest == reference.manifest
  assert _client_files(again) == _client_files(reference)
  assert sorted(os.listdir(tmp_path / 'out')) == [
      'client_sizes.json', 'clients', 'element_spec.json', 'manifest.json',
      'test.npz']


def test_a_pipeline_that_wrote_other_clients_commits_nothing(tmp_path,
                                                            monkeypatch):
  """The written clients are checked against the partition before the
  manifest (the commit) is written."""
  small = datasets.Dataset('tiny', *_tiny(), 3)
  write_files = prepare_data._write_files

  def lose_a_client(*args):
    written = write_files(*args)
    del written['client_0002']
    return written

  monkeypatch.setattr(prepare_data, '_write_files', lose_a_client)
  with pytest.raises(prepare_data.PreparedDataError,
                     match=r'wrote 3 clients, expected 4; .*client_0002 '
                     r'\(None != \d+\)\. Nothing was committed'):
    prepare_data.prepare(small, tmp_path / 'out', 4)
  assert 'manifest.json' not in os.listdir(tmp_path / 'out')
  monkeypatch.setattr(prepare_data, '_write_files', write_files)
  assert not prepare_data.prepare(small, tmp_path / 'out', 4).reused


def test_a_killed_prepares_leftovers_are_written_over(tmp_path):
  """A prepare killed before its manifest (here: with other parameters, and
  its staging and temporary files still there) is resumed from scratch."""
  small = datasets.Dataset('tiny', *_tiny(), 3)
  reference = prepare_data.prepare(small, tmp_path / 'ref', 4, batch_size=3)
  out = tmp_path / 'out'
  prepare_data.prepare(small, out, 7, batch_size=5)
  os.remove(out / 'manifest.json')  # As if killed just before the commit.
  (out / '_staging').mkdir()
  (out / '_staging' / '1234.npz').write_bytes(b'a killed run\'s arrays')
  (out / '.test.npz.x1y2.tmp').write_bytes(b'half a test set')
  (out / 'clients' / '.client_0005.tfrecord.z9.tmp').write_bytes(b'half')
  again = prepare_data.prepare(small, out, 4, batch_size=3)
  assert again.manifest == reference.manifest and not again.reused
  assert _client_files(again) == _client_files(reference)
  assert sorted(os.listdir(out / 'clients')) == sorted(
      os.listdir(tmp_path / 'ref' / 'clients'))
  assert '_staging' not in os.listdir(out)  # Every staging file goes.


def test_the_manifest_is_written_last_and_create_only(tmp_path, monkeypatch):
  recorded = storage_spy.record_local_writes(monkeypatch)
  prepare_data.prepare(datasets.Dataset('tiny', *_tiny(), 3),
                       tmp_path / 'out', 3)
  writes = [(name, os.path.relpath(path, tmp_path / 'out'))
            for name, path in recorded]
  assert writes[-1] == ('create_only', 'manifest.json')
  assert [w for w in writes if 'manifest' in w[1]] == [writes[-1]]
  assert {os.path.dirname(p) for _, p in writes} == {
      '', 'clients', '_staging'}
  assert ('write_bytes', 'test.npz') in writes


def _prepare_twice_at_once(*args, **kwargs):
  barrier = threading.Barrier(2)
  def prepare(_):
    barrier.wait()
    return prepare_data.prepare(*args, **kwargs)
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    return list(pool.map(prepare, range(2)))


def test_of_two_concurrent_prepares_one_commits_the_other_reuses(tmp_path):
  small = datasets.Dataset('tiny', *_tiny(), 3)
  reference = prepare_data.prepare(small, tmp_path / 'ref', 4)
  a, b = _prepare_twice_at_once(small, tmp_path / 'out', 4)
  assert sorted([a.reused, b.reused]) == [False, True]
  assert a.manifest == b.manifest == reference.manifest
  assert _client_files(a) == _client_files(reference)
  assert sorted(os.listdir(tmp_path / 'out')) == [
      'client_sizes.json', 'clients', 'element_spec.json', 'manifest.json',
      'test.npz']


def _sees_nothing_once(monkeypatch):
  """The next prepare looks for existing data before the winner commits."""
  real = prepare_data._existing
  def once(*args):
    monkeypatch.setattr(prepare_data, '_existing', real)
    return None
  monkeypatch.setattr(prepare_data, '_existing', once)


def test_a_prepare_that_loses_the_race_returns_the_winners_data(
    tmp_path, monkeypatch):
  """Two prepares of one directory at once: one's manifest wins; the other
  (same parameters) returns that data, or (others) names what differs."""
  small = datasets.Dataset('tiny', *_tiny(), 3)
  winner = prepare_data.prepare(small, tmp_path / 'out', 4)
  files = _client_files(winner)
  _sees_nothing_once(monkeypatch)
  loser = prepare_data.prepare(small, tmp_path / 'out', 4)
  assert loser.reused and loser.manifest == winner.manifest
  assert _client_files(loser) == files
  # A loser whose staging files the winner deleted under it fails its
  # pipeline, and returns the winner's data all the same.
  def staging_gone(self, path, members):
    raise storage_lib.NotFound('No such file: (the staging arrays)')

  _sees_nothing_once(monkeypatch)
  monkeypatch.setattr(prepare_data.WriteClient, '_write', staging_gone)
  assert prepare_data.prepare(small, tmp_path / 'out', 4).reused
  # With other parameters, that is an error naming them.
  _sees_nothing_once(monkeypatch)
  with pytest.raises(prepare_data.PreparedDataError,
                     match=r'seed \(there: 0, asked: 1\)'):
    prepare_data.prepare(small, tmp_path / 'out', 4, seed=1)


def test_prepare_rejects_bad_arguments_before_any_work(tmp_path):
  small = datasets.Dataset('tiny', *_tiny(), 3)
  with pytest.raises(ValueError, match='only 40'):
    prepare_data.prepare(small, tmp_path / 'out', 41)
  with pytest.raises(ValueError, match='batch_size'):
    prepare_data.prepare(small, tmp_path / 'out', 4, batch_size=0)
  with pytest.raises(ValueError, match='choose one of'):
    prepare_data.prepare(small, tmp_path / 'out', 4, scheme='pathological')
  assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_prepare_on_multi_processing_workers(tmp_path):
  small = datasets.Dataset('tiny', *_tiny(), 3)
  reference = prepare_data.prepare(small, tmp_path / 'ref', 5, batch_size=4)
  multi = prepare_data.prepare(
      small, tmp_path / 'multi', 5, batch_size=4,
      pipeline_options=['--direct_running_mode=multi_processing',
                        '--direct_num_workers=2'])
  assert multi.manifest == reference.manifest
  for client_id in reference.client_data.client_ids():
    assert open(multi.client_data.path(client_id), 'rb').read() == \
        open(reference.client_data.path(client_id), 'rb').read()


def test_cli_refuses_a_flag_nobody_knows(tmp_path, capsys):
  code = prepare_data.main(['--dataset', 'digits', '--num-clients', '3',
                            '--output-dir', str(tmp_path / 'out'),
                            '--no_such_flag'])
  err = capsys.readouterr().err
  assert code == 2 and 'Traceback' not in err
  errors = [l for l in err.splitlines() if l.startswith('error: ')]
  assert len(errors) == 1 and '--no_such_flag' in errors[0]
  assert not (tmp_path / 'out').exists()


def test_cli_reports_an_unreachable_storage_in_one_line(tmp_path, capsys):
  try:
    with refusing_port() as port:
      code = prepare_data.main([
          '--dataset', 'digits', '--num-clients', '3', '--output-dir',
          's3://bucket/out', f'--s3_endpoint_url=http://127.0.0.1:{port}',
          '--s3_access_key_id=a', '--s3_secret_access_key=b'])
  finally:
    storage_lib.configure(None)
  err = capsys.readouterr().err
  assert code == 2 and 'Traceback' not in err
  errors = [l for l in err.splitlines() if l.startswith('error: ')]
  assert len(errors) == 1 and (
      f'Cannot connect to the object store at http://127.0.0.1:{port}'
      in errors[0])
  assert 's3://bucket/out' in errors[0]


@pytest.mark.slow  # ~5 s: a fresh Python importing TensorFlow and Beam.
def test_cli_reports_a_bad_dataset_in_one_line(tmp_path):
  result = subprocess.run(
      [sys.executable, '-m', 'pipelines.prepare_data', '--dataset',
       str(tmp_path / 'no_such_dir'), '--clients', '3', '--output',
       str(tmp_path / 'out')],
      cwd=REPO, capture_output=True, text=True, timeout=120,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'))
  assert result.returncode == 2
  errors = [l for l in result.stderr.splitlines() if l.startswith('error: ')]
  assert len(errors) == 1 and 'no_such_dir' in errors[0]
  assert 'fashion_mnist' in errors[0] and 'Traceback' not in result.stderr
  assert not (tmp_path / 'out').exists()
