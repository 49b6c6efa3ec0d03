"""Round time and peak memory of `beam_runner` against the local loop.

The form: a weighted mean of a model-sized vector (4,538 float32: the
parameters of `canonical.learning.models.small_8x8`), with the server state
broadcast to clients and a step on the server, so C and each U weigh what a
small model's weights weigh and the work per client is light: what is measured
is the runtime, not the model. Client data (the vector and a weight) is
written once as per-client TFRecord shards; Beam workers and the local loop
read the same shards.

Every measurement runs in its own Python process (TensorFlow imported, the
saved form loaded), so its peak RSS is that of the process running the round:
  time rows    Beam rounds 1 and 2 (round 1 warms up); `round_seconds` is round
               2 end to end (`beam_runner.run`, pipeline built and run,
               committed); then `local_seconds`: the same form over round 2's
               sampled clients in `canonical.run_round`, reading the shards.
               Clients 1 shows the fixed cost of a round.
  memory rows  one Beam round (in_memory); no local loop.
`peak_rss_mb` is the measuring process's peak RSS (VmHWM: `ru_maxrss` would
carry over the parent's peak through fork and exec), `base_rss_mb` its RSS
before the first round; `workers_peak_rss_mb` the largest peak of the worker
processes it started (multi_processing), polled from /proc during the rounds,
and `total_peak_rss_mb` the largest sum of the RSS of the measuring process and
its live workers seen while polling (at least `peak_rss_mb`).

Usage (from the repository root):
  python -m benchmarks.runner [--quick] [--sizes 10,100,1000]
      [--memory-sizes 100,1000,10000] [--workers 2] [--json PATH]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VECTOR = 4538  # Parameters of small_8x8.
SEED = 0
RATIO_TARGET = 1.5       # Beam in_memory over the local loop, at 100 clients.
MEMORY_TARGET_MB = 4096  # Peak RSS of a 10,000-client round.
MODES = ('in_memory', 'multi_processing')


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
  """Saves the form and writes `num_clients` client shards; returns paths."""
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
  """Polls the peak RSS of this process's descendants while a round runs."""

  def __init__(self, interval=0.2):
    self.peaks = {}
    self.total = 0.0  # The largest sum of RSS of this process and workers.
    self._interval = interval
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._poll, daemon=True)

  def _poll(self):
    while not self._stop.is_set():
      now = rss_mb()
      for pid in descendants(os.getpid()):
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


def measure(task):
  """Runs in a child process: one row (see the module docstring)."""
  import beam_runner  # pylint: disable=g-import-not-at-top
  import canonical  # pylint: disable=g-import-not-at-top
  from beam_runner import testing  # pylint: disable=g-import-not-at-top

  form = canonical.load(task['form'])
  source = beam_runner.TFRecordClientData(task['shards'])
  clients, mode = task['clients'], task['mode']
  options = testing.pipeline_options_for(mode, task['workers'])
  out = tempfile.mkdtemp(prefix='bench-run-', dir=task['scratch'])
  base = rss_mb()
  quiet = lambda line: None
  rounds = 2 if task['kind'] == 'time' else 1
  with WorkerPeaks() as workers:
    start = time.perf_counter()
    if rounds == 2:
      beam_runner.run(task['form'], source, 1, clients, out, options,
                      seed=SEED, progress=quiet)
      first = time.perf_counter() - start
      start = time.perf_counter()
    result = beam_runner.run(task['form'], source, rounds, clients, out,
                             options, seed=SEED, progress=quiet)
    seconds = time.perf_counter() - start
  peak = rss_mb('self', 'VmHWM')
  row = dict(
      kind=task['kind'], clients=clients, mode=mode, round_seconds=seconds,
      first_round_seconds=first if rounds == 2 else seconds,
      local_seconds=None, peak_rss_mb=peak, base_rss_mb=base,
      workers_peak_rss_mb=max(workers.peaks.values(), default=0.0),
      total_peak_rss_mb=max(peak, workers.total),
      worker_processes=len(workers.peaks),
      metrics=result.outcomes[-1]['metrics'])
  if task['kind'] == 'time':
    ids = beam_runner.RunDir(out).clients(rounds)
    state = result.state
    canonical.run_round(form, state, [source.read(ids[0],
                                                  form.client_data_spec)])
    start = time.perf_counter()
    canonical.run_round(form, state, [source.read(i, form.client_data_spec)
                                      for i in ids])
    row['local_seconds'] = time.perf_counter() - start
    row['ratio'] = row['round_seconds'] / row['local_seconds']
  return row


def run_child(task):
  """Runs `measure(task)` in a fresh Python process; returns its row."""
  env = {**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '2'}
  proc = subprocess.run(
      [sys.executable, '-m', 'benchmarks.runner', '--child', json.dumps(task)],
      cwd=ROOT, capture_output=True, text=True, env=env)
  if proc.returncode != 0:
    raise RuntimeError(f'Measuring {task} failed:\n{proc.stderr[-4000:]}')
  return json.loads(proc.stdout.strip().splitlines()[-1])


def print_table(rows, print_fn=print):
  print_fn(f'form: weighted mean of float32[{VECTOR}] with broadcast '
           f'(C and each U: {VECTOR * 32} bits)')
  print_fn(f'{"kind":6} {"clients":>7} {"mode":16} {"round s":>8} '
           f'{"local s":>8} {"beam/local":>10} {"peak RSS MB":>11} '
           f'{"base MB":>8} {"worker MB":>9} {"total MB":>8}')
  for r in rows:
    local = '' if r['local_seconds'] is None else f'{r["local_seconds"]:.3f}'
    ratio = f'{r["ratio"]:.2f}' if r.get('ratio') else ''
    workers = f'{r["workers_peak_rss_mb"]:.0f}' if r[
        'workers_peak_rss_mb'] else ''
    print_fn(f'{r["kind"]:6} {r["clients"]:>7} {r["mode"]:16} '
             f'{r["round_seconds"]:>8.3f} {local:>8} {ratio:>10} '
             f'{r["peak_rss_mb"]:>11.0f} {r["base_rss_mb"]:>8.0f} '
             f'{workers:>9} {r["total_peak_rss_mb"]:>8.0f}')


def targets(rows):
  """The issue's targets, judged on the rows measured (None: not measured)."""
  at_100 = [r for r in rows if r['kind'] == 'time' and r['clients'] == 100
            and r['mode'] == 'in_memory']
  memory = sorted((r for r in rows if r['kind'] == 'memory'),
                  key=lambda r: r['clients'])
  result = {'ratio_at_100': at_100[0]['ratio'] if at_100 else None,
            'ratio_target': RATIO_TARGET,
            'memory_target_mb': MEMORY_TARGET_MB}
  if memory:
    largest = memory[-1]
    result['largest_memory_clients'] = largest['clients']
    result['largest_peak_rss_mb'] = largest['peak_rss_mb']
    growth = [r['peak_rss_mb'] - r['base_rss_mb'] for r in memory]
    result['growth_mb'] = dict(zip((r['clients'] for r in memory), growth))
  return result


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--quick', action='store_true',
                      help='10 and 100 clients in_memory; memory at 100, 1000')
  parser.add_argument('--sizes', help='clients per round of the time rows, '
                      'comma-separated (default 1,10,100,1000)')
  parser.add_argument('--memory-sizes', help='clients per round of the memory '
                      'rows (default 100,1000,10000)')
  parser.add_argument('--modes', help=f'time rows\' modes (default '
                      f'{",".join(MODES)}; --quick: in_memory)')
  parser.add_argument('--workers', type=int, default=2)
  parser.add_argument('--json', help='write the rows here')
  parser.add_argument('--child', help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.child:
    print(json.dumps(measure(json.loads(args.child))))
    return
  ints = lambda text: [int(x) for x in text.split(',') if x]
  sizes = ints(args.sizes) if args.sizes is not None else (
      [10, 100] if args.quick else [1, 10, 100, 1000])
  memory_sizes = ints(args.memory_sizes) if args.memory_sizes is not None \
      else (
      [100, 1000] if args.quick else [100, 1000, 10000])
  modes = args.modes.split(',') if args.modes else (
      ['in_memory'] if args.quick else list(MODES))
  with tempfile.TemporaryDirectory(prefix='bench-runner-') as scratch:
    start = time.perf_counter()
    form_path, shards = prepare(scratch, max(sizes + memory_sizes))
    print(f'wrote {max(sizes + memory_sizes)} client shards in '
          f'{time.perf_counter() - start:.1f} s', flush=True)
    tasks = [dict(kind='time', clients=n, mode=m) for m in modes
             for n in sizes]
    tasks += [dict(kind='memory', clients=n, mode='in_memory')
              for n in memory_sizes]
    rows = []
    for task in tasks:
      task.update(form=form_path, shards=shards, scratch=scratch,
                  workers=args.workers)
      start = time.perf_counter()
      row = run_child(task)
      row['process_seconds'] = time.perf_counter() - start
      rows.append(row)
      if args.json:  # After every row: a long run that stops keeps its rows.
        write_json(args.json, rows, args.workers)
      print(f'  {row["kind"]} {row["clients"]} {row["mode"]}: '
            f'{row["round_seconds"]:.2f} s, peak {row["peak_rss_mb"]:.0f} MB '
            f'({row["process_seconds"]:.0f} s in all)', flush=True)
  print_table(rows)
  judged = targets(rows)
  if judged['ratio_at_100'] is not None:
    print(f'Beam in_memory / local loop at 100 clients: '
          f'{judged["ratio_at_100"]:.2f} (target <= {RATIO_TARGET})')
  if 'largest_peak_rss_mb' in judged:
    print(f'peak RSS at {judged["largest_memory_clients"]} clients: '
          f'{judged["largest_peak_rss_mb"]:.0f} MB (target < '
          f'{MEMORY_TARGET_MB}); growth over the base by clients: '
          + ', '.join(f'{n}: {g:.0f} MB' for n, g in
                      judged['growth_mb'].items()))
  if args.json:
    write_json(args.json, rows, args.workers)


def write_json(path, rows, workers):
  with open(path, 'w') as f:
    json.dump({'rows': rows, 'targets': targets(rows), 'vector': VECTOR,
               'workers': workers}, f, indent=1)


if __name__ == '__main__':
  main()
