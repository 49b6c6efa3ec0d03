"""Prepares a real dataset as federated client data: one TFRecord file per
client, read back by `beam_runner.TFRecordClientData`.

The driver loads the dataset and partitions it; a Beam pipeline writes the
clients' files in parallel. The arrays reach the workers as one staging .npz
file they load once per process, never through the pipeline graph (which
Beam pickles). Every output goes through `canonical.io`, so the output
directory may be local or on an object store (s3://, gs://).

Object stores cannot rename a directory into place, so the commit is one
file: everything is written into the output directory itself and
`manifest.json` comes last, create-only. A directory is prepared data iff it
has a manifest. One without a manifest that holds only what an interrupted
prepare leaves behind is written over; anything else there is refused, so
user data is never overwritten. Client files are deterministic, so two
prepares racing with the same parameters write the same bytes, and the one
that loses the manifest returns the winner's data.

  python -m pipelines.prepare_data --dataset digits --num-clients 50 \
      --partition dirichlet --alpha 0.3 --output-dir /tmp/digits50 [beam flags]
  python -m pipelines.prepare_data ... --output-dir s3://bucket/digits50 \
      --s3_endpoint_url http://127.0.0.1:9000 --runner DaskRunner
"""

import argparse
import io
import json
import logging
import os
import re
import sys
import uuid
from typing import NamedTuple, TYPE_CHECKING

import numpy as np

# Beam, TensorFlow and what imports them are imported where they are used
# (the clients' writer is `client_writer`), so that --help and bad flags are
# answered at once.
from canonical import _lazy
from canonical import errors
from canonical import io as storage_lib
from canonical import quiet
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

# What an interrupted prepare can leave in its output directory (no
# manifest): its files (`_check_only_leftovers` names them), and the local
# storage's temporary files of them.
_LEFTOVER_CLIENT = re.compile(r'client_\d+\.tfrecord')

_log = logging.getLogger(__name__)


class PreparedDataError(errors.Error, ValueError):
  """An output directory that is not, or not the asked-for, prepared data."""


class PreparedData(NamedTuple):
  directory: str
  client_data: 'beam_runner.TFRecordClientData'
  manifest: dict
  reused: bool = False  # True when an existing directory was returned as is.

  def test_set(self):
    """(test_x, test_y): the dataset's test split, for central evaluation."""
    data = self.client_data.storage.read_bytes(
        storage_lib.join(self.directory, TEST_FILE))
    with np.load(io.BytesIO(data)) as f:
      return f['test_x'], f['test_y']


def client_ids(num_clients):
  """'client_0000', ...: zero-padded, so string order is numeric order."""
  width = max(4, len(str(num_clients - 1)))
  return [f'client_{k:0{width}d}' for k in range(num_clients)]


def element_spec(image_shape):
  """The client data type the federated averaging model takes: batches."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.data.DatasetSpec((
      tf.TensorSpec([None, *image_shape], tf.float32),
      tf.TensorSpec([None], tf.int32)))


def _record(written, path, storage):
  """The pipeline's last step: what it wrote, for the driver to check."""
  storage.write_bytes(path, json.dumps(written).encode())


def _npz_bytes(**arrays):
  buffer = io.BytesIO()
  np.savez(buffer, **arrays)
  return buffer.getvalue()


def prepare(dataset, output_dir, num_clients, scheme='iid', alpha=0.5,
            shards_per_client=2, batch_size=20, seed=0, pipeline_options=None):
  """Partitions `dataset` (a name or path for `datasets.load`, or a
  `datasets.Dataset`) into `num_clients` clients written to `output_dir`
  (a local path or a URL such as s3://bucket/data).

  An `output_dir` already prepared with the same parameters is returned as it
  is; one prepared differently, or holding files a prepare does not write,
  raises `PreparedDataError` (a ValueError): user data is never overwritten.
  `pipeline_options` (flags, dict, `PipelineOptions` or an open engine)
  choose the Beam runner (by default the in-process FnApiRunner) and the
  filesystem settings (S3 endpoint and credentials; without any, the
  process's default storage).
  A storage that cannot be written raises `canonical.io.StorageError`, an engine
  that cannot be reached `engines.EngineError`, both before anything is
  written.
  """
  from beam_runner import engines  # pylint: disable=g-import-not-at-top
  storage = storage_lib.storage_for(
      engines.pipeline_options_of(pipeline_options))
  output_dir = storage.absolute(output_dir)
  params = _parameters(dataset, num_clients, scheme, alpha, shards_per_client,
                       batch_size, seed)
  if not storage_lib.is_local(output_dir):
    # One request names a missing bucket, bad credentials or an
    # unreachable endpoint, before anything else.
    storage.check_writable(output_dir, 'output directory')
  existing = _existing(output_dir, params, storage)
  if existing is not None:
    return existing
  if storage_lib.is_local(output_dir):  # After reuse: read-only data is fine.
    storage.check_writable(output_dir, 'output directory')
  data = dataset if isinstance(dataset, datasets.Dataset) \
      else datasets.load(dataset, seed)
  parts = partition_lib.partition(data.train_y, num_clients, scheme, seed,
                                  alpha=alpha,
                                  shards_per_client=shards_per_client)
  with engines.open_engine(pipeline_options) as engine:
    try:
      written = _write_files(engine, data, parts, output_dir, batch_size,
                             seed, storage)
    except Exception:  # pylint: disable=broad-except
      # A concurrent prepare may have committed and deleted our staging
      # files: then its data is the answer.
      existing = _committed_meanwhile(output_dir, params, storage)
      if existing is None:
        raise
      return existing
  ids = client_ids(num_clients)
  expected = {cid: len(p) for cid, p in zip(ids, parts)}
  if written != expected:
    wrong = sorted(cid for cid in set(written) | set(expected)
                   if written.get(cid) != expected.get(cid))
    raise PreparedDataError(
        f'{output_dir}: the pipeline wrote {len(written)} clients, expected '
        f'{len(expected)}; examples written and expected differ for '
        + ', '.join(f'{cid} ({written.get(cid)} != {expected.get(cid)})'
                    for cid in wrong[:5])
        + (f' and {len(wrong) - 5} more' if len(wrong) > 5 else '')
        + '. Nothing was committed; run it again.')
  manifest = dict(params, format=FORMAT,
                  image_shape=list(data.train_x.shape[1:]),
                  num_classes=int(data.num_classes),
                  num_train_examples=int(len(data.train_y)),
                  num_test_examples=int(len(data.test_y)),
                  examples_per_client=expected,
                  label_counts_per_client={
                      cid: np.bincount(data.train_y[p],
                                       minlength=data.num_classes).tolist()
                      for cid, p in zip(ids, parts)})
  try:  # The commit.
    storage.create_only(storage_lib.join(output_dir, MANIFEST_FILE),
                        json.dumps(manifest).encode())
  except storage_lib.AlreadyExists:  # A concurrent prepare committed first.
    return _existing(output_dir, params, storage)
  # Every staging file, those of killed prepares too: committed data needs
  # none, and a concurrent prepare that still did returns this data.
  _delete_staging(output_dir, storage)
  return load_prepared(output_dir, storage)


def _committed_meanwhile(output_dir, params, storage):
  """The data a concurrent prepare committed, if it did (else None)."""
  try:
    if _read_manifest(output_dir, storage) is None:
      return None
  except storage_lib.StorageError:
    return None
  return _existing(output_dir, params, storage)


def _write_files(engine, data, parts, output_dir, batch_size, seed, storage):
  """Everything but the manifest; returns {client id: examples} as written.

  The staging files are this call's own (a concurrent prepare has others)
  and are deleted at the end, whatever happens.
  """
  import apache_beam as beam  # pylint: disable=g-import-not-at-top
  from beam_runner.worker_io import client_data as client_data_lib  # pylint: disable=g-import-not-at-top
  from pipelines import client_writer  # pylint: disable=g-import-not-at-top
  ids = client_ids(len(parts))
  staging_dir = storage_lib.join(output_dir, _STAGING_DIR)
  stem = uuid.uuid4().hex
  arrays_path = storage_lib.join(staging_dir, f'{stem}.npz')
  written_path = storage_lib.join(staging_dir, f'{stem}-written.json')
  try:
    storage.write_bytes(arrays_path, _npz_bytes(
        x=data.train_x, y=data.train_y, order=np.concatenate(parts),
        offsets=np.cumsum([0] + [len(p) for p in parts])))
    storage.write_bytes(
        storage_lib.join(output_dir, client_data_lib.SPEC_FILE),
        json.dumps(client_data_lib.spec_to_json(element_spec(
            data.train_x.shape[1:])), indent=1).encode())
    _delete_other_clients(output_dir, ids, storage)
    pipeline = engine.pipeline(engine.elements_for(len(ids)))
    _ = (pipeline
         | 'ClientIds' >> beam.Create(ids)
         | 'Spread' >> beam.Reshuffle()
         | 'WriteClients' >> beam.ParDo(client_writer.WriteClient(
             arrays_path, output_dir, batch_size, seed, storage))
         | 'Collect' >> beam.combiners.ToList().without_defaults()
         | 'Record' >> beam.Map(_record, written_path, storage))
    engine.run(pipeline)
    written = dict(json.loads(storage.read_bytes(written_path)))
    client_data_lib.write_sizes(output_dir, {
        client_data_lib.file_name(cid) + '.tfrecord': size
        for cid, (_, size) in written.items()}, storage)
    storage.write_bytes(storage_lib.join(output_dir, TEST_FILE),
                        _npz_bytes(test_x=data.test_x, test_y=data.test_y))
    return {cid: examples for cid, (examples, _) in written.items()}
  finally:
    _delete_staging(output_dir, storage, [arrays_path, written_path])


def _delete_staging(output_dir, storage, paths=None):
  """Deletes `paths` (default: all) in the staging directory; best effort,
  so a failure here cannot hide the error that got here."""
  staging_dir = storage_lib.join(output_dir, _STAGING_DIR)
  try:
    if paths is None:
      storage.delete_tree(staging_dir)
      return
    storage.delete(paths)
  except storage_lib.StorageError as e:
    _log.warning('Could not delete staging files in %s: %s', staging_dir, e)
  storage.delete_empty_directory(staging_dir)  # Others' staging files stay.


def _delete_other_clients(output_dir, ids, storage):
  """Deletes client files an interrupted prepare with more clients left."""
  from beam_runner.worker_io import client_data as client_data_lib  # pylint: disable=g-import-not-at-top
  directory = storage_lib.join(output_dir, client_data_lib.CLIENTS_DIR)
  wanted = {client_data_lib.file_name(i) + '.tfrecord' for i in ids}
  storage.delete([storage_lib.join(directory, n)
                  for n in storage.list_names(directory) if n not in wanted])


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


def _existing(output_dir, params, storage):
  """The prepared data at `output_dir` if it has these parameters; None if
  there is none (nothing there, or an interrupted prepare's leftovers to
  write over); else PreparedDataError."""
  if _read_manifest(output_dir, storage) is None:
    _check_only_leftovers(output_dir, storage)
    return None
  prepared = load_prepared(output_dir, storage)
  differ = [f'{k} (there: {prepared.manifest.get(k)!r}, asked: {params[k]!r})'
            for k in PARAMETERS if prepared.manifest.get(k) != params[k]]
  if differ:
    raise PreparedDataError(
        f'{output_dir!r} holds data prepared with other parameters: '
        f'{"; ".join(differ)}. Choose another --output-dir or delete it.')
  _log.info('Reusing the prepared data in %s (same parameters).', output_dir)
  return prepared._replace(reused=True)


def _check_only_leftovers(output_dir, storage):
  """PreparedDataError unless `output_dir` (no manifest) holds nothing but
  what an interrupted prepare writes."""
  from beam_runner.worker_io import client_data as client_data_lib  # pylint: disable=g-import-not-at-top
  leftovers = (client_data_lib.CLIENTS_DIR, client_data_lib.SPEC_FILE,
               client_data_lib.SIZES_FILE, _STAGING_DIR, TEST_FILE)
  foreign = [n for n in storage.list_names(output_dir)
             if n not in leftovers and not storage_lib.is_temporary(n)]
  clients = storage_lib.join(output_dir, client_data_lib.CLIENTS_DIR)
  foreign += [storage_lib.join(client_data_lib.CLIENTS_DIR, n)
              for n in storage.list_names(clients)
              if not _LEFTOVER_CLIENT.fullmatch(n) and
              not storage_lib.is_temporary(n)]
  if foreign:
    shown = ', '.join(foreign[:5]) + (
        f' (and {len(foreign) - 5} more)' if len(foreign) > 5 else '')
    raise PreparedDataError(
        f'{output_dir!r} is not prepared client data: it has no '
        f'{MANIFEST_FILE}, and holds files a prepare does not write ({shown}). '
        'It is left alone; choose another --output-dir or empty it.')


def _read_manifest(directory, storage):
  """The manifest's bytes, or None if there is none."""
  try:
    return storage.read_bytes(storage_lib.join(directory, MANIFEST_FILE))
  except storage_lib.NotFound:
    return None


def load_prepared(directory, storage=None):
  """Reopens a directory written by `prepare` (local or a URL, read through
  `storage`, the default if None)."""
  from beam_runner.worker_io import client_data as client_data_lib  # pylint: disable=g-import-not-at-top
  storage = storage or storage_lib.default()
  directory = storage.absolute(directory)
  text = _read_manifest(directory, storage)
  if text is None:
    raise PreparedDataError(
        f'{directory!r} is not prepared client data: it has no '
        f'{MANIFEST_FILE} (write one with python -m pipelines.prepare_data).')
  try:
    manifest = json.loads(text)
    if manifest.get('format') != FORMAT:
      raise errors.InvalidValueError(
          f'format {manifest.get("format")!r}, not {FORMAT!r}')
    source = client_data_lib.TFRecordClientData(directory, storage)
    missing = set(manifest['examples_per_client']) - set(source.client_ids())
  except (ValueError, KeyError, TypeError, AttributeError) as e:
    raise PreparedDataError(f'{directory!r} is not readable prepared client '
                            f'data: {type(e).__name__}: {e}') from None
  if missing:
    raise PreparedDataError(f'{directory!r} lacks the files of clients '
                            f'{sorted(missing)[:5]} (of {len(missing)}).')
  if not storage.exists(storage_lib.join(directory, TEST_FILE)):
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
  quiet.environment()
  parser = argparse.ArgumentParser(
      prog='python -m pipelines.prepare_data',
      description='Partition a dataset into federated clients (TFRecord '
      'files per client).',
      epilog='Other flags are Beam pipeline options, e.g. --runner '
      'DaskRunner --dask_client_address tcp://HOST:8786, and '
      '--s3_endpoint_url etc. for an s3:// --output-dir; a flag neither '
      'this program nor Beam knows is an error.')
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
                      required=True, help='a local directory or a URL '
                      '(s3://bucket/path, gs://...)')
  args, beam_args = parser.parse_known_args(argv)
  from beam_runner import options as runner_options  # pylint: disable=g-import-not-at-top
  quiet.third_party()
  try:
    options = runner_options.beam_options(beam_args, 'pipelines.prepare_data')
    prepared = prepare(args.dataset, args.output, args.clients,
                       scheme=args.partition, alpha=args.alpha,
                       shards_per_client=args.shards_per_client,
                       batch_size=args.batch_size, seed=args.seed,
                       pipeline_options=options)
  except errors.Error as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  print(summary_line(prepared))
  return 0


if TYPE_CHECKING:  # Its old home; imported on first use (it imports Beam).
  from pipelines.client_writer import WriteClient

__getattr__, __dir__ = _lazy.declared(globals())


if __name__ == '__main__':
  sys.exit(main())
