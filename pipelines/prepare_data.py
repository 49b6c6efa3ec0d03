"""Prepares a real dataset as federated client data: one TFRecord file per
client, read back by `beam_runner.TFRecordClientData`.

The driver loads the dataset and partitions it; a Beam pipeline writes the
clients' files in parallel. The arrays reach the workers as one staging .npz
file they load once per process, never through the pipeline graph (which
Beam pickles). Everything is built in `<output_dir>.partial-<uuid>` and
renamed into place at the end, so `output_dir` is either complete or absent.

  python -m pipelines.prepare_data --dataset digits --num-clients 50 \
      --partition dirichlet --alpha 0.3 --output-dir /tmp/digits50 [beam flags]
"""

import argparse
import json
import logging
import os
import shutil
import sys
import uuid
from typing import NamedTuple

import apache_beam as beam
import numpy as np
import tensorflow as tf

from beam_runner import client_data as client_data_lib
from beam_runner import engines
from pipelines import datasets
from pipelines import partition as partition_lib

MANIFEST_FILE = 'manifest.json'
TEST_FILE = 'test.npz'
FORMAT = 'fedcanon-prepared-data/1'
_STAGING_DIR = '_staging'

# The parameters that decide a prepared directory's contents; a directory
# prepared with the same ones is reused as it is.
PARAMETERS = ('dataset', 'scheme', 'alpha', 'shards_per_client', 'num_clients',
              'batch_size', 'seed')

_log = logging.getLogger(__name__)


class PreparedDataError(ValueError):
  """An output directory that is not, or not the asked-for, prepared data."""


class PreparedData(NamedTuple):
  directory: str
  client_data: client_data_lib.TFRecordClientData
  manifest: dict
  reused: bool = False  # True when an existing directory was returned as is.

  def test_set(self):
    """(test_x, test_y): the dataset's test split, for central evaluation."""
    with np.load(os.path.join(self.directory, TEST_FILE)) as f:
      return f['test_x'], f['test_y']


def client_ids(num_clients):
  """'client_0000', ...: zero-padded, so string order is numeric order."""
  width = max(4, len(str(num_clients - 1)))
  return [f'client_{k:0{width}d}' for k in range(num_clients)]


def element_spec(image_shape):
  """The client data type the federated averaging model takes: batches."""
  return tf.data.DatasetSpec((
      tf.TensorSpec([None, *image_shape], tf.float32),
      tf.TensorSpec([None], tf.int32)))


class WriteClient(beam.DoFn):
  """Writes one client's shuffled, batched examples to its TFRecord file.

  Holds only paths and numbers (it is pickled into the pipeline); the arrays
  are loaded once per worker process in `setup`.
  """

  def __init__(self, arrays_path, directory, batch_size, seed):
    self._arrays_path = arrays_path
    self._directory = directory
    self._batch_size = batch_size
    self._seed = seed

  def setup(self):
    with np.load(self._arrays_path) as arrays:
      self._x, self._y = arrays['x'], arrays['y']
      self._order, self._offsets = arrays['order'], arrays['offsets']
    self._target = client_data_lib.TFRecordClientData(self._directory)

  def process(self, client_id):
    k = int(client_id.rsplit('_', 1)[1])
    members = self._order[self._offsets[k]:self._offsets[k + 1]]
    # Seeded per client: the file is the same whichever worker writes it.
    members = np.random.default_rng([self._seed, k]).permutation(members)
    self._write(self._target.path(client_id), members)
    yield client_id, len(members)

  def _write(self, path, members):
    with tf.io.TFRecordWriter(path + '.partial') as writer:
      for start in range(0, len(members), self._batch_size):
        batch = members[start:start + self._batch_size]
        element = (self._x[batch], self._y[batch])
        # deterministic: else the feature map's order follows the process's
        # string hash seed, and reruns would differ byte for byte.
        writer.write(client_data_lib.example_of(element).SerializeToString(
            deterministic=True))
    os.replace(path + '.partial', path)  # Whole or not at all.


def _save_json(value, path):
  with open(path, 'w') as f:
    json.dump(value, f)


def prepare(dataset, output_dir, num_clients, scheme='iid', alpha=0.5,
            shards_per_client=2, batch_size=20, seed=0, pipeline_options=None):
  """Partitions `dataset` (a name or path for `datasets.load`, or a
  `datasets.Dataset`) into `num_clients` clients written to `output_dir`.

  An `output_dir` already prepared with the same parameters is returned as it
  is; one prepared differently raises `PreparedDataError` (a ValueError):
  user data is never overwritten. `pipeline_options` (flags, dict or
  `PipelineOptions`) choose the Beam runner; by default the in-process
  FnApiRunner. Workers must share the driver's filesystem.
  """
  output_dir = os.path.abspath(os.fspath(output_dir))
  params = _parameters(dataset, num_clients, scheme, alpha, shards_per_client,
                       batch_size, seed)
  existing = _existing(output_dir, params)
  if existing is not None:
    return existing
  data = dataset if isinstance(dataset, datasets.Dataset) \
      else datasets.load(dataset, seed)
  parts = partition_lib.partition(data.train_y, num_clients, scheme, seed,
                                  alpha=alpha,
                                  shards_per_client=shards_per_client)
  ids = client_ids(num_clients)
  image_shape = list(data.train_x.shape[1:])

  work = f'{output_dir}.partial-{uuid.uuid4().hex}'
  staging = os.path.join(work, _STAGING_DIR)
  try:
    os.makedirs(os.path.join(work, client_data_lib.CLIENTS_DIR))
    os.makedirs(staging)
    with open(os.path.join(work, client_data_lib.SPEC_FILE), 'w') as f:
      json.dump(client_data_lib.spec_to_json(element_spec(image_shape)), f,
                indent=1)
    arrays_path = os.path.join(staging, 'arrays.npz')
    np.savez(arrays_path, x=data.train_x, y=data.train_y,
             order=np.concatenate(parts),
             offsets=np.cumsum([0] + [len(p) for p in parts]))
    written_path = os.path.join(staging, 'written.json')
    with engines.open_engine(pipeline_options) as engine:
      pipeline = engine.pipeline(engine.elements_for(len(ids)))
      _ = (pipeline
           | 'ClientIds' >> beam.Create(ids)
           | 'Spread' >> beam.Reshuffle()
           | 'WriteClients' >> beam.ParDo(
               WriteClient(arrays_path, work, batch_size, seed))
           | 'Collect' >> beam.combiners.ToList().without_defaults()
           | 'Record' >> beam.Map(_save_json, written_path))
      engine.run(pipeline)
    with open(written_path) as f:
      written = dict(json.load(f))
    expected = {cid: len(p) for cid, p in zip(ids, parts)}
    if written != expected:
      raise RuntimeError(f'The pipeline wrote clients {written}, expected '
                         f'{expected}.')
    shutil.rmtree(staging)
    np.savez(os.path.join(work, TEST_FILE), test_x=data.test_x,
             test_y=data.test_y)
    manifest = dict(params, format=FORMAT, image_shape=image_shape,
                    num_classes=int(data.num_classes),
                    num_train_examples=int(len(data.train_y)),
                    num_test_examples=int(len(data.test_y)),
                    examples_per_client=expected,
                    label_counts_per_client={
                        cid: np.bincount(data.train_y[p],
                                         minlength=data.num_classes).tolist()
                        for cid, p in zip(ids, parts)})
    _save_json(manifest, os.path.join(work, MANIFEST_FILE))
    reused = _commit(work, output_dir, params)
  finally:
    shutil.rmtree(work, ignore_errors=True)
  return reused or load_prepared(output_dir)


def _parameters(dataset, num_clients, scheme, alpha, shards_per_client,
                batch_size, seed):
  """The manifest's parameters, checked; alpha and shards_per_client are None
  where the scheme does not use them (so they cannot block a reuse)."""
  if scheme not in partition_lib.SCHEMES:
    raise partition_lib.PartitionError(
        f'Unknown partition scheme {scheme!r}; choose one of '
        f'{", ".join(partition_lib.SCHEMES)}.')
  for what, value, least in (('num_clients', num_clients, 1),
                             ('batch_size', batch_size, 1), ('seed', seed, 0)):
    if not isinstance(value, (int, np.integer)) or value < least:
      raise partition_lib.PartitionError(
          f'{what} must be an integer >= {least}, got {value!r}.')
  if isinstance(dataset, datasets.Dataset):
    name = dataset.name
  else:
    name = os.fspath(dataset)
    name = name if name in datasets.BUILTIN else os.path.abspath(name)
  return {'dataset': name, 'scheme': scheme,
          'alpha': float(alpha) if scheme == 'dirichlet' else None,
          'shards_per_client':
              int(shards_per_client) if scheme == 'shards' else None,
          'num_clients': int(num_clients), 'batch_size': int(batch_size),
          'seed': int(seed)}


def _existing(output_dir, params):
  """The prepared data already at `output_dir` if it has these parameters;
  None if there is nothing there; else PreparedDataError."""
  if not os.path.exists(output_dir) or (
      os.path.isdir(output_dir) and not os.listdir(output_dir)):
    return None
  prepared = load_prepared(output_dir)
  differ = [f'{k} (there: {prepared.manifest.get(k)!r}, asked: {params[k]!r})'
            for k in PARAMETERS if prepared.manifest.get(k) != params[k]]
  if differ:
    raise PreparedDataError(
        f'{output_dir!r} holds data prepared with other parameters: '
        f'{"; ".join(differ)}. Choose another --output or delete it.')
  _log.info('Reusing the prepared data in %s (same parameters).', output_dir)
  return prepared._replace(reused=True)


def _commit(work, output_dir, params):
  """Renames `work` to `output_dir`; returns the existing data instead if a
  concurrent run with the same parameters got there first."""
  if os.path.isdir(output_dir) and not os.listdir(output_dir):
    os.rmdir(output_dir)
  try:
    os.rename(work, output_dir)
    return None
  except OSError:
    existing = _existing(output_dir, params)
    if existing is None:
      raise
    return existing


def load_prepared(directory):
  """Reopens a directory written by `prepare`."""
  directory = os.path.abspath(os.fspath(directory))
  manifest_path = os.path.join(directory, MANIFEST_FILE)
  if not os.path.isfile(manifest_path):
    raise PreparedDataError(
        f'{directory!r} is not prepared client data: it has no '
        f'{MANIFEST_FILE} (write one with python -m pipelines.prepare_data).')
  try:
    with open(manifest_path) as f:
      manifest = json.load(f)
    if manifest.get('format') != FORMAT:
      raise ValueError(f'format {manifest.get("format")!r}, not {FORMAT!r}')
    source = client_data_lib.TFRecordClientData(directory)
    missing = set(manifest['examples_per_client']) - set(source.client_ids())
  except (ValueError, KeyError, TypeError, AttributeError) as e:
    raise PreparedDataError(f'{directory!r} is not readable prepared client '
                            f'data: {type(e).__name__}: {e}') from None
  if missing:
    raise PreparedDataError(f'{directory!r} lacks the files of clients '
                            f'{sorted(missing)[:5]} (of {len(missing)}).')
  if not os.path.isfile(os.path.join(directory, TEST_FILE)):
    raise PreparedDataError(f'{directory!r} has no {TEST_FILE}.')
  return PreparedData(directory, source, manifest)


def summary_line(prepared):
  m = prepared.manifest
  sizes = np.array(list(m['examples_per_client'].values()))
  classes = [sum(1 for c in counts if c)
             for counts in m['label_counts_per_client'].values()]
  return (f'{prepared.directory}: {len(sizes)} clients, {sizes.sum()} '
          f'examples (per client min {sizes.min()}, median '
          f'{np.median(sizes):g}, max {sizes.max()}), classes per client '
          f'median {np.median(classes):g}'
          f'{" (reused, already prepared)" if prepared.reused else ""}')


def main(argv=None):
  parser = argparse.ArgumentParser(
      prog='python -m pipelines.prepare_data',
      description='Partition a dataset into federated clients (TFRecord '
      'files per client). Unknown flags are Beam pipeline options.')
  parser.add_argument('--dataset', required=True,
                      help=f'{" or ".join(datasets.BUILTIN)}, or a directory '
                      'of MNIST-format IDX files')
  parser.add_argument('--num-clients', '--clients', dest='clients', type=int,
                      required=True)
  parser.add_argument('--partition', default='iid',
                      choices=partition_lib.SCHEMES)
  parser.add_argument('--alpha', type=float, default=0.5,
                      help='Dirichlet concentration (dirichlet only)')
  parser.add_argument('--shards-per-client', type=int, default=2,
                      help='shards per client (shards only)')
  parser.add_argument('--batch-size', type=int, default=20)
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--output-dir', '--output', dest='output',
                      required=True)
  args, beam_args = parser.parse_known_args(argv)
  try:
    prepared = prepare(args.dataset, args.output, args.clients,
                       scheme=args.partition, alpha=args.alpha,
                       shards_per_client=args.shards_per_client,
                       batch_size=args.batch_size, seed=args.seed,
                       pipeline_options=beam_args or None)
  except (datasets.DatasetError, partition_lib.PartitionError,
          PreparedDataError) as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  print(summary_line(prepared))
  return 0


if __name__ == '__main__':
  sys.exit(main())
