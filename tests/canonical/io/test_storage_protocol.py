"""canonical.io as one protocol with one back end per scheme: a new scheme is
one `FileStore` class and one `register` call, and everything built on the
protocol (the commit of a round, a run lock) works on it; settings are a value
that travels with a `Storage`, not process state."""

import pickle
import threading

import pytest

from beam_runner.driver import run_dir as run_dir_lib
from canonical import io as storage_lib
from canonical.io import filestore
from canonical.io import schemes


class MemoryStore(filestore.FileStore):
  """Files in a dict, shared by every store of the scheme (a tiny object
  store: create-only is its one atomic operation)."""

  files = {}
  lock = threading.Lock()
  made = []  # The settings of each store made.

  def __init__(self, settings):
    super().__init__(settings)
    MemoryStore.made.append(settings)

  def read_bytes(self, path):
    try:
      return self.files[path]
    except KeyError:
      raise storage_lib.NotFound(f'No such file: {path!r}') from None

  def write_bytes(self, path, data, sync=False):
    self.files[path] = bytes(data)
    return path

  def create_only(self, path, data):
    with self.lock:
      if path in self.files:
        raise storage_lib.AlreadyExists(f'{path!r} already exists.')
      self.files[path] = bytes(data)
    return path

  def exists(self, path):
    return path in self.files or bool(self.list_files(path))

  def list_files(self, directory):
    prefix = directory.rstrip('/') + '/'
    return sorted(p[len(prefix):] for p in self.files if p.startswith(prefix))

  def delete(self, files):
    for path in files:
      self.files.pop(path, None)

  def check_writable(self, path, what='path'):
    pass


class NoCreateOnlyStore(MemoryStore):

  def create_only(self, path, data):
    raise filestore.no_create_only(path, 'nocreate')


@pytest.fixture
def memory_scheme(monkeypatch):
  """The two schemes, registered for the test only."""
  MemoryStore.files.clear()
  monkeypatch.setattr(schemes, '_STORES', dict(schemes._STORES))  # pylint: disable=protected-access
  schemes.register('mem', MemoryStore)
  schemes.register('nocreate', NoCreateOnlyStore)


def test_a_registered_scheme_serves_every_operation(memory_scheme):
  storage = storage_lib.Storage()
  path = storage.write_bytes('mem://b/dir/a.txt', b'one')
  assert storage.read_bytes(path) == b'one'
  storage.create_only('mem://b/dir/sub/c.txt', b'two')
  assert storage.list_files('mem://b/dir') == ['a.txt', 'sub/c.txt']
  assert storage.list_names('mem://b/dir') == ['a.txt', 'sub']
  assert storage.exists('mem://b/dir') and not storage.exists('mem://b/no')
  storage.delete_tree('mem://b/dir')
  assert storage.list_files('mem://b') == []
  with pytest.raises(storage_lib.NotFound):
    storage.read_bytes(path)


def test_of_racing_creators_exactly_one_wins_on_the_new_scheme(memory_scheme):
  storage = storage_lib.Storage()
  wins, barrier = [], threading.Barrier(8)

  def create(i):
    barrier.wait()
    try:
      storage.create_only('mem://b/commit.json', str(i).encode())
      wins.append(i)
    except storage_lib.AlreadyExists:
      pass

  threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert len(wins) == 1
  assert storage.read_bytes('mem://b/commit.json') == str(wins[0]).encode()


def test_a_round_commits_once_on_the_new_scheme(memory_scheme):
  run = run_dir_lib.RunDir('mem://b/run', storage_lib.Storage())
  first, second = run.new_attempt(1), run.new_attempt(1)
  for attempt in (first, second):
    for path in (attempt.outcome_path, attempt.clients_path):
      run.storage.write_bytes(path, b'{}')
  run.commit(first)
  with pytest.raises(run_dir_lib.CommitConflict):
    run.commit(second)
  assert run_dir_lib.RunDir('mem://b/run', run.storage).last_committed() == 1


def test_a_scheme_without_create_only_cannot_hold_commits(memory_scheme):
  run = run_dir_lib.RunDir('nocreate://b/run', storage_lib.Storage())
  attempt = run.new_attempt(1)
  for path in (attempt.outcome_path, attempt.clients_path):
    run.storage.write_bytes(path, b'{}')
  with pytest.raises(storage_lib.StorageError, match='no create-only write'):
    run.commit(attempt)


def test_settings_are_the_filesystem_options_only():
  settings = storage_lib.Settings.of([
      '--runner', 'DirectRunner', '--s3_endpoint_url', 'http://127.0.0.1:9',
      '--s3_region_name', 'r'])
  assert settings.as_dict() == {'s3_endpoint_url': 'http://127.0.0.1:9',
                                's3_region_name': 'r'}
  assert storage_lib.Settings.of(settings.as_dict()) == settings
  assert storage_lib.Settings.of(settings.pipeline_options()) == settings
  assert not storage_lib.Settings.of(['--runner', 'DirectRunner'])


def test_a_storage_travels_as_its_settings(memory_scheme):
  settings = storage_lib.Settings.of({'s3_region_name': 'far'})
  storage = storage_lib.for_settings(settings)
  storage.write_bytes('mem://b/x', b'x')  # Makes its mem store.
  copy = pickle.loads(pickle.dumps(storage))
  assert copy is storage  # This process's one for these settings.
  assert len(pickle.dumps(storage)) < 400  # Settings, not stores or clients.
  MemoryStore.made.clear()
  other = pickle.loads(pickle.dumps(storage_lib.Storage(settings)))
  other.read_bytes('mem://b/x')
  assert not MemoryStore.made  # The process's storage, its stores made.
  fresh = storage_lib.Storage(storage_lib.Settings.of({'s3_region_name': 'x'}))
  fresh.read_bytes('mem://b/x')
  assert MemoryStore.made == [fresh.settings]  # A store gets its settings.


def test_options_without_settings_keep_the_default_storage():
  configured = storage_lib.configure({'s3_region_name': 'here'})
  try:
    assert storage_lib.default() is configured
    assert storage_lib.storage_for(['--runner', 'DirectRunner']) is configured
    named = storage_lib.storage_for({'s3_region_name': 'there'})
    assert named is not configured
    assert named.settings.as_dict() == {'s3_region_name': 'there'}
  finally:
    storage_lib.configure(None)
  assert not storage_lib.default().settings


def test_an_unknown_scheme_is_one_clear_error():
  with pytest.raises(storage_lib.StorageError, match="scheme 'nosuch'"):
    storage_lib.Storage().absolute('nosuch://bucket/x')
