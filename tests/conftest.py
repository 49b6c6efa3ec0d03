"""Shared fixtures: a local S3 server (moto) for tests of s3:// paths.

TensorFlow here runs one intra-op thread, as the Dask engine's workers do
(engines.start_local_cluster): on some CPUs (AVX-512 / AMX) oneDNN's kernels
give other float bits with one thread than with several, and stochastic
rounding is seeded by a fingerprint of a client's update, so the Dask tests'
reference would otherwise draw other noise than the workers. Set before any
test imports TensorFlow (its thread pools read it once).
"""

import os

os.environ['TF_NUM_INTRAOP_THREADS'] = '1'

import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position

from s3_server import S3Server


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
