"""Shared fixtures: a local S3 server (moto) for tests of s3:// paths.

TensorFlow here runs one intra-op thread, as the Dask engine's workers do
(engines.start_local_cluster): on some CPUs (AVX-512 / AMX) oneDNN's kernels
give other float bits with one thread than with several, and stochastic
rounding is seeded by a fingerprint of a client's update, so the Dask tests'
reference would otherwise draw other noise than the workers. Set before any
test imports TensorFlow (its thread pools read it once).
"""

import collections
import json
import os
import sys

os.environ['TF_NUM_INTRAOP_THREADS'] = '1'

# Test folders mirror the packages (tests/canonical/saving/, ...) and hold no
# __init__.py, so pytest (import mode "prepend") puts each test file's own
# folder, and tests/ for this file, on sys.path; set here, before any test
# module is imported:
# - tests/support, where the helpers shared by tests live (example_processes,
#   marked_lines, s3_server, moto_s3_server, tensor_asserts): every test
#   imports them by their bare names (`import example_processes`).
# - The repository root: with tests/ on sys.path, tests/canonical,
#   tests/encoders, ... are namespace packages, found before the editable
#   install's finder is asked, that would hide the real packages whenever the
#   root is not on sys.path already (the `pytest` command, or a run from
#   another directory; `python -m pytest` from the root has it).
_TESTS = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(_TESTS, 'support'), os.path.dirname(_TESTS)]

import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position

from s3_server import S3Server  # pylint: disable=g-import-not-at-top,wrong-import-position

# Test files run longest first, by the seconds each took in a recorded run, so
# that the two xdist workers end together. xdist's loadfile scheduler hands out
# files in collection order when given --no-loadscope-reorder (scripts/test
# gives it); its own order puts files with many tests first, which left the
# longest files, of one or two end-to-end tests, to the end of the run.
# A file not recorded goes last. Refresh the record with
# scripts/test --record-file-seconds.
_FILE_SECONDS = os.path.join(_TESTS, 'file_seconds.json')
_seconds_this_run = collections.Counter()


def pytest_addoption(parser):
  parser.addoption(
      '--record-file-seconds', action='store_true',
      help=f'write the seconds each test file took in this run to '
      f'{os.path.relpath(_FILE_SECONDS)}: the order of later runs')


def pytest_collection_modifyitems(items):
  try:
    with open(_FILE_SECONDS, encoding='utf-8') as f:
      seconds = json.load(f)
  except FileNotFoundError:
    return
  # A stable sort: each file's tests stay together and in their order.
  items.sort(key=lambda item: -seconds.get(_file_of(item.nodeid), 0.0))


def pytest_runtest_logreport(report):
  _seconds_this_run[_file_of(report.nodeid)] += report.duration


def pytest_sessionfinish(session, exitstatus):
  config = session.config
  if (config.getoption('record_file_seconds')
      and not hasattr(config, 'workerinput')  # xdist's controller writes.
      and exitstatus == pytest.ExitCode.OK):
    with open(_FILE_SECONDS, 'w', encoding='utf-8') as f:
      json.dump({name: round(seconds, 1) for name, seconds in sorted(
          _seconds_this_run.items())}, f, indent=0)
      f.write('\n')


def _file_of(nodeid):
  return nodeid.split('::', 1)[0]


@pytest.fixture(autouse=True)
def no_global_seed_left_behind():
  """A test that sets TensorFlow's global seed (`keras.utils.set_random_seed`,
  `tf.random.set_seed`) leaves none behind: it would change the seeds of
  later tests' ops in the same process (a `shuffle(seed=1)` among them)."""
  yield
  if 'tensorflow' in sys.modules:
    sys.modules['tensorflow'].random.set_seed(None)


@pytest.fixture(scope='session')
def s3_server():
  """One moto server for the session, stopped at its end."""
  server = S3Server()
  yield server
  server.stop()


@pytest.fixture
def s3(s3_server):
  """The server, with the storage layer pointed at it, and a fresh bucket
  as `s3.bucket_url` (s3://NAME)."""
  from canonical import io as storage  # pylint: disable=g-import-not-at-top
  storage.configure(s3_server.options())
  s3_server.bucket_url = f's3://{s3_server.new_bucket()}'
  yield s3_server
  storage.configure(None)
