"""One round of a canonical form as a Beam batch pipeline.

    server state path -> Prepare (C written once; (path, bits) a side input)
    client ids -> Work (each worker reads its clients' data and state itself)
               -> U as bytes -> Aggregate (CombineFn: zero/accumulate/merge/report)
               -> Update -> new state and metrics in the round's staging dir

Only paths, client ids and encoded tensors move through the pipeline; the
form reaches workers as a `FormSource` and is loaded once per process.

A client whose work fails (its data or state cannot be read, its work raises,
or its U or new state holds a NaN or Inf) is dropped: it adds nothing to the
aggregate, keeps its old state, and is counted with its reason. Failures that
are not one client's (the server state, the broadcast, update) fail the round.
"""

import json
import os
import time

import apache_beam as beam
from apache_beam import coders
import numpy as np
import tensorflow as tf

from beam_runner import client_data as client_data_lib
from beam_runner import tensor_io

STATE_FILE = 'state.tensors'
BROADCAST_FILE = 'broadcast.tensors'
OUTCOME_FILE = 'outcome.json'

# Clients named with their error in a round's outcome (the rest are counted).
MAX_DROPPED_NAMED = 10

UNREADABLE = 'unreadable data'
UNREADABLE_STATE = 'unreadable client state'
NON_FINITE_UPDATE = 'non-finite update'
NON_FINITE_STATE = 'non-finite client state'
WORK_FAILED = 'work failed'


class ClientDropped(Exception):
  """One client's work failed; `reason` is one of the reasons above."""

  def __init__(self, reason, message):
    super().__init__(f'{reason}: {message}')
    self.reason = reason


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
  """S -> C, written once; yields `(C path, bits of C, seconds)`."""

  def __init__(self, source, broadcast_path):
    self._source = source
    self._output_path = broadcast_path

  def process(self, state_path):
    start = time.perf_counter()
    state = tensor_io.read_tensors(state_path, self.form.state_spec,
                                   what='server state')
    bits = tensor_io.write_tensors(self._output_path, self.form.prepare(state))
    yield self._output_path, bits, time.perf_counter() - start


class WorkFn(_FormFn, beam.DoFn):
  """<D, C> -> <U, Y> for one client id; U leaves as bytes, Y to the store.

  Also yields, tagged 'stats', the bits of the client's U and the seconds
  its work took; or, tagged 'dropped', `(client id, reason, message)`.
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
    start = time.perf_counter()
    c = self._load_broadcast(broadcast[0])  # Not the client's: fails the round.
    try:
      arrays, new_client_state, version = self._work(client_id, c)
    except ClientDropped as e:
      yield beam.pvalue.TaggedOutput('dropped', (client_id, e.reason, str(e)))
      return
    if self.form.has_client_state:
      self._store.write(client_id, self._round, new_client_state)
      if version is not None:
        self._store.prune(client_id, keep_from=version)
    yield tensor_io.encode(arrays)
    yield beam.pvalue.TaggedOutput(
        'stats', (tensor_io.bits(arrays), time.perf_counter() - start))

  def _work(self, client_id, c):
    """(U's arrays, new client state, version read); raises ClientDropped."""
    form = self.form
    try:
      data = self._data.read(client_id, form.client_data_spec)
    except Exception as e:  # pylint: disable=broad-except
      raise ClientDropped(UNREADABLE, _message(e)) from e
    version = None
    if form.has_client_state:
      version = self._store.latest(client_id, self._round)
      try:
        client_state = form.client_state_init() if version is None else \
            self._store.read(client_id, version, form.client_state_spec)
      except (OSError, ValueError) as e:
        raise ClientDropped(UNREADABLE_STATE, _message(e)) from e
      data = (data, client_state)
    try:
      update, new_client_state = form.work(data, c)
    except (tf.errors.DataLossError, tf.errors.NotFoundError,
            client_data_lib.ClientDataError) as e:  # Datasets read lazily.
      raise ClientDropped(UNREADABLE, _message(e)) from e
    except Exception as e:  # pylint: disable=broad-except
      raise ClientDropped(WORK_FAILED, _message(e)) from e
    arrays = tensor_io.flatten(update)
    if not all_finite(arrays):
      raise ClientDropped(NON_FINITE_UPDATE, 'its update holds NaN or Inf')
    if form.has_client_state and not all_finite(
        tensor_io.flatten(new_client_state)):
      raise ClientDropped(NON_FINITE_STATE,
                          'its new client state holds NaN or Inf')
    return arrays, new_client_state, version


def all_finite(arrays):
  """Whether every float or complex value in `arrays` is finite."""
  return all(np.all(np.isfinite(a)) for a in arrays
             if np.issubdtype(a.dtype, np.inexact))


def _message(error):
  text = str(error).strip().splitlines()
  text = text[0] if text else ''
  return f'{type(error).__name__}: {text[:300]}'


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
  """Clients that finished work, the bits of their updates, their seconds."""

  def create_accumulator(self):
    return 0, 0, 0.0

  def add_input(self, accumulator, stats):
    bits, seconds = stats
    return accumulator[0] + 1, accumulator[1] + bits, accumulator[2] + seconds

  def merge_accumulators(self, accumulators):
    counts, bits, seconds = zip(*accumulators)
    return sum(counts), sum(bits), sum(seconds)

  def extract_output(self, accumulator):
    return {'clients_ok': accumulator[0], 'bits_aggregated': accumulator[1],
            'client_work_seconds': accumulator[2]}


class DroppedFn(beam.CombineFn):
  """Dropped clients: a count per reason and the first few by name."""

  def create_accumulator(self):
    return {}, {}

  def add_input(self, accumulator, dropped):
    client_id, reason, message = dropped
    reasons, named = accumulator
    reasons[reason] = reasons.get(reason, 0) + 1
    named[client_id] = message
    return reasons, _first(named)

  def merge_accumulators(self, accumulators):
    reasons, named = {}, {}
    for more_reasons, more_named in accumulators:
      for reason, count in more_reasons.items():
        reasons[reason] = reasons.get(reason, 0) + count
      named.update(more_named)
    return reasons, _first(named)

  def extract_output(self, accumulator):
    reasons, named = accumulator
    return {'dropped_reasons': dict(sorted(reasons.items())),
            'dropped_clients': named}


def _first(named):
  return {k: named[k] for k in sorted(named)[:MAX_DROPPED_NAMED]}


class UpdateFn(_FormFn, beam.DoFn):
  """<S, R> -> <S, X>: writes the new state and the round's outcome."""

  def __init__(self, source, state_path, stage_dir):
    self._source = source
    self._state_path = state_path
    self._stage_dir = stage_dir

  def process(self, report_bytes, broadcast, counts, dropped):
    start = time.perf_counter()
    form = self.form
    state = tensor_io.read_tensors(self._state_path, form.state_spec,
                                   what='server state')
    aggregate = tensor_io.pack(form.report.output_spec,
                               tensor_io.decode(report_bytes),
                               what='aggregate')
    new_state, metrics = form.update(state, aggregate)
    tensor_io.write_tensors(os.path.join(self._stage_dir, STATE_FILE),
                            new_state)
    outcome = dict(counts, **dropped, bits_broadcast_each=broadcast[1],
                   prepare_seconds=broadcast[2],
                   update_seconds=time.perf_counter() - start,
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
              'stats', 'dropped', main='updates'))
  counts = work.stats | 'Count' >> beam.CombineGlobally(CountFn())
  dropped = work.dropped | 'Dropped' >> beam.CombineGlobally(DroppedFn())
  return (
      work.updates
      | 'Aggregate' >> beam.CombineGlobally(AggregateFn(source))
      | 'Update' >> beam.ParDo(UpdateFn(source, state_path, stage_dir),
                               beam.pvalue.AsSingleton(broadcast),
                               beam.pvalue.AsSingleton(counts),
                               beam.pvalue.AsSingleton(dropped)))


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
