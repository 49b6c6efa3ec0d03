"""A real S3-compatible server for tests: moto's, on a free 127.0.0.1 port
(with create-only writes made atomic: `moto_s3_server.py`).

Started as its own process under coreutils' `timeout` (so it cannot outlive
its time even if the test process dies) and stopped by whoever started it.
Beam reaches it through its own S3 options (`flags()` / `options()`).
"""

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid

# The longest a server may live: the whole suite's budget.
MAX_SECONDS = 1800
START_SECONDS = 30
ACCESS_KEY = 'testing'
SECRET_KEY = 'testing'
REGION = 'us-east-1'


@contextlib.contextmanager
def refusing_port():
  """A port on 127.0.0.1 that refuses connections for the block's length:
  bound but not listening, so no server another test starts meanwhile can
  take it (a port merely found free once was, once, a Dask worker's)."""
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    yield s.getsockname()[1]


def free_port():
  """A port free now, for a server about to listen on it."""
  with refusing_port() as port:
    return port


class S3Server:
  """moto_server on 127.0.0.1; `with S3Server() as s3: ...`."""

  def __init__(self, max_seconds=MAX_SECONDS):
    self.port = free_port()
    self.endpoint = f'http://127.0.0.1:{self.port}'
    command = [sys.executable, os.path.join(os.path.dirname(__file__),
                                            'moto_s3_server.py'),
               '-H', '127.0.0.1', '-p', str(self.port)]
    if shutil.which('timeout'):
      command = ['timeout', '-s', 'KILL', str(max_seconds)] + command
    self._process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=dict(os.environ, MOTO_ALLOW_NONEXISTENT_REGION='true'))
    deadline = time.monotonic() + START_SECONDS
    while True:
      try:
        socket.create_connection(('127.0.0.1', self.port), 0.2).close()
        break
      except OSError:
        if self._process.poll() is not None or time.monotonic() > deadline:
          self.stop()
          raise RuntimeError(f'moto server did not start on port {self.port}')
        time.sleep(0.05)

  def flags(self):
    """Beam pipeline flags that point Beam's S3 filesystem here."""
    return [f'--s3_endpoint_url={self.endpoint}',
            f'--s3_access_key_id={ACCESS_KEY}',
            f'--s3_secret_access_key={SECRET_KEY}',
            f'--s3_region_name={REGION}']

  def options(self):
    return {'s3_endpoint_url': self.endpoint, 's3_access_key_id': ACCESS_KEY,
            's3_secret_access_key': SECRET_KEY, 's3_region_name': REGION}

  def client(self):
    import boto3  # pylint: disable=g-import-not-at-top
    return boto3.client('s3', endpoint_url=self.endpoint,
                        aws_access_key_id=ACCESS_KEY,
                        aws_secret_access_key=SECRET_KEY, region_name=REGION)

  def new_bucket(self):
    """A new empty bucket's name."""
    name = f'test-{uuid.uuid4().hex[:12]}'
    self.client().create_bucket(Bucket=name)
    return name

  def stop(self):
    if self._process.poll() is None:
      self._process.terminate()
      try:
        self._process.wait(10)
      except subprocess.TimeoutExpired:
        self._process.kill()
        self._process.wait()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.stop()
