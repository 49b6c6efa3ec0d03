"""canonical.storage: one layer for local paths and s3:// (a real local S3
server), and a create-only write that exactly one of many racing writers wins."""

import concurrent.futures
import os
import threading
import time

import pytest

from canonical import io as storage


@pytest.fixture(params=['local', 's3'])
def root(request, tmp_path):
  """A directory on each kind of storage."""
  if request.param == 'local':
    storage.configure(None)
    return str(tmp_path / 'root')
  s3 = request.getfixturevalue('s3')
  return s3.bucket_url + '/root'


def test_write_read_list_delete(root):
  a = storage.join(root, 'a.bin')
  nested = storage.join(root, 'sub', 'deeper', 'b.bin')
  storage.write_bytes(a, b'one')
  storage.write_bytes(nested, b'\x00two')
  assert storage.read_bytes(a) == b'one'
  assert storage.read_bytes(nested) == b'\x00two'
  storage.write_bytes(a, b'replaced')
  assert storage.read_bytes(a) == b'replaced'
  assert storage.list_names(root) == ['a.bin', 'sub']
  assert storage.list_files(root) == ['a.bin', 'sub/deeper/b.bin']
  assert storage.exists(a) and storage.exists(storage.join(root, 'sub'))
  assert not storage.exists(storage.join(root, 'nothing'))
  assert storage.list_names(storage.join(root, 'nothing')) == []
  storage.delete([a, storage.join(root, 'missing.bin')])
  assert storage.list_files(root) == ['sub/deeper/b.bin']
  storage.delete_tree(storage.join(root, 'sub'))
  assert storage.list_files(root) == []


def test_only_an_empty_directory_is_deleted(root):
  kept, emptied = storage.join(root, 'kept'), storage.join(root, 'emptied')
  storage.write_bytes(storage.join(kept, 'a.bin'), b'a')
  storage.write_bytes(storage.join(emptied, 'b.bin'), b'b')
  storage.delete([storage.join(emptied, 'b.bin')])
  storage.delete_empty_directory(kept)
  storage.delete_empty_directory(emptied)
  storage.delete_empty_directory(storage.join(root, 'missing'))
  assert storage.list_files(root) == ['kept/a.bin']
  assert not storage.exists(emptied)


def test_reading_a_missing_file_is_not_found(root):
  with pytest.raises(storage.NotFound, match='nothing.bin'):
    storage.read_bytes(storage.join(root, 'nothing.bin'))
  with pytest.raises(FileNotFoundError):  # NotFound is one.
    storage.read_bytes(storage.join(root, 'nothing.bin'))


def test_create_only_writes_once(root):
  marker = storage.join(root, 'commits', '000001.json')
  storage.create_only(marker, b'first')
  with pytest.raises(storage.AlreadyExists):
    storage.create_only(marker, b'second')
  assert storage.read_bytes(marker) == b'first'
  # Nothing but the marker is left behind (no temporary files).
  assert storage.list_files(storage.join(root, 'commits')) == ['000001.json']


def test_of_many_racing_creators_exactly_one_wins(root):
  marker = storage.join(root, 'race.json')
  barrier = threading.Barrier(8)

  def create(i):
    barrier.wait()
    try:
      storage.create_only(marker, f'writer {i}'.encode())
      return i
    except storage.AlreadyExists:
      return None

  for _ in range(3):
    storage.delete([marker])
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
      winners = [w for w in pool.map(create, range(8)) if w is not None]
    assert len(winners) == 1
    assert storage.read_bytes(marker) == f'writer {winners[0]}'.encode()


def test_local_writes_are_whole_and_get_open_s_mode(tmp_path):
  umask = os.umask(0)
  os.umask(umask)
  path = tmp_path / 'out.json'
  storage.write_bytes(str(path), b'{}')
  assert path.read_bytes() == b'{}'
  assert (path.stat().st_mode & 0o777) == (0o666 & ~umask)
  storage.create_only(str(tmp_path / 'marker'), b'x')
  assert ((tmp_path / 'marker').stat().st_mode & 0o777) == (0o666 & ~umask)
  assert sorted(os.listdir(tmp_path)) == ['marker', 'out.json']


def test_a_failed_local_write_leaves_the_old_file(tmp_path):
  path = tmp_path / 'state'
  storage.write_bytes(str(path), b'old')

  with pytest.raises(TypeError):
    storage.write_bytes(str(path), object())
  assert path.read_bytes() == b'old'
  assert os.listdir(tmp_path) == ['state']


def test_only_an_old_temporary_file_is_abandoned(tmp_path):
  fresh, old = tmp_path / '.state.ab.tmp', tmp_path / '.state.cd.tmp'
  for path in (fresh, old, tmp_path / 'state.tmp'):
    path.write_bytes(b'half')
  long_ago = time.time() - storage.ABANDONED_AFTER_SECONDS - 1
  os.utime(old, (long_ago, long_ago))
  os.utime(tmp_path / 'state.tmp', (long_ago, long_ago))

  assert storage.is_abandoned_temporary(str(old))
  assert not storage.is_abandoned_temporary(str(fresh))  # A write in flight.
  assert not storage.is_abandoned_temporary(str(tmp_path / 'state.tmp'))
  assert not storage.is_abandoned_temporary(str(tmp_path / '.gone.tmp'))
  assert storage.is_abandoned_temporary(str(fresh), min_age=0)


def test_paths():
  assert storage.absolute('relative/x') == os.path.abspath('relative/x')
  assert storage.absolute('file:///tmp/x') == '/tmp/x'
  assert storage.absolute('s3://bucket/run/') == 's3://bucket/run'
  assert storage.join('s3://b/run', 'rounds', '000001') == \
      's3://b/run/rounds/000001'
  assert storage.scheme('s3://b/x') == 's3' and storage.scheme('/x') is None
  assert storage.is_local('C') and not storage.is_local('gs://b/x')
  with pytest.raises(storage.StorageError, match="scheme 'nosuch'"):
    storage.absolute('nosuch://bucket/x')


def test_is_within(tmp_path):
  assert storage.is_within('s3://b/data/run', 's3://b/data/')
  assert storage.is_within('s3://b/data', 's3://b/data')
  assert not storage.is_within('s3://b/data-run', 's3://b/data')
  assert not storage.is_within('s3://c/data/run', 's3://b/data')
  assert not storage.is_within('/b/data/run', 's3://b/data')
  data = tmp_path / 'data'
  data.mkdir()
  (tmp_path / 'link').symlink_to(data)
  assert storage.is_within(str(tmp_path / 'link' / 'run'), str(data))
  assert storage.is_within(f'file://{data}/run', str(tmp_path / 'link'))
  assert storage.is_within(str(data / '..' / 'data' / 'x'), str(data))
  assert not storage.is_within(str(tmp_path / 'data-run'), str(data))
  assert not storage.is_within(str(tmp_path), str(data))


def test_create_only_refuses_a_scheme_without_it(tmp_path):
  with pytest.raises(storage.StorageError, match='no create-only write'):
    storage.create_only('hdfs://namenode/run/commits/1.json', b'x')


def test_unwritable_places_fail_the_check_in_one_line(s3, tmp_path):
  storage.check_writable(s3.bucket_url + '/run')
  with pytest.raises(storage.StorageError,
                     match="output directory 's3://no-such-bucket-here/run': "
                     "the bucket 'no-such-bucket-here' does not exist") as error:
    storage.check_writable('s3://no-such-bucket-here/run', 'output directory')
  assert '\n' not in str(error.value)
  blocker = tmp_path / 'file'
  blocker.write_text('x')
  with pytest.raises(storage.StorageError, match='not a writable directory'):
    storage.check_writable(str(blocker / 'run'))
  storage.check_writable(str(tmp_path / 'new' / 'run'))
  assert not (tmp_path / 'new').exists()  # The check writes nothing.


def test_an_unreachable_endpoint_is_one_clear_error(tmp_path):
  from s3_server import refusing_port  # pylint: disable=g-import-not-at-top
  with refusing_port() as port:
    storage.configure({'s3_endpoint_url': f'http://127.0.0.1:{port}',
                       's3_access_key_id': 'a', 's3_secret_access_key': 'b',
                       's3_region_name': 'us-east-1'})
    try:
      endpoint = f'http://127.0.0.1:{port}'
      with pytest.raises(storage.StorageError, match=(
          f'^Cannot connect to the object store at {endpoint} \\(needed '
          "for the path 's3://bucket/run'\\): is it running")):
        storage.check_writable('s3://bucket/run')
      # Mid-run: the cause leads, not the file that met it.
      with pytest.raises(storage.StorageError, match=(
          f'^Cannot connect to the object store at {endpoint} \\(needed '
          "to read 's3://bucket/run/lock.json'\\)")):
        storage.read_bytes('s3://bucket/run/lock.json')
    finally:
      storage.configure(None)


def test_missing_credentials_are_named(monkeypatch, s3_server):
  for name in ('AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY',
               'AWS_SESSION_TOKEN', 'AWS_PROFILE'):
    monkeypatch.delenv(name, raising=False)
  monkeypatch.setenv('AWS_SHARED_CREDENTIALS_FILE', '/nonexistent')
  monkeypatch.setenv('AWS_CONFIG_FILE', '/nonexistent')
  monkeypatch.setenv('AWS_EC2_METADATA_DISABLED', 'true')
  storage.configure({'s3_endpoint_url': s3_server.endpoint,
                     's3_region_name': 'us-east-1'})
  try:
    with pytest.raises(storage.StorageError, match='no credentials'):
      storage.check_writable('s3://bucket/run')
  finally:
    storage.configure(None)


def test_worker_options_carry_only_filesystem_settings(s3):
  options = storage.worker_options()
  assert options['s3_endpoint_url'] == s3.endpoint
  assert 'runner' not in options
  storage.configure(None)
  assert storage.worker_options() == {}
