"""One round of a canonical form as a Beam batch pipeline.

    server state path -> Prepare (C written once; (path, bits) a side input)
    client ids -> Work (each worker reads its clients' data and state itself)
               -> U as bytes -> Aggregate (CombineFn: zero/accumulate/merge/report)
               -> Update -> new state and metrics in the round's staging dir

Only paths, client ids and encoded tensors move through the pipeline; the
form reaches workers as a `FormSource` and is loaded once per process.
"""

import json
import os

import apache_beam as beam
from apache_beam import coders

from beam_runner import tensor_io

STATE_FILE = 'state.tensors'
BROADCAST_FILE = 'broadcast.tensors'
OUTCOME_FILE = 'outcome.json'


class FlatTensorsCoder(coders.Coder):
  """A list of numpy arrays as bytes: dtype, shape and raw data (no pickle)."""

  def encode(self, value):
    return tensor_io.encode(value)

  def decode(self, encoded):
    return tensor_io.decode(encoded)

  def is_deterministic(self):
    return True

  def to_type_hint(self):
    return list


class _FormFn:
  """Mixin: the form, obtained once per worker process in `setup`.

  Loaded values never travel with the pickled function.
  """

  _TRANSIENT = ('_form', '_broadcast', '_broadcast_path')

  def __getstate__(self):
    return {k: (None if k in self._TRANSIENT else v)
            for k, v in self.__dict__.items()}

  def setup(self):
    self._form = self._source.get()

  @property
  def form(self):
    if getattr(self, '_form', None) is None:
      self._form = self._source.get()
    return self._form


class PrepareFn(_FormFn, beam.DoFn):
  """S -> C, written once; yields `(C path, bits of C)`."""

  def __init__(self, source, broadcast_path):
    self._source = source
    self._output_path = broadcast_path

  def process(self, state_path):
    state = tensor_io.read_tensors(state_path, self.form.state_spec,
                                   what='server state')
    bits = tensor_io.write_tensors(self._output_path, self.form.prepare(state))
    yield self._output_path, bits


class WorkFn(_FormFn, beam.DoFn):
  """<D, C> -> <U, Y> for one client id; U leaves as bytes, Y to the store.

  Also yields, tagged 'stats', the bits of the client's U.
  """

  def __init__(self, source, data_source, state_store, round_number):
    self._source = source
    self._data = data_source
    self._store = state_store
    self._round = round_number
    self._broadcast_path = None
    self._broadcast = None

  def _load_broadcast(self, path):
    if path != self._broadcast_path:
      self._broadcast = tensor_io.read_tensors(path, self.form.broadcast_spec,
                                               what='broadcast')
      self._broadcast_path = path
    return self._broadcast

  def process(self, client_id, broadcast):
    form = self.form
    c = self._load_broadcast(broadcast[0])
    data = self._data.read(client_id, form.client_data_spec)
    if form.has_client_state:
      version = self._store.latest(client_id, self._round)
      if version is None:
        client_state = form.client_state_init()
      else:
        client_state = self._store.read(client_id, version,
                                        form.client_state_spec)
      data = (data, client_state)
    update, new_client_state = form.work(data, c)
    if form.has_client_state:
      self._store.write(client_id, self._round, new_client_state)
      if version is not None:
        self._store.prune(client_id, keep_from=version)
    arrays = tensor_io.flatten(update)
    yield tensor_io.encode(arrays)
    yield beam.pvalue.TaggedOutput('stats', tensor_io.bits(arrays))


class AggregateFn(_FormFn, beam.CombineFn):
  """The form's aggregation tier as a CombineFn; outputs R as bytes."""

  def __init__(self, source):
    self._source = source

  def _accumulator(self, arrays):
    return tensor_io.pack(self.form.accumulator_spec, arrays,
                          what='accumulator')

  def create_accumulator(self):
    return tensor_io.flatten(self.form.zero())

  def add_input(self, accumulator, update_bytes):
    update = tensor_io.pack(self.form.client_update_spec,
                            tensor_io.decode(update_bytes),
                            what='client update')
    return tensor_io.flatten(
        self.form.accumulate(self._accumulator(accumulator), update))

  def merge_accumulators(self, accumulators):
    accumulators = iter(accumulators)
    merged = self._accumulator(next(accumulators))
    for other in accumulators:
      merged = self.form.merge(merged, self._accumulator(other))
    return tensor_io.flatten(merged)

  def extract_output(self, accumulator):
    return tensor_io.encode(tensor_io.flatten(
        self.form.report(self._accumulator(accumulator))))

  def get_accumulator_coder(self):
    return FlatTensorsCoder()


class CountFn(beam.CombineFn):
  """Clients that finished work and the bits of their updates."""

  def create_accumulator(self):
    return 0, 0

  def add_input(self, accumulator, bits):
    return accumulator[0] + 1, accumulator[1] + bits

  def merge_accumulators(self, accumulators):
    counts, bits = zip(*accumulators)
    return sum(counts), sum(bits)

  def extract_output(self, accumulator):
    return {'clients_ok': accumulator[0], 'bits_aggregated': accumulator[1]}


class UpdateFn(_FormFn, beam.DoFn):
  """<S, R> -> <S, X>: writes the new state and the round's outcome."""

  def __init__(self, source, state_path, stage_dir):
    self._source = source
    self._state_path = state_path
    self._stage_dir = stage_dir

  def process(self, report_bytes, broadcast, counts):
    form = self.form
    state = tensor_io.read_tensors(self._state_path, form.state_spec,
                                   what='server state')
    aggregate = tensor_io.pack(form.report.output_spec,
                               tensor_io.decode(report_bytes),
                               what='aggregate')
    new_state, metrics = form.update(state, aggregate)
    tensor_io.write_tensors(os.path.join(self._stage_dir, STATE_FILE),
                            new_state)
    outcome = dict(counts, bits_broadcast_each=broadcast[1],
                   metrics=metrics_to_json(metrics))
    tensor_io.write_atomic(os.path.join(self._stage_dir, OUTCOME_FILE),
                           json.dumps(outcome).encode())
    yield outcome


def build(pipeline, source, data_source, state_store, client_ids,
          round_number, state_path, stage_dir):
  """Adds one round to `pipeline`; its results land in `stage_dir`."""
  broadcast = (
      pipeline
      | 'ServerState' >> beam.Create([state_path])
      | 'Prepare' >> beam.ParDo(PrepareFn(
          source, os.path.join(stage_dir, BROADCAST_FILE))))
  work = (
      pipeline
      | 'ClientIds' >> beam.Create(client_ids)
      | 'Work' >> beam.ParDo(
          WorkFn(source, data_source, state_store, round_number),
          beam.pvalue.AsSingleton(broadcast)).with_outputs(
              'stats', main='updates'))
  counts = work.stats | 'Count' >> beam.CombineGlobally(CountFn())
  return (
      work.updates
      | 'Aggregate' >> beam.CombineGlobally(AggregateFn(source))
      | 'Update' >> beam.ParDo(UpdateFn(source, state_path, stage_dir),
                               beam.pvalue.AsSingleton(broadcast),
                               beam.pvalue.AsSingleton(counts)))


def metrics_to_json(metrics):
  """The form's metrics X as a flat dict path -> number or list."""
  from encoders.core import structures  # pylint: disable=g-import-not-at-top
  result = {}
  for path, leaf in structures.flatten_with_paths(metrics):
    value = leaf.numpy() if hasattr(leaf, 'numpy') else leaf
    if hasattr(value, 'tolist'):
      value = value.tolist()
    if isinstance(value, bytes):
      value = value.decode('utf-8', 'replace')
    result[path or 'value'] = value
  return result
