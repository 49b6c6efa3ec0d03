"""The Beam step that writes prepared clients' files (see prepare_data).

Its own module, so that `prepare_data`'s command line answers before Beam
and TensorFlow load; workers import it by name to run the step.
"""

import io

import apache_beam as beam
import numpy as np

from beam_runner.worker_io import client_data as client_data_lib
from beam_runner.worker_io import tfrecords


class WriteClient(beam.DoFn):
  """Writes one client's shuffled, batched examples to its TFRecord file.

  Holds only paths, numbers and the storage (its settings: it is pickled
  into the pipeline); the arrays are loaded once per worker process in
  `setup`.
  """

  def __init__(self, arrays_path, directory, batch_size, seed, storage):
    self._arrays_path = arrays_path
    self._directory = directory
    self._batch_size = batch_size
    self._seed = seed
    self._storage = storage  # A worker may be anywhere.

  def setup(self):
    with np.load(io.BytesIO(self._storage.read_bytes(
        self._arrays_path))) as arrays:
      self._x, self._y = arrays['x'], arrays['y']
      self._order, self._offsets = arrays['order'], arrays['offsets']
    self._target = client_data_lib.TFRecordClientData(self._directory,
                                                      self._storage)

  def process(self, client_id):
    k = int(client_id.rsplit('_', 1)[1])
    members = self._order[self._offsets[k]:self._offsets[k + 1]]
    # Seeded per client: the file is the same whichever worker writes it.
    members = np.random.default_rng([self._seed, k]).permutation(members)
    size = self._write(self._target.path(client_id), members)
    yield client_id, [len(members), size]

  def _write(self, path, members):
    records = []
    for start in range(0, len(members), self._batch_size):
      batch = members[start:start + self._batch_size]
      element = (self._x[batch], self._y[batch])
      # deterministic: else the feature map's order follows the process's
      # string hash seed, and reruns would differ byte for byte.
      records.append(client_data_lib.example_of(element).SerializeToString(
          deterministic=True))
    data = tfrecords.file_bytes(records)
    self._storage.write_bytes(path, data)  # Whole or none.
    return len(data)
