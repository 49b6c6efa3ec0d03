"""One driver at a time in a run directory: a lease on `lock.json`.

A driver creates `lock.json` create-only (the primitive commits use, so it
works on object stores), renews it every third of `LEASE_SECONDS` from a
background thread, and deletes it when it stops. Another driver that finds
it stops with `RunLocked` naming the holder, unless the holder is gone: a
process of this host that no longer exists (taken over at once) or a lease
not renewed for `LEASE_SECONDS` (a crashed machine; clocks of the machines
are assumed to agree within seconds). A driver whose lease was taken over
while it paused stops before its next commit. Commits stay create-only
besides, so even two drivers that both believed they held the lock could
not both commit one round.
"""

import json
import os
import socket
import threading
import time
import uuid

from beam_runner.driver import run_dir
from canonical import io as storage_lib

LOCK_FILE = 'lock.json'
LEASE_SECONDS = 60.0


class RunLocked(run_dir.RunDirError):
  """Another driver holds the run directory, or took it over from this one."""


_UNREADABLE_RETRIES = 5


class RunLock:
  """The lease of one driver on one run directory (a context manager)."""

  def __init__(self, directory, storage=None):
    self.storage = storage or storage_lib.default()
    self.path = storage_lib.join(directory, LOCK_FILE)
    self.owner = uuid.uuid4().hex
    self._stop = threading.Event()
    self._thread = None
    self._lost = None  # The record of whoever took the lock over.

  def _record(self):
    return json.dumps({
        'owner': self.owner, 'host': socket.gethostname(), 'pid': os.getpid(),
        'expires': time.time() + LEASE_SECONDS}).encode()

  def _held(self):
    """The current lock record, or None if there is none.

    A record that does not parse may be one another writer is writing
    now: read again a few times before treating it as expired."""
    for attempt in range(_UNREADABLE_RETRIES):
      try:
        return json.loads(self.storage.read_bytes(self.path))
      except storage_lib.NotFound:
        return None
      except ValueError:
        if attempt + 1 < _UNREADABLE_RETRIES:
          time.sleep(0.05)
    return {}  # Still unreadable: a writer died mid-write.

  def acquire(self):
    for _ in range(3):
      try:
        self.storage.create_only(self.path, self._record())
      except storage_lib.AlreadyExists:
        held = self._held()
        if held is not None and not _abandoned(held):
          raise RunLocked(
              f'{storage_lib.dirname(self.path)!r} is in use by another run '
              f'(process {held.get("pid")} on {held.get("host")}, lease '
              f'renewed until {_clock(held.get("expires"))}): two drivers '
              'must not run in one output directory. Wait for it to finish, '
              f'or if it is gone, delete {self.path} (it expires by itself '
              f'{LEASE_SECONDS:.0f} s after its last renewal).') from None
        if held is not None:
          self.storage.delete([self.path])  # Its holder is gone.
        continue
      self._thread = threading.Thread(target=self._renew, daemon=True,
                                      name='run-lock-renewal')
      self._thread.start()
      return self
    raise RunLocked(f'Could not take {self.path}: other drivers keep taking '
                    'it.')

  def _renew(self):
    while not self._stop.wait(LEASE_SECONDS / 3):
      held = self._held()
      if held is None or held.get('owner') != self.owner:
        self._lost = held or {}
        return
      try:
        self.storage.write_bytes(self.path, self._record())
      except storage_lib.StorageError:
        continue  # Retried at the next renewal, within the lease.

  def check(self):
    """RunLocked if another driver took the lock over from this one: as
    the renewal thread saw, or as the lock file says now (the thread may
    not have run since)."""
    if self._lost is None:
      held = self._held()
      if held is None or held.get('owner') != self.owner:
        self._lost = held or {}
    if self._lost is not None:
      raise RunLocked(
          f'This run lost {self.path} to process {self._lost.get("pid")} on '
          f'{self._lost.get("host")} (its lease was not renewed for '
          f'{LEASE_SECONDS:.0f} s): it stops before committing more.')

  def release(self):
    self._stop.set()
    if self._thread is not None:
      self._thread.join()
    held = self._held()
    if held is not None and held.get('owner') == self.owner:
      self.storage.delete([self.path])

  def __enter__(self):
    return self.acquire()

  def __exit__(self, *exc):
    self.release()


def _abandoned(held):
  """Whether a lock record's holder is gone."""
  expires = held.get('expires')
  if not isinstance(expires, (int, float)) or expires < time.time():
    return True
  if held.get('host') != socket.gethostname():
    return False
  try:
    os.kill(int(held.get('pid')), 0)
  except ProcessLookupError:
    return True
  except (PermissionError, TypeError, ValueError):
    return False
  return False


def _clock(timestamp):
  try:
    return time.strftime('%H:%M:%S', time.localtime(timestamp))
  except (TypeError, ValueError, OverflowError):
    return 'an unreadable time'
