"""Per-client state kept between rounds, one version per round the client joined.

`<dir>/<client>/<round>.tensors` is the state a client left after `round`.
A worker running round r reads the client's newest version below r and
writes version r. A run starts by deleting versions newer than its last
committed round, so a failed or killed round leaves no trace.
Versions older than the one a worker read are deleted: at most the last
committed version and the one being written are kept.
"""

import os

from beam_runner import client_data
from beam_runner import tensor_io

_SUFFIX = '.tensors'


class ClientStateStore:

  def __init__(self, directory):
    self.directory = os.fspath(directory)

  def _client_dir(self, client_id):
    return os.path.join(self.directory, client_data.file_name(client_id))

  def path(self, client_id, round_number):
    return os.path.join(self._client_dir(client_id),
                        f'{round_number:06d}{_SUFFIX}')

  def versions(self, client_id):
    try:
      names = os.listdir(self._client_dir(client_id))
    except FileNotFoundError:
      return []
    return sorted(int(n[:-len(_SUFFIX)]) for n in names
                  if n.endswith(_SUFFIX) and n[:-len(_SUFFIX)].isdigit())

  def latest(self, client_id, before_round):
    """The newest round < `before_round` the client left a state after, or None."""
    versions = [v for v in self.versions(client_id) if v < before_round]
    return versions[-1] if versions else None

  def read(self, client_id, round_number, spec):
    return tensor_io.read_tensors(self.path(client_id, round_number), spec,
                                  what=f'state of client {client_id!r}')

  def write(self, client_id, round_number, state):
    return tensor_io.write_tensors(self.path(client_id, round_number), state)

  def discard_after(self, round_number):
    """Deletes every version newer than `round_number` (uncommitted rounds)."""
    if not os.path.isdir(self.directory):
      return
    for name in os.listdir(self.directory):
      client_id = client_data.client_id_of(name)
      for version in self.versions(client_id):
        if version > round_number:
          os.remove(self.path(client_id, version))

  def prune(self, client_id, keep_from):
    """Deletes the client's versions older than `keep_from`."""
    for version in self.versions(client_id):
      if version < keep_from:
        try:
          os.remove(self.path(client_id, version))
        except FileNotFoundError:
          pass
