"""beam_runner: rounds on Beam's in-process runner equal the local loop.

Each process runs a few rounds through `beam_runner.run` and, with the same
sampled clients and client states, through `canonical.run_round`. Results
match bit for bit where no float sum is reordered, to a tight tolerance
otherwise. Then: client data from TFRecord shards, spec checks, atomic
rounds and resuming, bit accounting.
"""

import functools
import json
import os
import pickle
import types

import apache_beam as beam
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
import numpy as np
import pytest
import tensorflow as tf

import beam_runner
from beam_runner.pipeline import round as round_pipeline
from beam_runner.worker_io import tensor_io
import canonical as cf
from canonical import io as storage
from example_processes import client_state_process
from example_processes import no_broadcast_process
from tensor_asserts import assert_same

F = tf.TensorSpec([], tf.float32)
I = tf.TensorSpec([], tf.int32)
F2 = tf.TensorSpec([2], tf.float32)
I3 = tf.TensorSpec([3], tf.int32)


def _local_rounds(form, data, rounds, clients_per_round, seed=0):
  """The local loop over the same sampled clients; yields per round
  (state, metrics, {client: client state kept})."""
  state, kept = form.initialize(), {}
  for number in range(1, rounds + 1):
    ids = beam_runner.sample_clients(list(data), clients_per_round, seed,
                                     number)
    values = [data[i] for i in ids]
    if form.has_client_state:
      state, metrics, states = cf.run_round(form, state, values,
                                            [kept.get(i) for i in ids])
      kept.update(zip(ids, states))
    else:
      state, metrics = cf.run_round(form, state, values)
    yield state, metrics, dict(kept)


def _check_against_local(form, data, rounds, clients_per_round, tmp_path,
                         exact, client_data=None, **run_options):
  data = {str(k): v for k, v in data.items()}
  out = tmp_path / 'run'
  lines = []
  result = beam_runner.run(form, client_data or data, rounds,
                           clients_per_round, out, progress=lines.append,
                           **run_options)
  assert result.rounds == rounds and len(lines) == rounds
  run = beam_runner.RunDir(out)
  kept_paths = run.client_state_paths()
  for number, (state, metrics, kept) in enumerate(
      _local_rounds(form, data, rounds, clients_per_round), start=1):
    beam_state = tensor_io.read_tensors(run.state_path(number),
                                        form.state_spec)
    assert_same(beam_state, state, exact, f'state, round {number}')
    beam_metrics = run.outcome(number)['metrics']
    expected = round_pipeline.metrics_to_json(metrics)
    assert sorted(beam_metrics) == sorted(expected)
    for key in expected:
      assert_same(beam_metrics[key], expected[key], exact,
                   f'metric {key}, round {number}')
  if form.has_client_state:
    assert sorted(kept_paths) == sorted(kept)
  for client, client_state in kept.items():
    assert_same(tensor_io.read_tensors(kept_paths[client],
                                       form.client_state_spec),
                client_state, exact, f'client {client}')
  assert_same(result.state, state, exact, 'final state')
  return result, kept


def timeless(outcome):
  """An outcome without its measured seconds."""
  return {k: v for k, v in outcome.items()
          if k not in ('seconds', 'stage_seconds', 'client_work_seconds')}


# ----------------------------------------------------------------------------
# Tensor files and the accumulator coder


def test_tensor_bytes_round_trip_every_dtype_and_shape():
  arrays = [np.float32(1.5), np.arange(6, dtype=np.int64).reshape(2, 3),
            np.zeros([0, 4], np.float32), np.array([True, False]),
            np.array([b'ab', b'', b'\x00z'], dtype=object),
            np.array(7, np.uint8)]
  decoded = tensor_io.decode(tensor_io.encode(arrays))
  assert len(decoded) == len(arrays)
  for a, d in zip(arrays, decoded):
    assert np.asarray(a).shape == d.shape
    np.testing.assert_array_equal(a, d)
    assert tf.as_dtype(np.asarray(a).dtype) == tf.as_dtype(d.dtype)
  coder = round_pipeline.PartialCoder()
  assert coder.is_deterministic()
  stats = dict(round_pipeline.empty_stats(), ok=2, dropped=[['c', 'r', 'm']])
  again, again_stats = coder.decode(coder.encode([decoded, stats]))
  np.testing.assert_array_equal(again[1], arrays[1])
  assert again_stats == stats
  assert coder.decode(coder.encode([None, stats])) == [None, stats]
  assert tensor_io.bits(arrays) == 32 + 6 * 64 + 0 + 2 * 8 + 8 * 4 + 8
  with pytest.raises(ValueError, match='magic'):
    tensor_io.decode(b'nope' + tensor_io.encode(arrays)[4:])
  data = tensor_io.encode(arrays)
  for damaged in (data[:-3], data[:-4], data[:20]):
    with pytest.raises(ValueError, match='damaged or truncated|Truncated'):
      tensor_io.decode(damaged)
  for position in range(4, len(data), 7):  # Every 7th byte, one bit each.
    flipped = bytearray(data)
    flipped[position] ^= 1 << (position % 8)
    with pytest.raises(ValueError):
      tensor_io.decode(bytes(flipped))
  # Files of the first format, without a CRC, still read.
  old_format = b'FCT1' + data[4:-4]
  np.testing.assert_array_equal(tensor_io.decode(old_format)[1], arrays[1])


def test_form_source_pickles_as_a_small_token():
  form = cf.compile(_sum_process())
  source = beam_runner.FormSource.of(form)
  data = pickle.dumps(source)
  assert len(data) < 1000
  assert pickle.loads(data).get() is form
  assert beam_runner.FormSource.of(source) is source


def test_an_in_memory_form_out_of_its_drivers_reach_is_an_engine_error():
  """A worker process sees no in-memory form: it is told to save it."""
  import gc  # pylint: disable=g-import-not-at-top
  source = beam_runner.FormSource.of(cf.compile(_sum_process()))
  elsewhere = pickle.dumps(source)
  del source  # Its form with it, as in another process.
  gc.collect()
  with pytest.raises(beam_runner.EngineError,
                     match=r"in-memory form '.*' lives in the driver process"
                     r'.*save the form and pass its path'):
    pickle.loads(elsewhere).get()


def test_a_round_of_one_element_is_one_step():
  """Work and Update fuse where there is nothing to merge (each step costs
  the runner ~10 ms); rounds of several elements merge in a combine."""
  import types  # pylint: disable=g-import-not-at-top
  import apache_beam as beam  # pylint: disable=g-import-not-at-top

  def plan(number, elements):
    return round_pipeline.RoundPlan(
        types.SimpleNamespace(round=number), 'state', ['a', 'b'],
        [[round_pipeline.ClientTask('a')], [round_pipeline.ClientTask('b')]
        ][:elements])

  pipeline = beam.Pipeline()
  engine = types.SimpleNamespace(spread=None, gather=None)
  round_pipeline.build(pipeline, engine, None, None,
                       [plan(1, 1), plan(2, 2), plan(3, 1)], min_clients=1)
  steps = [part.full_label for part in pipeline.transforms_stack[0].parts
           if part.full_label.startswith('Round')]
  assert steps == ['Round1InOneStep', 'Round2Work', 'Round2Aggregate',
                   'Round2Update', 'Round3InOneStep']


class _Double(beam.DoFn):

  def process(self, element):
    yield 2 * element


class _Placing(beam.PTransform):
  """A fake engine's spread or gather that runs the DoFn `then` after it,
  as Dask's do in their own tasks."""

  def __init__(self, into_one, then=None):
    super().__init__()
    self._into_one, self._then = into_one, then

  def expand(self, input_or_inputs):
    out = input_or_inputs
    if self._into_one:
      out = out | beam.combiners.ToList()
    return out | beam.ParDo(self._then) if self._then else out


def _fake_engine(spread_runs_steps):
  return types.SimpleNamespace(
      spread=functools.partial(_Placing, False),
      spread_runs_steps=spread_runs_steps,
      gather=functools.partial(_Placing, True))


@pytest.mark.parametrize('spread_runs_steps', [True, False])
def test_the_steps_after_a_gather_or_spread_run_in_its_step(
    spread_runs_steps):
  # An engine with a gather (Dask's is one task listing all elements): the
  # combine and the two steps after it are one Beam step, and, if its spread
  # runs steps, so are a spread and the step after it.
  pipeline = beam.Pipeline()
  step = beam_runner.steps
  out = step.apply(
      pipeline | beam.Create([1, 2, 3]),
      [step.Combine('Count', beam.combiners.CountCombineFn()),
       step.Each('Double', _Double()), step.Each('Again', _Double()),
       step.Spread('Spread'), step.Each('Last', _Double())],
      _fake_engine(spread_runs_steps), 'X', elements=3)
  assert_that(out, equal_to([24]))
  labels = [part.full_label for part in pipeline.transforms_stack[0].parts]
  assert [label for label in labels if label.startswith('X')] == (
      ['XCount', 'XSpread'] if spread_runs_steps else
      ['XCount', 'XSpread', 'XLast'])
  pipeline.run()


def test_sampling_is_a_pure_function_of_seed_and_round():
  ids = [f'c{i}' for i in range(20)]
  first = beam_runner.sample_clients(ids, 5, seed=3, round_number=1)
  assert first == beam_runner.sample_clients(list(reversed(ids)), 5, 3, 1)
  assert len(set(first)) == 5
  assert first != beam_runner.sample_clients(ids, 5, 3, 2)
  assert first != beam_runner.sample_clients(ids, 5, 4, 1)
  assert sorted(beam_runner.sample_clients(ids, 50, 3, 1)) == sorted(ids)


def test_poisson_sampling_takes_each_client_with_probability_q():
  ids = [f'c{i}' for i in range(200)]
  rounds = [beam_runner.sample_clients(ids, 20, 7, r, 'poisson')
            for r in range(1, 101)]
  sizes = [len(r) for r in rounds]
  assert len(set(sizes)) > 5  # The cohort's size varies ...
  assert abs(np.mean(sizes) - 20) < 1.5  # ... around q * N = 20.
  counts = np.bincount([ids.index(c) for r in rounds for c in r],
                       minlength=200)
  assert abs(counts.mean() - 10) < 0.5 and counts.min() > 0  # q * 100.
  assert rounds[0] == beam_runner.sample_clients(list(reversed(ids)), 20, 7,
                                                 1, 'poisson')


def test_a_run_keeps_its_sampling(tmp_path):
  form = cf.compile(_sum_process())
  data = {f'c{i}': np.full([3], i, np.int32) for i in range(12)}
  result = beam_runner.run(form, data, 2, 4, tmp_path / 'run',
                           sampling='poisson', progress=lambda line: None)
  run = beam_runner.RunDir(tmp_path / 'run')
  for number in (1, 2):
    sampled = run.clients(number)
    assert sampled == beam_runner.sample_clients(list(data), 4, 0, number,
                                                 'poisson')
    total = result.outcomes[number - 1]['metrics']['value']
    assert total == np.sum([data[c] for c in sampled], axis=0).tolist()
  with pytest.raises(beam_runner.RunDirError, match='differs in sampling'):
    beam_runner.run(form, data, 3, 4, tmp_path / 'run', progress=lambda line: None)
  with pytest.raises(ValueError, match='sampling must be one of fixed, '
                                       'poisson'):
    beam_runner.run(form, data, 1, 4, tmp_path / 'other', sampling='bernoulli')


# ----------------------------------------------------------------------------
# Equivalence with canonical.run_round


@cf.tf_computation(I)
def _increment(n):
  return n + 1


def _sum_process():

  @cf.federated_computation(cf.server(I), cf.clients(I3))
  def next_fn(state, data):
    return cf.federated_map(_increment, state), cf.federated_sum(data)

  return cf.IterativeProcess(cf.tf_computation(lambda: tf.constant(0)),
                             next_fn)


@pytest.mark.slow
def test_sum_of_integers_is_bit_exact(tmp_path, monkeypatch):
  encoded = []
  encode = round_pipeline.PartialCoder.encode
  monkeypatch.setattr(round_pipeline.PartialCoder, 'encode',
                      lambda self, v: encoded.append(v[0]) or encode(self, v))
  form = cf.compile(_sum_process())
  rng = np.random.default_rng(0)
  data = {f'c{i}': rng.integers(-100, 100, [3]).astype(np.int32)
          for i in range(9)}
  # Two clients per element: partial accumulators to merge in the combine.
  result, _ = _check_against_local(form, data, 3, 4, tmp_path, exact=True,
                                   clients_per_element=2)
  # Accumulators crossed the combine's shuffle through our coder.
  assert encoded and all(len(a) == len(tf.nest.flatten(form.accumulator_spec))
                         for a in encoded)
  assert int(result.state) == 3
  outcome = result.outcomes[0]
  assert outcome['clients_ok'] == 4 and outcome['clients_dropped'] == 0
  # C is empty here; each U is the int32[3] sum input.
  assert outcome['bits_aggregated'] == 4 * 3 * 32


@pytest.mark.slow
def test_weighted_mean_with_broadcast(tmp_path):

  @cf.tf_computation(F2, F2)
  def step(state, mean):
    return 0.5 * state + mean

  @cf.tf_computation((F2, F), F2)
  def shifted(data, center):
    return data[0] - center, data[1]

  @cf.federated_computation(cf.server(F2), cf.clients((F2, F)))
  def next_fn(state, data):
    delta, weight = cf.federated_map(
        shifted, (data, cf.federated_broadcast(state)))
    weighted = cf.federated_mean(delta, weight=weight)
    return cf.federated_map(step, (state, weighted)), cf.federated_mean(delta)

  process = cf.IterativeProcess(
      cf.tf_computation(lambda: tf.ones([2])), next_fn)
  form = cf.compile(process)
  rng = np.random.default_rng(2)
  data = {i: (rng.normal(size=[2]).astype(np.float32),
              np.float32(rng.uniform(0.5, 3.0))) for i in range(7)}
  result, _ = _check_against_local(form, data, 3, 5, tmp_path, exact=False)
  outcome = result.outcomes[-1]
  assert outcome['bits_broadcast'] == 5 * form.broadcast_bits
  assert outcome['bits_aggregated'] == 5 * form.aggregated_bits
  with open(tmp_path / 'run' / 'metrics.jsonl') as f:
    logged = [json.loads(line) for line in f]
  assert [m['round'] for m in logged] == [1, 2, 3]
  assert logged == result.outcomes


@pytest.mark.slow
def test_client_state_is_kept_between_rounds_bit_exact(tmp_path):
  form = cf.compile(client_state_process())
  rng = np.random.default_rng(8)
  data = {f'c{i}': (rng.normal(size=[2]) * 3).astype(np.float32)
          for i in range(5)}
  result, kept = _check_against_local(form, data, 4, 3, tmp_path, exact=True)
  joined = {c: sum(c in result_clients for result_clients in
                   (beam_runner.RunDir(tmp_path / 'run').clients(r)
                    for r in range(1, 5))) for c in data}
  assert {c: int(s[0]) for c, s in kept.items()} == \
      {c: n for c, n in joined.items() if n}
  assert max(joined.values()) >= 2  # Some client came back with its state.
  # Each client keeps one state file: the ones it superseded are deleted.
  files = [f for f in storage.list_files(tmp_path / 'run' / 'rounds')
           if '/client_states/' in f]
  assert sorted(os.path.basename(f) for f in files) == sorted(
      f'{c}.tensors' for c, n in joined.items() if n)


# ----------------------------------------------------------------------------
# Client data from TFRecord shards


BATCH = tf.TensorSpec([None, 2], tf.float32)


def _dataset_process():

  @cf.tf_computation(tf.data.DatasetSpec(BATCH), F2)
  def local_sums(dataset, shift):
    total, count = tf.zeros([2]), tf.constant(0.0)
    for batch in dataset:
      total += tf.reduce_sum(batch + shift, axis=0)
      count += tf.cast(tf.shape(batch)[0], tf.float32)
    return total, count

  @cf.tf_computation(F2, F2, F)
  def mean_of(state, total, count):
    return 0.5 * state + total / count

  @cf.federated_computation(cf.server(F2), cf.clients(
      tf.data.DatasetSpec(BATCH)))
  def next_fn(state, data):
    total, count = cf.federated_map(local_sums,
                                    (data, cf.federated_broadcast(state)))
    counts = cf.federated_sum(count)
    return cf.federated_map(mean_of, (state, cf.federated_sum(total),
                                      counts)), counts

  return cf.IterativeProcess(cf.tf_computation(lambda: tf.zeros([2])),
                             next_fn)


def _datasets(seed, sizes):
  rng = np.random.default_rng(seed)
  return {f'client/{i}': tf.data.Dataset.from_tensor_slices(
      rng.normal(size=[n, 2]).astype(np.float32)).batch(3)
          for i, n in enumerate(sizes)}


@pytest.mark.slow
def test_tfrecord_shards_give_the_same_rounds(tmp_path):
  form = cf.compile(_dataset_process())
  data = _datasets(9, [4, 7, 1, 9, 3])
  source = beam_runner.write_client_data(tmp_path / 'shards', data)
  assert source.client_ids() == sorted(data)
  assert source.spec == tf.data.DatasetSpec(BATCH)
  _check_against_local(form, data, 2, 3, tmp_path, exact=False,
                       client_data=str(tmp_path / 'shards'))


def test_tfrecord_tensor_clients_round_trip(tmp_path):
  data = {'a': {'x': np.float32(1.5), 'y': np.arange(3, dtype=np.int32)},
          '..': {'x': np.float32(-2.0), 'y': np.zeros(3, np.int32)}}
  source = beam_runner.write_client_data(tmp_path / 'shards', data)
  assert source.client_ids() == sorted(data)
  spec = {'x': F, 'y': I3}
  for client, value in data.items():
    assert_same(source.read(client, spec), value, exact=True)


def test_client_data_of_the_wrong_type_is_refused_before_round_one(tmp_path):
  form = cf.compile(_sum_process())
  bad = {'a': np.zeros([3], np.int32), 'b': np.zeros([4], np.int32)}
  with pytest.raises(beam_runner.ClientDataError,
                     match=r"Client 'b'.*int32\[4\].*int32\[3\]"):
    beam_runner.run(form, bad, 1, 2, tmp_path / 'run')
  beam_runner.write_client_data(tmp_path / 'shards',
                                {'a': np.zeros([2], np.float32)})
  with pytest.raises(beam_runner.ClientDataError,
                     match=r'shards.*float32\[2\].*int32\[3\]'):
    beam_runner.run(form, str(tmp_path / 'shards'), 1, 2, tmp_path / 'run')
  assert not (tmp_path / 'run').exists()


# ----------------------------------------------------------------------------
# Atomic rounds and resuming


@pytest.mark.slow
def test_resume_runs_only_uncommitted_rounds_and_ignores_staged_ones(
    tmp_path):
  form = cf.compile(client_state_process())
  rng = np.random.default_rng(3)
  data = {f'c{i}': (rng.normal(size=[2]) * 3).astype(np.float32)
          for i in range(4)}
  whole = beam_runner.run(form, data, 4, 2, tmp_path / 'whole',
                          progress=lambda _: None)
  out = tmp_path / 'resumed'
  beam_runner.run(form, data, 2, 2, out, progress=lambda _: None)
  # A round 3 that died before committing: its state, outcome and the
  # client states its workers wrote.
  run = beam_runner.RunDir(out)
  dead = run.new_attempt(3)
  tensor_io.write_tensors(dead.state_path, form.initialize())
  storage.write_bytes(dead.outcome_path, b'{"metrics": {}}')
  for client in data:
    tensor_io.write_tensors(dead.client_state_path(client),
                            (tf.constant(99), tf.constant([9.0, 9.0])))
  lines = []
  resumed = beam_runner.run(form, data, 4, 2, out, progress=lines.append)
  assert [line.split(':')[0] for line in lines] == ['round 3/4', 'round 4/4']
  assert_same(resumed.state, whole.state, exact=True, what='final state')
  for a, b in zip(resumed.outcomes, whole.outcomes):
    assert timeless(a) == timeless(b)
  with open(out / 'metrics.jsonl') as f:
    assert [json.loads(line)['round'] for line in f] == [1, 2, 3, 4]
  # Round 3's commit named another attempt; the dead one is gone.
  assert not os.path.exists(dead.directory)
  assert os.listdir(out / 'rounds' / '000003') == [run.attempt(3).id]


@pytest.mark.slow
def test_a_failed_round_commits_nothing(tmp_path):
  form = cf.compile(client_state_process())
  data = {f'c{i}': np.ones([2], np.float32) for i in range(3)}
  out = tmp_path / 'run'
  with pytest.raises(beam_runner.RoundError, match='min_clients=5'):
    beam_runner.run(form, data, 2, 3, out, min_clients=5)
  run = beam_runner.RunDir(out)
  assert run.committed_rounds() == [0]
  assert run.client_state_paths() == {}
  assert os.listdir(out / 'rounds') == ['000000']  # The attempt is gone.
  # The same directory then runs the round for real.
  result = beam_runner.run(form, data, 1, 3, out, progress=lambda _: None)
  assert result.rounds == 1
  paths = beam_runner.RunDir(out).client_state_paths()
  assert all(int(tensor_io.read_tensors(paths[c], form.client_state_spec)[0])
             == 1 for c in data)


def test_an_output_directory_of_another_run_is_refused(tmp_path):
  form = cf.compile(_sum_process())
  data = {'a': np.zeros([3], np.int32)}
  beam_runner.run(form, data, 0, 1, tmp_path, seed=1)
  with pytest.raises(beam_runner.RunDirError, match='differs in seed'):
    beam_runner.run(form, data, 0, 1, tmp_path, seed=2)


# ----------------------------------------------------------------------------
# Saved forms and worker processes


@pytest.mark.slow
def test_a_saved_form_runs_as_the_form_in_memory(tmp_path):
  form = cf.compile(client_state_process())
  path = cf.save(form, str(tmp_path / 'form.pb'))
  data = {f'c{i}': np.full([2], i, np.float32) for i in range(4)}
  quiet = lambda _: None
  from_file = beam_runner.run(path, data, 2, 3, tmp_path / 'a', progress=quiet)
  in_memory = beam_runner.run(form, data, 2, 3, tmp_path / 'b',
                              progress=quiet)
  assert_same(from_file.state, in_memory.state, exact=True)
  assert from_file.outcomes[1]['metrics'] == in_memory.outcomes[1]['metrics']


@pytest.mark.slow
def test_multi_processing_workers_load_the_saved_form_and_read_shards(
    tmp_path):
  form = cf.compile(client_state_process())
  data = {f'c{i}': np.full([2], 0.7 * i, np.float32) for i in range(4)}
  options = {'runner': 'DirectRunner',
             'direct_running_mode': 'multi_processing',
             'direct_num_workers': 2}
  with pytest.raises(beam_runner.ClientDataError, match='in-process runner'):
    beam_runner.run(form, data, 1, 3, tmp_path / 'mp', pipeline_options=options)
  shards = beam_runner.write_client_data(tmp_path / 'shards', data)
  quiet = lambda _: None
  result = beam_runner.run(form, shards.directory, 1, 3, tmp_path / 'mp',
                           pipeline_options=options, progress=quiet)
  assert (tmp_path / 'mp' / 'form.pb').exists()
  expected = beam_runner.run(form, data, 1, 3, tmp_path / 'local',
                             progress=quiet)
  assert_same(result.state, expected.state, exact=True)


def test_evaluate_sees_each_new_state_and_its_result_is_committed(tmp_path):
  form = cf.compile(no_broadcast_process())
  data = {f'c{i}': np.float32(i + 1) for i in range(4)}
  seen, committed = [], []

  def evaluate(state):
    seen.append(float(state))
    return {'twice': 2 * float(state)}

  result = beam_runner.run(form, data, 3, 4, tmp_path / 'run',
                           progress=lambda _: None, evaluate=evaluate,
                           on_round=committed.append)
  assert seen == [11.0, 21.0, 31.0]  # The state starts at 1.
  assert [o['evaluation'] for o in result.outcomes] == [
      {'twice': 22.0}, {'twice': 42.0}, {'twice': 62.0}]
  assert committed == result.outcomes
  assert all('evaluate' in o['stage_seconds'] for o in result.outcomes)
  board = beam_runner.tensorboard_log.read(tmp_path / 'run' / 'tensorboard')
  assert board['evaluation/twice'] == [(1, 22.0), (2, 42.0), (3, 62.0)]


def test_a_failing_evaluation_fails_the_round_and_commits_nothing(tmp_path):
  form = cf.compile(no_broadcast_process())
  data = {f'c{i}': np.float32(i + 1) for i in range(4)}

  def evaluate(state):
    if float(state) > 15:
      raise ValueError('test set unreadable')
    return {}

  with pytest.raises(beam_runner.RoundError, match='test set unreadable'):
    beam_runner.run(form, data, 3, 4, tmp_path / 'run',
                    progress=lambda _: None, evaluate=evaluate)
  assert beam_runner.RunDir(tmp_path / 'run').committed_rounds() == [0, 1]


def _smallest_process():
  """Each client's smallest value (+inf for a client without data), and
  the smallest over clients: +inf is the right U of an empty client."""
  rows = tf.data.DatasetSpec(F)

  @cf.tf_computation(rows)
  def smallest(ds):
    return ds.reduce(tf.constant(np.inf, tf.float32), tf.minimum)

  @cf.federated_computation(cf.server(F), cf.clients(rows))
  def next_fn(state, data):
    return state, cf.federated_min(cf.federated_map(smallest, data))

  return cf.IterativeProcess(cf.tf_computation(lambda: tf.constant(0.0)),
                             next_fn)


@pytest.mark.slow
def test_the_non_finite_policy_decides_which_clients_drop(tmp_path):
  process = _smallest_process()
  form = cf.compile(process)
  empty = tf.data.Dataset.from_tensor_slices(np.zeros([0], np.float32))
  data = {'a': tf.data.Dataset.from_tensor_slices(np.float32([3.0, 2.0])),
          'b': empty, 'c': empty}
  ids = sorted(data)
  expected = cf.reference.run_round(process, np.float32(0.0),
                                    [data[i] for i in ids])[1]
  assert float(expected) == 2.0
  outcomes = {}
  for policy in ('drop', 'drop_nan', 'keep'):
    result = beam_runner.run(form, data, 1, 3, tmp_path / policy,
                             non_finite=policy, progress=lambda line: None)
    outcomes[policy] = result.outcomes[0]
  # +-Inf is a dropped client's only under 'drop'.
  assert outcomes['drop']['dropped_reasons'] == {'non-finite update': 2}
  for policy in ('drop_nan', 'keep'):
    assert outcomes[policy]['clients_ok'] == 3
    assert outcomes[policy]['metrics'] == {'value': float(expected)}
  # Only empty clients: the reference's +inf, not a failed round.
  only_empty = {'b': empty, 'c': empty}
  result = beam_runner.run(form, only_empty, 1, 2, tmp_path / 'empty',
                           non_finite='drop_nan', progress=lambda line: None)
  assert result.outcomes[0]['metrics'] == {'value': float('inf')}
  with pytest.raises(beam_runner.RoundError, match='0 of 2 clients'):
    beam_runner.run(form, only_empty, 1, 2, tmp_path / 'empty-drop',
                    progress=lambda line: None)


def test_run_arguments_are_checked_before_anything_is_written(tmp_path):
  form = cf.compile(_sum_process())
  data = {'a': np.int32([1, 2, 3])}
  for arguments, problem in (
      (dict(seed=-1), 'seed must be an integer of at least 0, got -1'),
      (dict(clients_per_round=0), 'clients_per_round must be'),
      (dict(min_clients=0), 'min_clients must be'),
      (dict(rounds_per_pipeline=0), 'rounds_per_pipeline must be'),
      (dict(non_finite='ignore'), "non_finite must be one of drop, "
       "drop_nan, keep, got 'ignore'")):
    kwargs = dict(dict(clients_per_round=1), **arguments)
    with pytest.raises(ValueError, match=problem):
      beam_runner.run(form, data, 1, output_dir=tmp_path / 'run', **kwargs)
    assert not (tmp_path / 'run').exists()


def test_two_slips_are_refused_before_anything_is_written(tmp_path):
  """More clients a round than there are, and a run directory inside the
  client data directory, are named; the data stays as it was."""
  form = cf.compile(_sum_process())
  data = {'a': np.int32([1, 2, 3]), 'b': np.int32([4, 5, 6])}
  with pytest.raises(ValueError, match=r'clients_per_round is 3, but the '
                     r'in-memory client data \(2 clients\) has 2 clients'):
    beam_runner.run(form, data, 1, 3, tmp_path / 'run')
  assert not (tmp_path / 'run').exists()
  shards = tmp_path / 'shards'
  beam_runner.write_client_data(shards, data)
  files = sorted(p for p in shards.rglob('*'))
  (tmp_path / 'link').symlink_to(shards)
  for inside in (shards, shards / 'run', tmp_path / 'link' / 'run'):
    with pytest.raises(beam_runner.RunDirError,
                       match='output directory .* is inside the client data '
                       'directory'):
      beam_runner.run(form, str(shards), 1, 2, inside)
  assert sorted(p for p in shards.rglob('*')) == files
  # A sibling whose name starts as the data's is outside it.
  result = beam_runner.run(form, str(shards), 1, 2, tmp_path / 'shards-run',
                           progress=lambda line: None)
  assert result.rounds == 1
