"""Running an untrusted form's pieces in a child process, with limits.

The loader refuses what it can see (foreign calls, recursion, constants
TensorFlow would abort on, ops outside the allowlist), but a graph can still
abort TensorFlow at run time (an op given sizes it does not check), loop
forever, or allocate without bound. With `run(..., isolation=Isolation())`
every piece call of the form runs in a sandbox: one child process per worker
process, holding the loaded form. The parent sends each call (the piece's
name and its tensors; a client's data as a reference the child reads
itself), waits at most `seconds`, and kills the child if it dies, passes the
time, or its resident memory passes `memory_mb`. The call then raises
`SandboxFailure`, whose `reason` drops the client (or fails the round
cleanly, for the server's pieces); the next call starts a fresh child.

Replies are JSON and raw tensor bytes (tensor_io), never pickle: a child
running untrusted graphs cannot make the parent run code. Requests are
pickled (the parent trusts itself: a client data source travels as it does
to Beam workers).
"""

import collections
import copy
import dataclasses
import json
import os
import pickle
import selectors
import signal
import struct
import subprocess
import sys
import threading

from beam_runner.worker_io import loaded_forms
from beam_runner.worker_io import tensor_io
from canonical import errors
from canonical import io as storage_lib

CRASHED = 'work crashed'
TIMED_OUT = 'work timed out'
OUT_OF_MEMORY = 'work out of memory'

_FRAME = struct.Struct('<Q')
_MEMORY_POLL_SECONDS = 0.02


@dataclasses.dataclass(frozen=True)
class Isolation:
  """Limits of one piece call (one client's work, one update...)."""
  seconds: float = 300.0
  memory_mb: int = 4096


class SandboxFailure(errors.Error, RuntimeError):
  """A piece call killed its sandbox, or was killed; `reason` says which."""

  def __init__(self, reason, detail):
    super().__init__(f'{reason}: {detail}')
    self.reason = reason
    self.detail = detail


@dataclasses.dataclass(frozen=True)
class ClientDataRef:
  """A client's data, read by the sandbox itself (a Dataset cannot cross)."""
  source: object
  client_id: str


class Sandbox:
  """A child process holding the form saved at `path`; restarted after a
  failure. One call at a time."""

  def __init__(self, path, isolation, storage=None):
    self._path = path
    self._isolation = isolation
    self._storage = storage  # The child reads the form and client data so.
    self._process = None
    self._lock = threading.Lock()

  def call(self, piece, args, output_spec):
    """`piece(*args)` in the child: its output, packed as `output_spec`."""
    args = _picklable(args)
    with self._lock:
      process = self._started()
      _write_frame(process.stdin, pickle.dumps(('call', piece, args)))
      reply = self._reply(process, f'{piece}')
    header, body = reply
    if header.get('error'):
      raise _ERRORS.get(header['kind'], RuntimeError)(header['error'])
    return tensor_io.pack(output_spec, tensor_io.decode(body),
                          what=f'output of {piece}')

  def _started(self):
    if self._process is not None and self._process.poll() is None:
      return self._process
    self._process = subprocess.Popen(
        [sys.executable, '-c',
         'from beam_runner.worker_io import sandbox; sandbox.child_main()'],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get(
            'TF_CPP_MIN_LOG_LEVEL', '2')))
    _write_frame(self._process.stdin, pickle.dumps(
        ('load', self._path, self._storage)))
    header, _ = self._reply(self._process, 'loading the form', start=True)
    if header.get('error'):
      raise SandboxFailure(CRASHED, f'the sandbox could not load the form: '
                           f'{header["error"]}')
    return self._process

  def _reply(self, process, what, start=False):
    """The child's next reply; kills it and raises SandboxFailure if it
    dies, passes the time limit or the memory limit first."""
    seconds = self._isolation.seconds + (120.0 if start else 0.0)
    watchdog = _MemoryWatchdog(process.pid, self._isolation.memory_mb)
    watchdog.start()
    try:
      with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        ready = selector.select(timeout=seconds)
      if not ready:
        self._kill()
        raise SandboxFailure(TIMED_OUT, f'{what} took more than '
                             f'{self._isolation.seconds:g} s; killed')
      frame = _read_frame(process.stdout)
    finally:
      watchdog.stop()
    if frame is None:
      code = process.wait()
      self._process = None
      if watchdog.killed:
        raise SandboxFailure(OUT_OF_MEMORY, f'{what} used more than '
                             f'{self._isolation.memory_mb} MB; killed')
      how = f'signal {signal.Signals(-code).name}' if code < 0 else \
          f'exit {code}'
      raise SandboxFailure(CRASHED, f'{what} ended its process ({how})')
    (length,) = _FRAME.unpack_from(frame)
    head = frame[_FRAME.size:_FRAME.size + length]
    return json.loads(head), frame[_FRAME.size + length:]

  def _kill(self):
    if self._process is not None:
      self._process.kill()
      self._process.wait()
      self._process = None

  def close(self):
    with self._lock:
      self._kill()

  def __del__(self):
    try:
      self._kill()
    except Exception:  # pylint: disable=broad-except
      pass


class _MemoryWatchdog(threading.Thread):
  """Kills a process whose resident memory passes `memory_mb`."""

  def __init__(self, pid, memory_mb):
    super().__init__(daemon=True)
    self._pid = pid
    self._limit_kb = memory_mb * 1024
    self._done = threading.Event()
    self.killed = False

  def run(self):
    while not self._done.wait(_MEMORY_POLL_SECONDS):
      try:  # The local process table (a child of this process), not data.
        with open(f'/proc/{self._pid}/status') as f:
          rss = next(int(line.split()[1]) for line in f
                     if line.startswith('VmRSS:'))
      except (OSError, StopIteration, ValueError):
        return
      if rss > self._limit_kb:
        self.killed = True
        try:
          os.kill(self._pid, signal.SIGKILL)
        except ProcessLookupError:
          pass
        return

  def stop(self):
    self._done.set()
    self.join()


class _RemotePiece:
  """A piece whose calls run in the sandbox; same name and types."""

  def __init__(self, piece, sandbox):
    self.name = piece.name
    self.input_specs = piece.input_specs
    self.output_spec = piece.output_spec
    self._piece = piece
    self._sandbox = sandbox

  def __call__(self, *args):
    return self._sandbox.call(self.name, args, self.output_spec)

  def signature(self):
    return self._piece.signature()

  def input_signature(self):
    return self._piece.input_signature()


def sandboxed(form, sandbox):
  """A copy of `form` (loaded here for its types) whose pieces run in
  `sandbox`."""
  remote = copy.copy(form)
  for name, piece in form.pieces.items():
    setattr(remote, name, _RemotePiece(piece, sandbox))
  remote.sandbox = sandbox
  return remote


def is_sandboxed(form):
  return getattr(form, 'sandbox', None) is not None


_ERRORS = {'ValueError': ValueError, 'TypeError': TypeError}


def _picklable(value):
  """`value` with tensors as arrays and named tuples as OrderedDicts of
  their fields: a loaded form's named tuple classes, made by TensorFlow's
  structure coder, do not pickle, and pieces take named parts by name."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if tf.is_tensor(value):
    return value.numpy()
  if isinstance(value, tuple) and hasattr(value, '_fields'):
    return collections.OrderedDict(
        (name, _picklable(getattr(value, name))) for name in value._fields)
  if isinstance(value, (list, tuple)):
    return type(value)(_picklable(v) for v in value)
  if isinstance(value, dict):
    return type(value)((k, _picklable(v)) for k, v in value.items())
  return value


# ---------------------------------------------------------------------------
# The child.


def _write_frame(stream, data):
  stream.write(_FRAME.pack(len(data)) + data)
  stream.flush()


def _read_frame(stream):
  head = stream.read(_FRAME.size)
  if len(head) < _FRAME.size:
    return None
  (length,) = _FRAME.unpack(head)
  data = stream.read(length)
  return data if len(data) == length else None


def _reply_frame(header, body=b''):
  """A reply: the JSON header's length, the header, the tensor bytes."""
  head = json.dumps(header).encode()
  return _FRAME.pack(len(head)) + head + body


def _resolve(value, form):
  """The call's arguments with client data references read (as element
  lists where work takes them, see `client_data.takes_elements`)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from beam_runner.worker_io import client_data  # pylint: disable=g-import-not-at-top

  def read(ref):
    if client_data.takes_elements(form, ref.source):
      return ref.source.read_elements(ref.client_id, form.client_data_spec)
    return ref.source.read(ref.client_id, form.client_data_spec)

  return tf.nest.map_structure(
      lambda leaf: read(leaf) if isinstance(leaf, ClientDataRef) else leaf,
      value)


def child_main():
  """Serves piece calls on stdin/stdout until stdin closes."""
  requests = sys.stdin.buffer
  replies = os.fdopen(os.dup(1), 'wb')
  os.dup2(2, 1)  # Anything printed goes to stderr, not into the replies.
  form = None
  while True:
    frame = _read_frame(requests)
    if frame is None:
      return
    request = pickle.loads(frame)
    try:
      if request[0] == 'load':
        storage = request[2] or storage_lib.default()
        form = loaded_forms.load(storage.absolute(request[1]), storage)
        _write_frame(replies, _reply_frame({}))
        continue
      _, piece, args = request
      output = getattr(form, piece)(*_resolve(args, form))
      body = tensor_io.encode(tensor_io.flatten(output))
      _write_frame(replies, _reply_frame({}, body))
    except Exception as e:  # pylint: disable=broad-except
      _write_frame(replies, _reply_frame(
          {'error': f'{type(e).__name__}: {e}'[:2000],
           'kind': type(e).__name__}))
