"""Rounds on a real Dask cluster: a `dask.distributed.LocalCluster` of two
worker processes on 127.0.0.1 (no dashboard), started for this module and
stopped after it, is the same code path as a multi-machine cluster.

Each sampled client's work runs exactly once per round and clients spread
over the workers, as do the elements of each `Spread` (each on the same
worker at every one, and at the round's first step: a secure round draws
each client's keys on one worker); federated averaging (plain, with
encoders, with client state) gives the in-process runner's results up to
float summation order; an unreachable scheduler, a worker's address given
as the scheduler's, or a worker running another version of the project is
one clear error before any round.
"""

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

import beam_runner
from beam_runner import engines
from beam_runner import testing
from beam_runner.worker_io import tensor_io
import canonical as cf
from canonical import learning
from canonical.learning import algorithms
from canonical.learning import framework
from canonical.learning import models
import encoders as te
from example_processes import client_state_process
from example_processes import random_floats
from example_processes import secure_sums_process
from example_processes import sum_process
from example_processes import summed_process
from s3_server import refusing_port

pytestmark = pytest.mark.slow


@pytest.fixture(scope='module')
def dask_address():
  cluster = engines.start_local_cluster(2, lifetime='20 minutes')
  try:
    yield cluster.scheduler_address
  finally:
    cluster.close()


def _on(address, **more):
  return dict({'runner': 'DaskRunner', 'dask_client_address': address}, **more)


class CountingClientData(beam_runner.TFRecordClientData):
  """Shards that log every read (client id and worker pid) to a file."""

  def __init__(self, directory, log_path):
    super().__init__(directory)
    self.log_path = log_path

  def read(self, client_id, spec):
    with open(self.log_path, 'a') as f:  # One short append: atomic.
      f.write(f'{client_id} {os.getpid()}\n')
    return super().read(client_id, spec)


def _worker_settings():
  import dask  # pylint: disable=g-import-not-at-top
  return dict(trim=os.environ.get('MALLOC_TRIM_THRESHOLD_'),
              intra=os.environ.get('TF_NUM_INTRAOP_THREADS'),
              profile=dask.config.get('distributed.worker.profile.enabled'),
              tick=dask.config.get('distributed.admin.tick.interval'),
              memory=dask.config.get(
                  'distributed.worker.memory.monitor-interval'))


def test_local_cluster_workers_are_quiet_and_single_threaded(dask_address):
  # Their wake-ups and a malloc trim threshold slow TensorFlow (see
  # engines.QUIET_CLUSTER_SETTINGS); the driver's own settings stay as they
  # were.
  import dask  # pylint: disable=g-import-not-at-top
  client = engines.connect(dask_address)
  try:
    found = client.run(_worker_settings)
  finally:
    client.close()
  assert len(found) == 2
  for settings in found.values():
    assert settings == dict(trim=None, intra='1', profile=False, tick='1s',
                            memory='1s')
  assert dask.config.get('distributed.worker.profile.enabled') is True
  assert dask.config.get('distributed.admin.tick.interval') == '20ms'


def test_each_client_works_exactly_once_per_round_spread_over_workers(
    dask_address, tmp_path):
  form = cf.compile(client_state_process())
  data = {k: v * 3 for k, v in random_floats(5, 10).items()}
  beam_runner.write_client_data(tmp_path / 'shards', data)
  log = tmp_path / 'reads.log'
  source = CountingClientData(str(tmp_path / 'shards'), str(log))
  result = beam_runner.run(form, source, 3, 6, tmp_path / 'run',
                           pipeline_options=_on(dask_address),
                           progress=lambda _: None)
  run = beam_runner.RunDir(tmp_path / 'run')
  sampled = [c for r in (1, 2, 3) for c in run.clients(r)]
  reads = [line.split() for line in log.read_text().splitlines()]
  assert sorted(c for c, _ in reads) == sorted(sampled)
  workers = {int(pid) for _, pid in reads}
  assert len(workers) == 2 and os.getpid() not in workers
  for outcome in result.outcomes:
    assert outcome['clients_ok'] == 6
    assert len(outcome['clients_per_worker']) == 2
    assert sum(outcome['clients_per_worker'].values()) == 6
    assert outcome['engine'].startswith('DaskRunner at tcp://127.0.0.1:')


def test_chained_rounds_on_dask_are_one_pipeline_and_equal_rounds_alone(
    dask_address, tmp_path, monkeypatch):
  # Client state is what a chain must carry right: a client sampled again in
  # a later round of the same pipeline starts from the state its earlier
  # round wrote.
  form = cf.compile(client_state_process())
  data = {k: v * 3 for k, v in random_floats(4, 10).items()}
  beam_runner.write_client_data(tmp_path / 'shards', data)
  source = beam_runner.TFRecordClientData(str(tmp_path / 'shards'))
  pipelines = []
  real_run = engines.DaskEngine.run
  monkeypatch.setattr(engines.DaskEngine, 'run', lambda self, pipeline: (
      pipelines.append(pipeline), real_run(self, pipeline))[1])
  results = {}
  for chained in (4, 1):
    pipelines.clear()
    results[chained] = beam_runner.run(
        form, source, 4, 3, tmp_path / f'run{chained}',
        pipeline_options=_on(dask_address), rounds_per_pipeline=chained,
        progress=lambda _: None)
    assert len(pipelines) == 4 // chained
  for one, alone in zip(results[4].outcomes, results[1].outcomes):
    assert one['clients_ok'] == alone['clients_ok'] == 3
    assert len(one['clients_per_worker']) == 2  # Each round spread.
  tf.nest.map_structure(np.testing.assert_array_equal, results[4].state,
                        results[1].state)
  kept = [beam_runner.RunDir(tmp_path / f'run{n}').client_state_paths()
          for n in (4, 1)]
  assert sorted(kept[0]) == sorted(kept[1]) and kept[0]
  for client in kept[0]:
    tf.nest.map_structure(
        np.testing.assert_array_equal,
        *[tensor_io.read_tensors(paths[client], form.client_state_spec)
          for paths in kept])


def _tag_worker(element, stage):
  from dask import distributed  # pylint: disable=g-import-not-at-top
  return element + [(stage, distributed.get_worker().address)]


def _record(element, path):
  with open(path, 'a') as f:  # One short append: atomic.
    f.write(json.dumps(element) + '\n')


def test_spread_places_each_element_on_its_worker_at_every_spread(
    dask_address, tmp_path):
  # Beam's Reshuffle is a no-op on Dask: after a gather, every step would
  # run on the gathering worker.
  import apache_beam as beam  # pylint: disable=g-import-not-at-top
  log = str(tmp_path / 'elements.jsonl')
  with engines.open_engine(_on(dask_address)) as engine:
    pipeline = engine.pipeline(6)
    _ = (pipeline
         | beam.Create([[i] for i in range(6)])
         | 'Work' >> beam.Map(_tag_worker, 'work')
         | engine.gather()
         | beam.FlatMap(sorted)
         | 'Spread1' >> engine.spread()
         | 'First' >> beam.Map(_tag_worker, 'first')
         | 'Spread2' >> engine.spread()
         | 'Second' >> beam.Map(_tag_worker, 'second')
         | beam.Map(_record, log))
    engine.run(pipeline)
  elements = sorted(json.loads(line) for line in open(log))
  assert [e[0] for e in elements] == list(range(6))
  workers = sorted({w for e in elements for _, w in e[1:]})
  assert len(workers) == 2
  for index, *stages in elements:
    assert dict(stages)['work'] == workers[index % 2]  # Create's too.
    assert dict(stages)['first'] == workers[index % 2]
    assert dict(stages)['second'] == workers[index % 2]


class _Tag:
  """A DoFn tagging its element with where it ran, counting its set-ups."""

  def __init__(self, stage):
    self._stage = stage
    self._setups = 0

  def setup(self):
    self._setups += 1

  def process(self, element):
    yield _tag_worker(element, self._stage) + [self._setups]


class _Split:

  def process(self, lists):
    yield from sorted(lists)


class _Record:

  def __init__(self, path):
    self._path = path

  def process(self, element):
    _record(element, self._path)
    yield element


def test_the_steps_after_a_spread_run_in_its_tasks_on_its_workers(
    dask_address, tmp_path):
  import apache_beam as beam  # pylint: disable=g-import-not-at-top
  from beam_runner.pipeline import steps  # pylint: disable=g-import-not-at-top
  log = str(tmp_path / 'elements.jsonl')
  with engines.open_engine(_on(dask_address)) as engine:
    pipeline = engine.pipeline(6)
    _ = steps.apply(
        pipeline | beam.Create([[[i] for i in range(6)]]),
        [steps.Collect('All'), steps.Each('Split', _Split()),
         steps.Spread('Spread'), steps.Each('First', _Tag('first')),
         steps.Each('Record', _Record(log))],
        engine, 'X', elements=2)
    labels = [part.full_label for part in pipeline.transforms_stack[0].parts]
    assert [label for label in labels if label.startswith('X')] == [
        'XAll', 'XSpread']  # Split runs in All, First and Record in Spread.
    engine.run(pipeline)
  elements = sorted(json.loads(line) for line in open(log))
  assert [e[0] for e in elements] == list(range(6))
  workers = sorted({e[1][1] for e in elements})
  assert len(workers) == 2
  for index, (_, worker), setups in elements:
    assert worker == workers[index % 2]  # Dealt in order, on pinned workers.
    assert setups == 1  # Each task set its own copy up once.


def test_a_gather_of_nothing_combines_to_nothing_on_dask(dask_address,
                                                        tmp_path):
  import apache_beam as beam  # pylint: disable=g-import-not-at-top
  from beam_runner.pipeline import steps  # pylint: disable=g-import-not-at-top
  log = tmp_path / 'combined.jsonl'
  with engines.open_engine(_on(dask_address)) as engine:
    pipeline = engine.pipeline(2)
    numbers = pipeline | beam.Create([1, 2])
    for name, keep in (('Some', lambda x: True), ('None', lambda x: False)):
      combined = steps.apply(
          numbers | f'{name}Filter' >> beam.Filter(keep),
          [steps.Combine('Sum', beam.combiners.CountCombineFn())], engine,
          name, elements=2)
      _ = combined | f'{name}Record' >> beam.Map(_record, str(log))
    engine.run(pipeline)
  # Both branches are ends of the pipeline: each ran (Beam's DaskRunner
  # computed only its last bag), and the empty one combined to nothing.
  assert log.read_text().splitlines() == ['2']


def test_integer_sums_on_dask_are_bit_exact(dask_address):
  rng = np.random.default_rng(0)
  data = {f'c{i}': rng.integers(-100, 100, [3]).astype(np.int32)
          for i in range(9)}
  testing.assert_rounds_match(sum_process(), data, rounds=3,
                              clients_per_round=4, rtol=0, atol=0,
                              pipeline_options=_on(dask_address))


def test_secure_sums_on_dask_are_bit_exact(dask_address):
  """The masking protocol's stages on Dask workers: every step of every
  client on some worker, the sums exact."""
  rng = np.random.default_rng(1)
  data = {f'c{i}': rng.integers(0, 16, [3]).astype(np.int32)
          for i in range(9)}
  result = testing.assert_rounds_match(
      secure_sums_process(), data, rounds=2, clients_per_round=6, rtol=0,
      atol=0, pipeline_options=_on(dask_address), clients_per_element=2)
  for outcome in result.outcomes:
    assert outcome['clients_ok'] == 6
    assert len(outcome['clients_per_worker']) == 2


def _drawn_clients():
  """{round file: the client ids this worker drew keys for in that round}."""
  from beam_runner.secure import clients as secure_clients  # pylint: disable=g-import-not-at-top
  by_round = secure_clients._CLIENTS_BY_ROUND._values  # pylint: disable=protected-access
  return {path: sorted(clients._values) for path, clients in by_round.items()}  # pylint: disable=protected-access


def test_a_secure_round_draws_each_client_on_one_worker(dask_address,
                                                         tmp_path):
  # A batch's work, key sharing, masking and unmasking all run on the worker
  # its Create partition is pinned to: its clients' keys are drawn there only.
  from dask import distributed  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(2)
  data = {f'c{i}': rng.integers(0, 16, [3]).astype(np.int32)
          for i in range(8)}
  beam_runner.write_client_data(tmp_path / 'shards', data)
  out = tmp_path / 'run'
  result = beam_runner.run(cf.compile(secure_sums_process()),
                           str(tmp_path / 'shards'), 1, 8, out,
                           pipeline_options=_on(dask_address),
                           clients_per_element=2, progress=lambda _: None)
  assert result.outcomes[0]['clients_ok'] == 8
  with distributed.Client(dask_address) as client:
    drawn = [ids for by_round in client.run(_drawn_clients).values()
             for path, ids in by_round.items() if path.startswith(str(out))]
  assert len(drawn) == 2 and all(drawn)  # Both workers, this round.
  assert sorted(drawn[0] + drawn[1]) == sorted(
      beam_runner.RunDir(out).clients(1))  # Each client on one worker.


def test_client_state_comes_back_with_the_client_on_dask(dask_address):
  data = {k: v * 3 for k, v in random_floats(8, 5).items()}
  result = testing.assert_rounds_match(
      client_state_process(), data, rounds=4, clients_per_round=3,
      pipeline_options=_on(dask_address))
  assert result.rounds == 4


def _digit_clients(count=5):
  rng = np.random.default_rng(3)
  return {f'c{i}': tf.data.Dataset.from_tensor_slices((
      rng.uniform(size=[12, 8, 8, 1]).astype(np.float32),
      rng.integers(0, 10, [12]).astype(np.int32))).batch(6)
          for i in range(count)}


@pytest.fixture(scope='module')
def model():
  return learning.KerasFunctionalModel.from_keras(models.small_8x8, seed=0)


def test_federated_averaging_on_dask_equals_the_in_process_runner(
    dask_address, model):
  process = algorithms.build_federated_averaging_process(
      model, lambda: learning.sgd(0.1))
  testing.assert_rounds_match(process, _digit_clients(), rounds=2,
                              clients_per_round=4,
                              pipeline_options=_on(dask_address))


def _large_ones(wrap, encoder):

  def build(spec):
    if spec.shape.num_elements() > 100:  # The two dense kernels.
      return wrap(encoder(), spec)
    return wrap(te.encoders.identity(), spec)

  return build


def test_encoded_federated_averaging_on_dask(dask_address, model):
  process = algorithms.build_federated_averaging_process(
      model, lambda: learning.sgd(0.1),
      broadcast_process=framework.build_encoded_broadcast_process_from_model(
          model, _large_ones(te.encoders.as_simple_encoder,
                             lambda: te.encoders.uniform_quantization(8))),
      aggregation_process=framework.build_encoded_mean_process_from_model(
          model, _large_ones(te.encoders.as_gather_encoder,
                             lambda: te.encoders.uniform_quantization(8))))
  # Workers merge float sums in another order than the reference, and the
  # next round's stochastic rounding is seeded by the resulting model: one
  # round compares exactly what was meant.
  testing.assert_rounds_match(process, _digit_clients(), rounds=1,
                              clients_per_round=4,
                              pipeline_options=_on(dask_address))


def test_error_feedback_in_client_state_on_dask(dask_address, model, tmp_path):
  """Top-k with error feedback: encoders and client state together; every
  client state Dask kept equals the in-process runner's."""
  process = algorithms.build_federated_averaging_process(
      model, lambda: learning.sgd(0.1),
      aggregation_process=framework.build_encoded_mean_process_from_model(
          model, _large_ones(te.encoders.as_gather_encoder,
                             lambda: te.encoders.top_k(0.1)),
          error_feedback=True))
  form = cf.compile(process)
  data = _digit_clients(4)
  shards = beam_runner.write_client_data(tmp_path / 'shards', data)
  quiet = lambda _: None
  on_dask = beam_runner.run(form, shards.directory, 3, 3, tmp_path / 'dask',
                            pipeline_options=_on(dask_address),
                            progress=quiet)
  in_process = beam_runner.run(form, data, 3, 3, tmp_path / 'local',
                               progress=quiet)
  for a, b in zip(tf.nest.flatten(on_dask.state),
                  tf.nest.flatten(in_process.state)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  kept = beam_runner.RunDir(tmp_path / 'dask').client_state_paths()
  expected = beam_runner.RunDir(tmp_path / 'local').client_state_paths()
  assert sorted(kept) == sorted(expected) and len(kept) == 4
  for client in kept:
    for a, b in zip(
        tf.nest.flatten(beam_runner.tensor_io.read_tensors(
            kept[client], form.client_state_spec)),
        tf.nest.flatten(beam_runner.tensor_io.read_tensors(
            expected[client], form.client_state_spec))):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_an_unreachable_scheduler_is_one_error_before_any_round(tmp_path):
  form = cf.compile(sum_process())
  shards = beam_runner.write_client_data(
      tmp_path / 'shards', {'a': np.zeros([3], np.int32)})
  start = time.monotonic()
  with refusing_port() as port, pytest.raises(
      beam_runner.EngineError, match=r'Cannot reach the Dask scheduler at '
      r'tcp://127\.0\.0\.1:\d+ within 2 s'):
    beam_runner.run(form, shards.directory, 1, 1, tmp_path / 'run',
                    pipeline_options=_on(f'tcp://127.0.0.1:{port}',
                                         dask_connection_timeout=2))
  assert time.monotonic() - start < 30
  assert not (tmp_path / 'run').exists()



def _slow_work(x):
  """Seconds of work for one float (pure)."""
  _, y = tf.while_loop(lambda i, y: i < 60_000_000,
                       lambda i, y: (i + 1, y + 1e-7), (tf.constant(0), x))
  return y


def test_a_scheduler_lost_mid_round_is_named(tmp_path):
  """Its futures end cancelled, and the round once failed as 'no update
  ran'. The scheduler and its worker are processes of their own here, so
  that the test can kill the scheduler; both listen on 127.0.0.1 and are
  killed at the end."""
  form = cf.compile(summed_process(_slow_work))
  shards = beam_runner.write_client_data(
      tmp_path / 'shards', {f'c{i}': np.float32(i) for i in range(4)})
  scheduler_file = tmp_path / 'scheduler.json'
  dask = os.path.join(os.path.dirname(sys.executable), 'dask')
  scheduler = subprocess.Popen(
      [dask, 'scheduler', '--host', '127.0.0.1', '--port', '0',
       '--no-dashboard', '--scheduler-file', str(scheduler_file),
       '--idle-timeout', '300'], stderr=subprocess.DEVNULL)
  worker = None
  try:
    deadline = time.monotonic() + 60
    while not scheduler_file.exists() and time.monotonic() < deadline:
      time.sleep(0.2)
    worker = subprocess.Popen(
        [dask, 'worker', '--scheduler-file', str(scheduler_file),
         '--nthreads', '1', '--no-dashboard', '--host', '127.0.0.1',
         '--death-timeout', '60', '--lifetime', '10 minutes'],
        stderr=subprocess.DEVNULL)
    address = json.loads(scheduler_file.read_text())['address']
    from dask import distributed  # pylint: disable=g-import-not-at-top
    with distributed.Client(address, timeout=30) as client:
      client.wait_for_workers(1, timeout=60)
    timer = threading.Timer(6.0, scheduler.kill)
    timer.start()
    try:
      with pytest.raises(beam_runner.RoundError,
                         match=f'Lost the Dask scheduler at {address} '
                         'mid-pipeline'):
        beam_runner.run(form, shards.directory, 1, 4, tmp_path / 'run',
                        pipeline_options=_on(address),
                        progress=lambda line: None)
    finally:
      timer.cancel()
    assert scheduler.poll() is not None  # It died mid-round, not before.
    assert beam_runner.RunDir(tmp_path / 'run').last_committed() == 0
  finally:
    for process in (worker, scheduler):
      if process is not None:
        process.kill()
        process.wait(timeout=60)


def test_a_client_loop_that_does_not_start_is_not_blamed_on_the_address(
    monkeypatch):
  """distributed's own check that its client's event loop started (seen in
  CI on a busy machine) is this process's failure: the error says so and
  names neither an unreachable scheduler nor a worker's address."""
  from dask import distributed  # pylint: disable=g-import-not-at-top

  def no_loop(*args, **kwargs):
    del args, kwargs
    raise AssertionError('loop did not start within 10 s')

  monkeypatch.setattr(distributed, 'Client', no_loop)
  with pytest.raises(beam_runner.EngineError) as error:
    engines.connect('tcp://127.0.0.1:8786', timeout=1)
  message = str(error.value)
  assert "could not start the Dask client's event loop" in message
  assert 'loop did not start within 10 s' in message
  assert 'worker' not in message and 'Cannot reach' not in message

_WORKER = '''
import sys
sys.path[:0] = sys.argv[1].split(',')
from distributed.cli.dask_worker import main
sys.argv = ['dask worker', sys.argv[2], '--nthreads', '1', '--no-dashboard',
            '--host', '127.0.0.1', '--lifetime', '5 minutes']
main()
'''


def _site_packages_without_the_project(tmp_path):
  """A copy (of links) of this venv's site-packages lacking fedcanon."""
  site = next(p for p in sys.path if p.endswith('site-packages'))
  copy = tmp_path / 'site-packages'
  copy.mkdir()
  for name in os.listdir(site):
    if 'fedcanon' not in name and not name.endswith('.pth'):
      (copy / name).symlink_to(os.path.join(site, name))
  return str(copy)


@pytest.mark.parametrize('node', ['another version', 'not installed'])
def test_a_worker_without_the_drivers_project_is_refused(node, dask_address,
                                                          tmp_path):
  """A foreign worker joins the module's cluster for this test only: a
  second in-process cluster would start a second IO loop thread here."""
  if node == 'another version':  # A fedcanon 0.0.1 found before ours.
    fake = tmp_path / 'site' / 'fedcanon-0.0.1.dist-info'
    fake.mkdir(parents=True)
    (fake / 'METADATA').write_text('Metadata-Version: 2.1\nName: fedcanon\n'
                                   'Version: 0.0.1\n')
    command = [sys.executable, '-c', _WORKER, str(tmp_path / 'site')]
    ours = importlib.metadata.version('fedcanon').replace('.', r'\.')
    expected = rf'runs fedcanon 0\.0\.1, this driver {ours}'
  else:  # Python without site-packages, then every package but ours.
    command = [sys.executable, '-S', '-c', _WORKER,
               _site_packages_without_the_project(tmp_path)]
    expected = (r'does not have fedcanon installed \(PackageNotFoundError.*'
                r'install this project on every node')
  client = engines.connect(dask_address)
  ours = set(client.nthreads())
  worker = subprocess.Popen(command + [dask_address],
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=tmp_path)
  try:
    client.wait_for_workers(len(ours) + 1, timeout=60)
    (foreign,) = set(client.nthreads()) - ours
    shards = beam_runner.write_client_data(
        tmp_path / 'shards', {'a': np.zeros([3], np.int32)})
    with pytest.raises(beam_runner.EngineError,
                       match=re.escape(f'Dask worker {foreign} ') + expected):
      beam_runner.run(cf.compile(sum_process()), shards.directory, 1, 1,
                      tmp_path / 'run', pipeline_options=_on(dask_address))
    assert not (tmp_path / 'run').exists()
  finally:
    worker.terminate()
    worker.wait(30)
    deadline = time.monotonic() + 30  # The cluster as the next test knows it.
    while set(client.nthreads()) != ours and time.monotonic() < deadline:
      time.sleep(0.1)
    client.close()


def test_a_workers_address_given_as_the_scheduler_is_one_clear_error(
    dask_address, tmp_path):
  from dask import distributed  # pylint: disable=g-import-not-at-top
  with distributed.Client(dask_address) as client:
    worker = sorted(client.nthreads())[0]
  form = cf.compile(sum_process())
  shards = beam_runner.write_client_data(
      tmp_path / 'shards', {'a': np.zeros([3], np.int32)})
  with pytest.raises(beam_runner.EngineError,
                     match=f'{worker} did not answer as a Dask scheduler .*'
                     'worker\'s address'):
    beam_runner.run(form, shards.directory, 1, 1, tmp_path / 'run',
                    pipeline_options=_on(worker, dask_connection_timeout=5))
  assert not (tmp_path / 'run').exists()
