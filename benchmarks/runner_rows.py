"""What one row of `benchmarks/runner.py` measures, in its own process.

The parent (`benchmarks.runner`) prepares the forms and client shards once and
starts one child process per row (`python -m benchmarks.runner --child TASK`);
the child calls `measure(task)` here and writes the row as JSON. Every module
imported at the top of this file is from the standard library: a Dask
cluster's worker processes start by re-importing the child's main module
(`benchmarks.runner`, which imports this one), and must not pay for
TensorFlow there.

A task says:
  kind     'time': the small form's round 2 end to end, in its own
                   `beam_runner.run` call after round 1 (the warm-up); then the
                   local loop over round 2's clients.
           'memory': one round of the small form (in_memory), peak RSS.
           'rounds': the small form as rounds run in practice: a warm-up
                   round, then `rounds` rounds in ONE `beam_runner.run` call
                   (the runner chains rounds into pipelines as it sees fit);
                   `round_seconds` is that call's time over `rounds`. With
                   local files, the local loop then runs the same rounds (the
                   clients each committed round sampled, states chained from
                   the committed round 1) and `local_seconds` is its mean.
           'cnn':  the tutorial CNN on Fashion-MNIST, the same measure as
                   'rounds' (warm-up round, then `rounds` rounds) either on
                   Beam (mode 'dask') or in the local loop alone (mode 'loop':
                   rounds 1..rounds+1 of `canonical.run_round` on the clients
                   `beam_runner.sample_clients` draws, which are the ones the
                   runner samples; round 1 is the warm-up).
  mode     'in_memory' (Beam's in-process runner), 'multi_processing'
           (DirectRunner, `workers` processes), 'dask' (a local Dask cluster
           of `workers` processes, started once in this process, its workers
           warmed by importing the runner and by the warm-up round), 'loop'.
  storage  'local', or 's3': a moto S3 server on 127.0.0.1 is started in this
           process, and the form, the client shards and the run directory
           are put in a new bucket on it before anything is timed.
  threads  None (inherit), '1' or 'default': TensorFlow's threads per
           process; the parent sets the child's environment to match and
           a Dask cluster's workers get the same setting.
"""

import contextlib
import importlib.util
import json
import os
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VECTOR = 4538  # Parameters of small_8x8.
SEED = 0
THREAD_VARS = ('TF_NUM_INTRAOP_THREADS', 'TF_NUM_INTEROP_THREADS')
# Set in Dask workers by distributed's nanny (distributed.nanny.
# pre-spawn-environ); a malloc trim threshold costs TensorFlow dearly.
WATCHED_ENV = ('MALLOC_TRIM_THRESHOLD_', 'OMP_NUM_THREADS')
# TensorFlow reads these once, when it starts; a value that is not a positive
# integer ('0' here) means its default (one thread per core for each pool).
DEFAULT_THREADS_ENV = {name: '0' for name in THREAD_VARS}
# The tutorial's federated averaging on Fashion-MNIST (pipelines.fedavg).
CNN = dict(dataset='fashion_mnist', model='cnn_28x28', num_clients=100,
           clients_per_round=10, epochs=1, batch_size=20, partition='iid')


# ---------------------------------------------------------------------------
# Inputs (built once, in the parent)


def build_process():
  """Weighted mean of (data - state) over the clients; the state steps there."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import canonical as cf  # pylint: disable=g-import-not-at-top

  vector = tf.TensorSpec([VECTOR], tf.float32)
  weight = tf.TensorSpec([], tf.float32)

  @cf.tf_computation((vector, weight), vector)
  def delta(data, state):
    return data[0] - state, data[1]

  @cf.tf_computation(vector, vector)
  def step(state, mean_delta):
    return state + 0.5 * mean_delta

  @cf.tf_computation(vector)
  def norm(mean_delta):
    return tf.norm(mean_delta)

  @cf.federated_computation(cf.server(vector), cf.clients((vector, weight)))
  def next_fn(state, data):
    d, w = cf.federated_map(delta, (data, cf.federated_broadcast(state)))
    mean_delta = cf.federated_mean(d, weight=w)
    return (cf.federated_map(step, (state, mean_delta)),
            {'delta_norm': cf.federated_map(norm, mean_delta)})

  return cf.IterativeProcess(
      cf.tf_computation(lambda: tf.zeros([VECTOR])), next_fn)


def prepare(directory, num_clients):
  """Saves the small form and writes `num_clients` client shards; returns
  (form path, shards directory)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import beam_runner  # pylint: disable=g-import-not-at-top
  import canonical  # pylint: disable=g-import-not-at-top
  form_path = canonical.save(canonical.compile(build_process()),
                             os.path.join(directory, 'form.pb'))
  rng = np.random.default_rng(SEED)
  data = {f'client{i:05d}': (rng.normal(size=VECTOR).astype(np.float32),
                             np.float32(rng.uniform(1, 20)))
          for i in range(num_clients)}
  shards = os.path.join(directory, 'clients')
  beam_runner.write_client_data(shards, data)
  return form_path, shards


def prepare_cnn(directory, data_dir=None):
  """Partitions Fashion-MNIST into CNN['num_clients'] IID clients (reused
  when `data_dir` already holds them) and saves the federated averaging form
  of the tutorial CNN; returns (form path, shards directory, parameters)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import canonical  # pylint: disable=g-import-not-at-top
  from pipelines import fedavg  # pylint: disable=g-import-not-at-top
  from pipelines import prepare_data  # pylint: disable=g-import-not-at-top
  prepared = prepare_data.prepare(
      CNN['dataset'], data_dir or os.path.join(directory, 'cnn-data'),
      CNN['num_clients'], scheme=CNN['partition'],
      batch_size=CNN['batch_size'], seed=SEED)
  config = fedavg.Config(
      dataset=CNN['dataset'], model=CNN['model'],
      num_clients=CNN['num_clients'], partition=CNN['partition'],
      clients_per_round=CNN['clients_per_round'], epochs=CNN['epochs'],
      batch_size=CNN['batch_size'], seed=SEED,
      output_dir=os.path.join(directory, 'cnn-unused'))
  manifest = prepared.manifest
  _, model = fedavg.model_for(config, manifest['image_shape'],
                              manifest['num_classes'])
  form = canonical.compile(fedavg.build_process(config, model))
  form_path = canonical.save(form, os.path.join(directory, 'cnn-form.pb'))
  parameters = sum(s.shape.num_elements() for s in
                   tf.nest.flatten(model.weights_spec.trainable))
  return form_path, prepared.directory, parameters


# ---------------------------------------------------------------------------
# Memory


def rss_mb(pid='self', field='VmRSS'):
  """A process's resident set size now (VmRSS) or at its peak (VmHWM), in MB."""
  try:
    with open(f'/proc/{pid}/status') as f:
      for line in f:
        if line.startswith(field + ':'):
          return int(line.split()[1]) / 1024
  except (FileNotFoundError, ProcessLookupError, PermissionError):
    pass
  return 0.0


def descendants(pid):
  """Process ids below `pid`, from /proc/<pid>/task/*/children (Linux)."""
  found, todo = [], [pid]
  while todo:
    parent = todo.pop()
    try:
      tasks = os.listdir(f'/proc/{parent}/task')
    except FileNotFoundError:
      continue
    for task in tasks:
      try:
        with open(f'/proc/{parent}/task/{task}/children') as f:
          children = [int(c) for c in f.read().split()]
      except (FileNotFoundError, ProcessLookupError):
        continue
      found += children
      todo += children
  return found


class WorkerPeaks:
  """Polls the peak RSS of this process's descendants while rounds run
  (except those in `ignore` and below them: the S3 server is not a worker)."""

  def __init__(self, ignore=(), interval=0.2):
    self.peaks = {}
    self.total = 0.0  # The largest sum of RSS of this process and workers.
    self._ignore = set(ignore)
    self._interval = interval
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._poll, daemon=True)

  def _workers(self):
    ignored = set(self._ignore)
    for pid in self._ignore:
      ignored.update(descendants(pid))
    return [p for p in descendants(os.getpid()) if p not in ignored]

  def _poll(self):
    while not self._stop.is_set():
      now = rss_mb()
      for pid in self._workers():
        self.peaks[pid] = max(self.peaks.get(pid, 0.0),
                              rss_mb(pid, 'VmHWM'))
        now += rss_mb(pid)
      self.total = max(self.total, now)
      self._stop.wait(self._interval)

  def __enter__(self):
    self._thread.start()
    return self

  def __exit__(self, *exc):
    self._stop.set()
    self._thread.join()


# ---------------------------------------------------------------------------
# Where the files are, and which engine runs the rounds


class Place:
  """Where a row's form, client shards and run directories are."""

  def __init__(self, form, shards, runs, options=None):
    self.form = form
    self.shards = shards
    self._runs = runs
    self.options = dict(options or {})  # Filesystem (S3) pipeline options.
    self._count = 0

  def new_run_dir(self):
    import uuid  # pylint: disable=g-import-not-at-top
    from canonical import io as storage_lib  # pylint: disable=g-import-not-at-top
    self._count += 1
    name = f'run-{self._count}-{uuid.uuid4().hex[:6]}'
    return storage_lib.join(self._runs, name)


def _s3_server_module():
  """tests/support/s3_server.py, imported by its path (tests/ is not a
  package)."""
  spec = importlib.util.spec_from_file_location(
      'bench_s3_server', os.path.join(ROOT, 'tests', 'support', 's3_server.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def upload(local_dir, url, names):
  """Copies `names` (files or directories) under `local_dir` to `url`
  through `canonical.io`; returns the bytes copied."""
  from concurrent import futures  # pylint: disable=g-import-not-at-top
  from canonical import io as storage_lib  # pylint: disable=g-import-not-at-top
  files = []
  for name in names:
    path = os.path.join(local_dir, name)
    if os.path.isdir(path):
      for parent, _, children in os.walk(path):
        files += [os.path.relpath(os.path.join(parent, c), local_dir)
                  for c in children]
    else:
      files.append(name)

  def copy(relative):
    with open(os.path.join(local_dir, relative), 'rb') as f:
      data = f.read()
    target = storage_lib.join(url, *relative.split(os.sep))
    storage_lib.write_bytes(target, data)
    return len(data)

  with futures.ThreadPoolExecutor(8) as pool:
    return sum(pool.map(copy, files))


@contextlib.contextmanager
def placed(task):
  """The row's `Place`: local files as the parent wrote them, or copies on a
  moto S3 server started here (and stopped on the way out)."""
  if task.get('storage', 'local') == 'local':
    yield Place(task['form'], task['shards'], tempfile.mkdtemp(
        prefix='bench-run-', dir=task['scratch']))
    return
  from canonical import io as storage_lib  # pylint: disable=g-import-not-at-top
  server = _s3_server_module().S3Server()
  try:
    storage_lib.configure(server.options())
    bucket = f's3://{server.new_bucket()}'
    start = time.perf_counter()
    copied = upload(os.path.dirname(task['form']), bucket,
                    [os.path.basename(task['form'])])
    copied += upload(task['shards'], f'{bucket}/clients',
                     ['element_spec.json', 'clients'])
    place = Place(f'{bucket}/{os.path.basename(task["form"])}',
                  f'{bucket}/clients', f'{bucket}/runs', server.options())
    place.upload_seconds = time.perf_counter() - start
    place.upload_bytes = copied
    place.server_pid = server._process.pid  # pylint: disable=protected-access
    yield place
  finally:
    server.stop()


@contextlib.contextmanager
def engine_options(task, place):
  """(pipeline options, facts about the engine) for the task's mode; a Dask
  cluster is started here, warmed, and closed on the way out."""
  mode = task['mode']
  facts = {}
  if mode in ('in_memory', 'loop'):
    yield (place.options or None), facts
    return
  if mode == 'multi_processing':
    yield {'runner': 'DirectRunner', 'direct_running_mode': mode,
           'direct_num_workers': task['workers'], **place.options}, facts
    return
  if mode != 'dask':
    raise ValueError(f'Unknown mode {mode!r}.')
  from beam_runner import engines  # pylint: disable=g-import-not-at-top
  env = DEFAULT_THREADS_ENV if task.get('threads') == 'default' else None
  start = time.perf_counter()
  cluster = engines.start_local_cluster(task['workers'], env=env)
  client = None
  try:
    client = engines.connect(cluster.scheduler_address)
    # Every worker imports TensorFlow, Beam and the runner now, not in a
    # timed round (a 1-client warm-up round reaches one worker only).
    client.run(exec, 'import beam_runner.pipeline.round')
    facts['worker_env'] = {name: sorted(set(client.run(
        os.getenv, name).values()), key=str)
                           for name in THREAD_VARS + WATCHED_ENV}
    facts['worker_threads'] = sum(client.nthreads().values())
    facts['cluster_start_seconds'] = time.perf_counter() - start
    Clock.workers_cpu = lambda: sum(client.run(eval, _CPU).values())
    yield {'runner': 'DaskRunner',
           'dask_client_address': cluster.scheduler_address,
           **place.options}, facts
  finally:
    Clock.workers_cpu = None
    if client is not None:
      client.close()
    cluster.close()


# ---------------------------------------------------------------------------
# Measurements

# CPU seconds (user + system) of the process evaluating it.
_CPU = "sum(__import__('os').times()[:2])"


def _own_cpu():
  return sum(os.times()[:2])


class Clock:
  """A span's wall seconds and CPU seconds: this process's (`cpu`) and, on
  Dask, the workers' together (`workers_cpu`; None elsewhere)."""

  workers_cpu = None  # On Dask: () -> the workers' CPU seconds so far.

  def __enter__(self):
    self._probe = Clock.workers_cpu
    self._workers = self._probe() if self._probe else None
    self._cpu = _own_cpu()
    self._start = time.perf_counter()
    return self

  def __exit__(self, *exc):
    self.seconds = time.perf_counter() - self._start
    self.cpu = _own_cpu() - self._cpu
    self.workers = self._probe() - self._workers if self._probe else None

  def per_round(self, rounds, prefix=''):
    """The row's CPU figures, per round."""
    row = {f'{prefix}cpu_seconds': self.cpu / rounds}
    if self.workers is not None:
      row[f'{prefix}workers_cpu_seconds'] = self.workers / rounds
    return row


def measure(task):
  """Runs in a child process: one row (see the module docstring)."""
  # Loaded before the base RSS is read, as in every row: TensorFlow, Beam,
  # the runner (the packages import them on first use, not at import).
  import beam_runner.driver.runner  # pylint: disable=g-import-not-at-top,unused-import
  import canonical.compiler  # pylint: disable=g-import-not-at-top,unused-import
  with placed(task) as place:
    ignore = [place.server_pid] if hasattr(place, 'server_pid') else []
    with engine_options(task, place) as (options, facts):
      base = rss_mb()
      with WorkerPeaks(ignore) as workers:
        row = KINDS[task['kind']](task, place, options)
  peak = rss_mb('self', 'VmHWM')
  row.update(
      kind=task['kind'], clients=task['clients'], mode=task['mode'],
      storage=task.get('storage', 'local'), threads=task.get('threads'),
      repeat=task.get('repeat', 0),
      peak_rss_mb=peak, base_rss_mb=base,
      workers_peak_rss_mb=max(workers.peaks.values(), default=0.0),
      total_peak_rss_mb=max(peak, workers.total),
      worker_processes=len(workers.peaks), **facts)
  for name in ('upload_seconds', 'upload_bytes'):
    if hasattr(place, name):
      row[name] = getattr(place, name)
  row.setdefault('local_seconds', None)
  if row['local_seconds']:
    row['ratio'] = row['round_seconds'] / row['local_seconds']
  return row


def _quiet(line):
  del line


def _numbers(metrics):
  """Metrics (tensors or numbers, maybe nested in a dict) as floats."""
  if isinstance(metrics, dict):
    return {str(k): _numbers(v) for k, v in metrics.items()}
  try:
    return float(metrics)
  except (TypeError, ValueError):
    return str(metrics)


def _runner_facts(outcomes):
  """What the runner itself recorded of the measured rounds."""
  stages = {}
  for outcome in outcomes:
    for name, seconds in outcome.get('stage_seconds', {}).items():
      stages[name] = stages.get(name, 0.0) + seconds / len(outcomes)
  return dict(runner_round_seconds=[o.get('seconds') for o in outcomes],
              stage_seconds=stages,
              clients_per_worker=outcomes[-1].get('clients_per_worker'),
              engine=outcomes[-1].get('engine'),
              metrics=outcomes[-1]['metrics'])


def _read_all(source, ids, form):
  """The clients' data as the runner's workers read it: the lists of their
  elements where work takes them (`client_data.takes_elements`), else
  datasets."""
  from beam_runner.worker_io import client_data  # pylint: disable=g-import-not-at-top
  spec = form.client_data_spec
  if client_data.takes_elements(form, source):
    return [source.read_elements(i, spec) for i in ids]
  return [source.read(i, spec) for i in ids]


def time_row(task, place, options):
  """'time' (round 2 after round 1) and 'memory' (round 1) rows."""
  import beam_runner  # pylint: disable=g-import-not-at-top
  import canonical  # pylint: disable=g-import-not-at-top
  source = beam_runner.TFRecordClientData(place.shards)
  clients, out = task['clients'], place.new_run_dir()
  rounds = 2 if task['kind'] == 'time' else 1
  first = None
  if rounds == 2:
    start = time.perf_counter()
    beam_runner.run(place.form, source, 1, clients, out, options, seed=SEED,
                    progress=_quiet)
    first = time.perf_counter() - start
  with Clock() as clock:
    result = beam_runner.run(place.form, source, rounds, clients, out,
                             options, seed=SEED, progress=_quiet)
  seconds = clock.seconds
  row = dict(round_seconds=seconds,
             first_round_seconds=seconds if first is None else first,
             rounds=1, **clock.per_round(1),
             **_runner_facts(result.outcomes[-1:]))
  if task['kind'] == 'time':
    form = canonical.load(place.form)
    ids = beam_runner.RunDir(out).clients(rounds)
    canonical.run_round(form, result.state, _read_all(source, ids[:1], form))
    with Clock() as clock:
      canonical.run_round(form, result.state, _read_all(source, ids, form))
    row['local_seconds'] = clock.seconds
    row['local_cpu_seconds'] = clock.cpu
  return row


def rounds_row(task, place, options):
  """'rounds' and 'cnn' rows: a warm-up round, then `rounds` rounds."""
  if task['mode'] == 'loop':
    return _loop_rounds(task, place)
  import beam_runner  # pylint: disable=g-import-not-at-top
  source = beam_runner.TFRecordClientData(place.shards)
  clients, rounds, out = task['clients'], task['rounds'], place.new_run_dir()
  start = time.perf_counter()
  beam_runner.run(place.form, source, 1, clients, out, options, seed=SEED,
                  progress=_quiet)
  first = time.perf_counter() - start
  with Clock() as clock:
    result = beam_runner.run(place.form, source, 1 + rounds, clients, out,
                             options, seed=SEED, progress=_quiet)
  seconds = clock.seconds
  if len(result.outcomes) != 1 + rounds:
    raise RuntimeError(f'{len(result.outcomes)} rounds committed, expected '
                       f'{1 + rounds}.')
  row = dict(round_seconds=seconds / rounds, first_round_seconds=first,
             rounds=rounds, **clock.per_round(rounds),
             **_runner_facts(result.outcomes[1:]))
  if task['kind'] == 'rounds' and task.get('storage', 'local') == 'local':
    row.update(_loop_after(place, out, source, rounds))
  return row


def _loop_after(place, out, source, rounds):
  """The local loop over a Beam run's committed rounds 2..rounds+1: the same
  clients, states chained from Beam's committed round 1."""
  import canonical  # pylint: disable=g-import-not-at-top
  import beam_runner  # pylint: disable=g-import-not-at-top
  from beam_runner.worker_io import tensor_io  # pylint: disable=g-import-not-at-top
  form = canonical.load(place.form)
  if form.has_client_state:
    raise ValueError('The loop comparison takes forms without client state.')
  run_dir = beam_runner.RunDir(out)
  state = tensor_io.read_tensors(run_dir.state_path(1), form.state_spec)
  samples = [run_dir.clients(r) for r in range(2, rounds + 2)]
  canonical.run_round(form, state, _read_all(source, samples[0], form))
  with Clock() as clock:
    for ids in samples:
      state, metrics = canonical.run_round(form, state,
                                           _read_all(source, ids, form))[:2]
  return dict(local_seconds=clock.seconds / rounds,
              local_metrics=_numbers(metrics),
              **clock.per_round(rounds, prefix='local_'))


def _loop_rounds(task, place):
  """The local loop alone: rounds 1..rounds+1 from the initial state, on the
  clients the runner samples; round 1 is the warm-up."""
  import beam_runner  # pylint: disable=g-import-not-at-top
  import canonical  # pylint: disable=g-import-not-at-top
  form = canonical.load(place.form)
  if form.has_client_state:
    raise ValueError('The loop comparison takes forms without client state.')
  source = beam_runner.TFRecordClientData(place.shards)
  ids, rounds = source.client_ids(), task['rounds']
  samples = [beam_runner.sample_clients(ids, task['clients'], SEED, r)
             for r in range(1, rounds + 2)]
  start = time.perf_counter()
  state = canonical.run_round(form, form.initialize(),
                              _read_all(source, samples[0], form))[0]
  first = time.perf_counter() - start
  with Clock() as clock:
    for sampled in samples[1:]:
      state, metrics = canonical.run_round(
          form, state, _read_all(source, sampled, form))[:2]
  return dict(round_seconds=clock.seconds / rounds, first_round_seconds=first,
              rounds=rounds, metrics=_numbers(metrics),
              **clock.per_round(rounds))


KINDS = {'time': time_row, 'memory': time_row, 'rounds': rounds_row,
         'cnn': rounds_row}


def child_main(task_json, result_path):
  row = measure(json.loads(task_json))
  with open(result_path, 'w') as f:
    json.dump(row, f)
