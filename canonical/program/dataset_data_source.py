"""`DatasetDataSource`: clients' data held in memory, one `tf.data.Dataset`
per client, as in TFF.

An iterator's `select(k)` returns k of the datasets, distinct within one
call, drawn anew (with replacement across calls) at each call. Unlike TFF,
which draws from Python's global `random`, the draw is a pure function of
the source's `seed` and how many selections the iterator made before: two
iterators of one seed select the same clients, round after round, and an
iterator restored from its bytes (kept in program state) goes on where the
saved one was. With no seed, a random one is drawn once per source.

`to_bytes` holds each dataset's TensorFlow graph (`DatasetToGraphV2`), so a
dataset whose elements come from Python (`from_generator`, `py_function`)
cannot be saved; `from_bytes` runs those graphs again, so restore only
bytes you wrote.
"""

import base64
import io
import json
import secrets
import zipfile

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import struct_pb2
from tensorflow.python.saved_model import nested_structure_coder

from canonical import errors
from canonical.program import data_source
from canonical.program import file_program_state_manager

FORMAT = 'canonical.dataset_data_source_iterator'
LAYOUT = 1
_FAIL_ON_EXTERNAL_STATE = 2  # DatasetToGraphV2's external_state_policy.


def _check_datasets(datasets, where):
  """The datasets as a list; all of one element type."""
  if isinstance(datasets, (str, bytes, tf.data.Dataset)) or not isinstance(
      datasets, (list, tuple)):
    raise errors.InvalidTypeError(
        f'{where}: datasets must be a list of tf.data.Dataset (one per '
        f'client), got {type(datasets).__name__}.')
  if not datasets:
    raise errors.InvalidValueError(f'{where}: datasets is empty; give one '
                                   'tf.data.Dataset per client.')
  for i, dataset in enumerate(datasets):
    if not isinstance(dataset, tf.data.Dataset):
      raise errors.InvalidTypeError(
          f'{where}: datasets[{i}] is a {type(dataset).__name__}, not a '
          'tf.data.Dataset.')
    if dataset.element_spec != datasets[0].element_spec:
      raise errors.InvalidValueError(
          f'{where}: every dataset must have the same element type; '
          f'datasets[0] has {datasets[0].element_spec}, datasets[{i}] has '
          f'{dataset.element_spec}.')
  return list(datasets)


def _federated_type(element_spec):
  from canonical.core import types  # pylint: disable=g-import-not-at-top
  return types.FederatedType(types.SequenceType(element_spec), types.CLIENTS)


def check_seed(seed, where):
  """`seed` as an int (a random one for None); InvalidValueError unless a
  non-negative int."""
  if seed is None:
    return secrets.randbits(63)
  if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or \
      seed < 0:
    raise errors.InvalidValueError(
        f'{where}: seed must be a non-negative int or None, got {seed!r}.')
  return int(seed)


class DatasetDataSourceIterator(data_source.FederatedDataSourceIterator):
  """Selections of `datasets` (see the module's docstring); `position`
  counts the selections made so far."""

  def __init__(self, datasets, federated_type, *, seed=None, position=0):
    where = 'DatasetDataSourceIterator'
    self._datasets = _check_datasets(datasets, where)
    self._federated_type = federated_type
    self._seed = check_seed(seed, where)
    self._position = file_program_state_manager.check_int(
        position, where, 'position')

  @property
  def federated_type(self):
    return self._federated_type

  @property
  def seed(self) -> int:
    return self._seed

  @property
  def position(self) -> int:
    return self._position

  def select(self, k: int | None = None) -> list:
    """`k` of the datasets, distinct, drawn by the seed and position."""
    if k is not None and (isinstance(k, bool) or
                          not isinstance(k, (int, np.integer))):
      raise errors.InvalidTypeError(
          f'DatasetDataSourceIterator.select: k must be an int, got '
          f'{type(k).__name__}.')
    if k is None or not 0 <= k <= len(self._datasets):
      raise errors.InvalidValueError(
          f'DatasetDataSourceIterator.select: k must be an int from 0 to '
          f'the number of datasets ({len(self._datasets)}), got {k}.')
    rng = np.random.default_rng([self._seed, self._position])
    self._position += 1
    return [self._datasets[i]
            for i in rng.choice(len(self._datasets), int(k), replace=False)]

  def to_bytes(self) -> bytes:
    graphs = []
    # pylint: disable=protected-access
    for i, dataset in enumerate(self._datasets):
      try:
        graphs.append(tf.raw_ops.DatasetToGraphV2(
            input_dataset=dataset._variant_tensor,
            external_state_policy=_FAIL_ON_EXTERNAL_STATE,
            strip_device_assignment=True).numpy())
      except tf.errors.OpError as e:
        raise errors.InvalidValueError(
            f'DatasetDataSourceIterator.to_bytes: datasets[{i}] cannot be '
            'saved: its elements come from outside its TensorFlow graph '
            '(from_generator, py_function, ...): '
            f'{e.message.splitlines()[0]}') from None
    spec = nested_structure_coder.encode_structure(
        self._datasets[0].element_spec).SerializeToString()
    manifest = {'format': FORMAT, 'layout': LAYOUT, 'seed': self._seed,
                'position': self._position, 'datasets': len(graphs),
                'element_spec': base64.b64encode(spec).decode('ascii')}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, 'w', zipfile.ZIP_STORED) as archive:
      archive.writestr('manifest.json', json.dumps(manifest))
      for i, graph in enumerate(graphs):
        archive.writestr(f'datasets/{i}.pb', graph)
    return buffer.getvalue()

  @classmethod
  def from_bytes(cls, buffer: bytes) -> 'DatasetDataSourceIterator':
    try:
      archive = zipfile.ZipFile(io.BytesIO(buffer))
      manifest = json.loads(archive.read('manifest.json'))
      if manifest.get('format') != FORMAT or \
          manifest.get('layout') != LAYOUT:
        raise ValueError(f'not a {FORMAT} of layout {LAYOUT}')
      proto = struct_pb2.StructuredValue()
      proto.ParseFromString(base64.b64decode(manifest['element_spec']))
      element_spec = nested_structure_coder.decode_proto(proto)
      datasets = [
          tf.data.experimental.from_variant(
              tf.raw_ops.DatasetFromGraph(
                  graph_def=archive.read(f'datasets/{i}.pb')),
              structure=element_spec)
          for i in range(int(manifest['datasets']))]
    except (zipfile.BadZipFile, KeyError, ValueError, TypeError,
            tf.errors.OpError) as e:
      raise errors.InvalidValueError(
          'DatasetDataSourceIterator.from_bytes: these bytes are not an '
          f'iterator that to_bytes wrote ({type(e).__name__}: '
          f'{str(e).splitlines()[0] if str(e) else ""}).') from None
    return cls(datasets, _federated_type(element_spec),
               seed=manifest['seed'], position=manifest['position'])

  def __deepcopy__(self, memo):
    del memo  # Datasets are immutable: shared.
    return DatasetDataSourceIterator(self._datasets, self._federated_type,
                                     seed=self._seed,
                                     position=self._position)

  def __eq__(self, other):
    if self is other:
      return True
    if not isinstance(other, DatasetDataSourceIterator):
      return NotImplemented
    return (self._seed, self._position, len(self._datasets)) == (
        other._seed, other._position, len(other._datasets)) and all(
            _same_elements(a, b)
            for a, b in zip(self._datasets, other._datasets))

  __hash__ = None


def _same_elements(a, b):
  if a.element_spec != b.element_spec:
    return False
  left, right = list(a.as_numpy_iterator()), list(b.as_numpy_iterator())
  return len(left) == len(right) and all(
      all(np.array_equal(x, y)
          for x, y in zip(tf.nest.flatten(p), tf.nest.flatten(q)))
      for p, q in zip(left, right))


class DatasetDataSource(data_source.FederatedDataSource):
  """Clients' data as a list of `tf.data.Dataset`, one per client, all of
  one element type; selections drawn by `seed` (see the module)."""

  def __init__(self, datasets, *, seed=None):
    self._datasets = _check_datasets(datasets, 'DatasetDataSource')
    self._seed = check_seed(seed, 'DatasetDataSource')
    self._federated_type = _federated_type(self._datasets[0].element_spec)

  @property
  def federated_type(self):
    """`{SequenceType(element)}@CLIENTS`."""
    return self._federated_type

  def iterator(self) -> DatasetDataSourceIterator:
    """A new iterator, from the first selection of this source's seed."""
    return DatasetDataSourceIterator(self._datasets, self._federated_type,
                                     seed=self._seed)
