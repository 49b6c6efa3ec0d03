"""Round time and peak memory of `beam_runner` against the local loop.

Two forms. The small form: a weighted mean of a model-sized vector (4,538
float32: the parameters of `canonical.learning.models.small_8x8`), with the
server state broadcast to clients and a step on the server, so C and each U
weigh what a small model's weights weigh and the work per client is light:
what is measured is the runtime, not the model. The CNN form: the tutorial's
federated averaging of `cnn_28x28` (1,663,370 parameters) on Fashion-MNIST,
100 IID clients (`pipelines.prepare_data`), 10 per round, 1 local epoch of
batches of 20. Client data is written once as per-client TFRecord shards; Beam
workers and the local loop (`canonical.run_round`) read the same shards, the
same way (element lists where work takes them unrolled).

Every row runs in its own Python process (see `benchmarks/runner_rows.py` for
exactly what each kind measures):
  time     the small form's round 2 end to end (`beam_runner.run`: pipeline
           built and run, committed) in its own call after a warm-up round,
           against the local loop over round 2's clients; modes in_memory,
           multi_processing (DirectRunner) and dask (a local Dask cluster of
           --workers processes, started once in the row's process and warmed).
           Clients 1 shows the fixed cost of a round.
  rounds   the small form as rounds run in practice: after a warm-up round,
           --rounds rounds in ONE `beam_runner.run` call (so the runner's
           chaining of rounds into pipelines applies), mean seconds per round,
           against the local loop running the same rounds (same clients,
           chained states); also with every file on a local S3 server.
  memory   one round (in_memory); peak RSS; no local loop.
  cnn      the CNN form: a warm-up round, then --cnn-rounds rounds, mean
           seconds per round, in the local loop (mode loop) or on a Dask
           cluster of --workers processes (mode dask); with TensorFlow on
           one thread per process in both (threads 1), or on its default
           threading in both (threads default); the Dask run also with its
           files on a local S3 server.
The rows behind the judged ratios (the CNN pairs of loop and Dask rows, and
the small form's in-process rounds row with its loop) are measured --repeats
times, the pairs interleaved, and each ratio is judged on its median: on a
shared machine one pair can land in a slow minute (one run's CNN loop took
8.7 s a round where it usually takes 6.4 s).
`cpu_seconds` is the CPU time (user + system) of the row's process per
measured round (the driver, or the loop in loop rows), `workers_cpu_seconds`
that of the Dask workers together, `local_cpu_seconds` the loop's in rows
that also run it: a round's wall time over a shared machine's cores is only
half the story. `peak_rss_mb` is the row process's peak RSS (VmHWM: `ru_maxrss` would carry
over the parent's peak through fork and exec), `base_rss_mb` its RSS before
the first round; `workers_peak_rss_mb` the largest peak of the worker
processes it started (multi_processing, dask), polled from /proc during the
rounds, and `total_peak_rss_mb` the largest sum of the RSS of the row process
and its live workers seen while polling (at least `peak_rss_mb`). An S3 row's
moto server is not counted as a worker (it does share the cores: its time
serving requests is part of the S3 figures; uploading the files is not).

Before the rows, `parallel_speedup` measures how much faster --workers Python
processes get through fixed CPU work than one (ideal: --workers): on a shared
machine the multi-process figures are only as good as that number. Then a
`targets` section judges the issue's targets on the rows (met / missed / not
measured), in the JSON and as printed lines.

Usage (from the repository root):
  python -m benchmarks.runner [--quick] [--sizes 1,10,100,1000]
      [--memory-sizes 100,1000,10000] [--rounds 10] [--cnn-rounds 3]
      [--repeats 3] [--no-cnn] [--no-s3] [--workers 2] [--json PATH]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks import runner_rows

ROOT = runner_rows.ROOT
VECTOR = runner_rows.VECTOR
SEED = runner_rows.SEED
MODES = ('in_memory', 'multi_processing', 'dask')
THREADINGS = ('1', 'default')
KINDS = ('time', 'rounds', 'memory', 'cnn')
# The targets.
CNN_ONE_THREAD_TARGET = 0.75   # Dask (2 workers) / loop, 1 TF thread each.
CNN_DEFAULT_THREADS_TARGET = 1.1  # The same, TF's default threading.
ROUNDS_RATIO_TARGET = 1.5      # in_memory / loop, --rounds rounds, 100 clients.
FIXED_COST_TARGET = 1.0        # Seconds: a 1-client round on Dask.
S3_RATIO_TARGET = 1.5          # Files on S3 / on local disk (CNN on Dask).
MEMORY_TARGET_MB = 4096        # Peak RSS of a 10,000-client round.

# Re-exported: what a child measures lives in runner_rows.
build_process = runner_rows.build_process
prepare = runner_rows.prepare


def run_child(task, scratch):
  """Runs `runner_rows.measure(task)` in a fresh Python process; its row.

  The process's TensorFlow threading follows `task['threads']`: '1' sets
  TF_NUM_INTRAOP_THREADS and TF_NUM_INTEROP_THREADS to 1, 'default' removes
  them; otherwise the environment is inherited."""
  env = {**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '2'}
  for name in runner_rows.THREAD_VARS:
    if task.get('threads') == '1':
      env[name] = '1'
    elif task.get('threads') == 'default':
      env.pop(name, None)
  fd, result_path = tempfile.mkstemp(prefix='row-', suffix='.json',
                                     dir=scratch)
  os.close(fd)
  proc = subprocess.run(
      [sys.executable, '-m', 'benchmarks.runner', '--child', json.dumps(task),
       '--child-result', result_path],
      cwd=ROOT, capture_output=True, text=True, env=env)
  if proc.returncode != 0:
    raise RuntimeError(f'Measuring {describe(task)} failed:\n'
                       f'{proc.stderr[-4000:]}')
  with open(result_path) as f:
    return json.load(f)


_SPIN = 'sum(i * i for i in range(4_000_000))'


def parallel_speedup(processes=2):
  """How much faster `processes` Python processes get through the same fixed
  CPU work each than one alone (ideal: `processes`): on a shared machine
  the cores a row can use at once, measured rather than assumed."""
  def wall(count):
    start = time.perf_counter()
    running = [subprocess.Popen([sys.executable, '-c', _SPIN])
               for _ in range(count)]
    for proc in running:
      proc.wait()
    return time.perf_counter() - start
  alone = min(wall(1) for _ in range(2))
  together = min(wall(processes) for _ in range(2))
  return processes * alone / together


def describe(row):
  parts = [row['kind'], f'{row["clients"]} clients', row['mode']]
  if row.get('storage', 'local') != 'local':
    parts.append(row['storage'])
  if row.get('threads'):
    parts.append(f'{row["threads"]} thread' +
                 ('' if row['threads'] == '1' else 's'))
  if row.get('repeat'):
    parts.append(f'(repeat {row["repeat"] + 1})')
  return ' '.join(parts)


def link_rows(rows):
  """Figures that compare rows measured in different processes.

  A CNN Dask row's `local_seconds` is the CNN loop row's of the same
  threading and repeat, and its ratio follows. An S3 row's `s3_over_local` is its round
  time over the same row's on local disk; `s3_judged` says whether the S3
  target is judged on it (the CNN run) or it is only reported."""
  for row in rows:
    if row['kind'] == 'cnn' and row['mode'] != 'loop':
      loop = find(rows, kind='cnn', mode='loop', threads=row['threads'],
                  repeat=row.get('repeat', 0))
      if loop is not None:
        row['local_seconds'] = loop['round_seconds']
        row['ratio'] = row['round_seconds'] / loop['round_seconds']
        row['local_from'] = 'the cnn loop row of the same threads'
    if row.get('storage') == 's3':
      local = find(rows, kind=row['kind'], mode=row['mode'],
                   clients=row['clients'], threads=row.get('threads'))
      if local is not None:
        row['s3_over_local'] = row['round_seconds'] / local['round_seconds']
        row['s3_judged'] = row['kind'] == 'cnn'


_UNSAID = {'storage': 'local', 'repeat': 0}  # What a row without the key is.


def find_all(rows, **want):
  """The rows with these values (storage defaults to local; any repeat)."""
  want.setdefault('storage', 'local')
  return [row for row in rows
          if all(row.get(k, _UNSAID.get(k)) == v for k, v in want.items())]


def find(rows, **want):
  """The first row with these values (storage local, repeat 0 by default)."""
  want.setdefault('repeat', 0)
  found = find_all(rows, **want)
  return found[0] if found else None


def _ratios(rows, **want):
  """(median, every ratio) of the matching rows that have one."""
  ratios = [r['ratio'] for r in find_all(rows, **want) if r.get('ratio')]
  return (statistics.median(ratios) if ratios else None), ratios


def _s3_ratio(rows, **want):
  row = find(rows, storage='s3', **want)
  return None if row is None else row.get('s3_over_local')


def judge(what, figure, target, unit='x', below=False, **facts):
  """A target's entry: met when `figure` <= `target` (< with `below`)."""
  if figure is None:
    met = None
  else:
    met = figure < target if below else figure <= target
  return dict(what=what, figure=figure, target=target, unit=unit,
              comparison='<' if below else '<=', met=met, **facts)


def targets(rows, rounds_clients=100, workers=2):
  """The issue's targets, judged on the rows measured (figure and met None:
  not measured)."""
  result = {}
  for threads, target in (('1', CNN_ONE_THREAD_TARGET),
                          ('default', CNN_DEFAULT_THREADS_TARGET)):
    pairs = find_all(rows, kind='cnn', mode='dask', threads=threads)
    name, label = ('one_thread', 'one TF thread per process') if \
        threads == '1' else ('default_threads', 'TF default threading')
    median, ratios = _ratios(rows, kind='cnn', mode='dask', threads=threads)
    result[f'cnn_dask_over_loop_{name}'] = judge(
        f'CNN, {runner_rows.CNN["clients_per_round"]} clients/round: Dask '
        f'({workers} workers) over the local loop, {label}, median of '
        'the pairs', median, target, ratios=ratios,
        dask_seconds=[r['round_seconds'] for r in pairs],
        loop_seconds=[r.get('local_seconds') for r in pairs])
  small = find(rows, kind='rounds', mode='in_memory', clients=rounds_clients)
  median, ratios = _ratios(rows, kind='rounds', mode='in_memory',
                           clients=rounds_clients)
  result['rounds_in_memory_over_loop'] = judge(
      f'small form, {rounds_clients} clients: in-process Beam over the local '
      f'loop, mean of {small["rounds"] if small else "N"} rounds in one run '
      'call, median of the runs', median, ROUNDS_RATIO_TARGET,
      clients=rounds_clients, rounds=small and small['rounds'], ratios=ratios)
  fixed = find(rows, kind='time', mode='dask', clients=1)
  in_one_call = find(rows, kind='rounds', mode='dask', clients=1)
  direct = find(rows, kind='time', mode='multi_processing', clients=1)
  result['dask_fixed_cost'] = judge(
      f'a 1-client round of the small form on Dask ({workers} '
      'workers), after a warm-up round, seconds', fixed and
      fixed['round_seconds'], FIXED_COST_TARGET, unit='s',
      in_one_run_call_seconds=in_one_call and in_one_call['round_seconds'],
      multi_processing_seconds=direct and direct['round_seconds'])
  result['s3_over_local'] = judge(
      'CNN on Dask, one TF thread per process: files on S3 over files on '
      'local disk (judged)', _s3_ratio(rows, kind='cnn', mode='dask',
                                       threads='1'), S3_RATIO_TARGET,
      small_in_memory=_s3_ratio(rows, kind='rounds', mode='in_memory',
                                clients=rounds_clients))
  memory = sorted((r for r in rows if r['kind'] == 'memory'),
                  key=lambda r: r['clients'])
  largest = memory[-1] if memory else None
  result['memory'] = judge(
      f'peak RSS of a {largest["clients"] if largest else "N"}-client round, '
      'MB', largest and largest['peak_rss_mb'], MEMORY_TARGET_MB, unit='MB',
      below=True,
      largest_memory_clients=largest and largest['clients'],
      growth_mb={r['clients']: r['peak_rss_mb'] - r['base_rss_mb']
                 for r in memory})
  return result


def print_table(rows, cnn_parameters=None, print_fn=print):
  print_fn(f'small form: weighted mean of float32[{VECTOR}] with broadcast '
           f'(C and each U: {VECTOR * 32} bits)')
  if cnn_parameters:
    print_fn(f'cnn form: federated averaging of cnn_28x28 '
             f'({cnn_parameters:,} parameters) on Fashion-MNIST')
  print_fn(f'{"kind":6} {"clients":>7} {"mode":16} {"storage":7} '
           f'{"threads":7} {"rounds":>6} {"round s":>8} {"local s":>8} '
           f'{"beam/local":>10} {"s3/local":>14} {"cpu s":>7} '
           f'{"wrk cpu s":>9} {"peak MB":>7} '
           f'{"base MB":>7} {"worker MB":>9} {"total MB":>8}')
  for r in rows:
    local = '' if r.get('local_seconds') is None else \
        f'{r["local_seconds"]:.3f}'
    ratio = f'{r["ratio"]:.2f}' if r.get('ratio') else ''
    s3 = '' if r.get('s3_over_local') is None else \
        f'{r["s3_over_local"]:.2f}' + (' (judged)' if r['s3_judged'] else '')
    cpu = _seconds(r.get('cpu_seconds'))
    workers_cpu = _seconds(r.get('workers_cpu_seconds'))
    workers = f'{r["workers_peak_rss_mb"]:.0f}' if r[
        'workers_peak_rss_mb'] else ''
    print_fn(f'{r["kind"]:6} {r["clients"]:>7} {r["mode"]:16} '
             f'{r.get("storage", "local"):7} {r.get("threads") or "":7} '
             f'{r.get("rounds", 1):>6} {r["round_seconds"]:>8.3f} '
             f'{local:>8} {ratio:>10} {s3:>14} {cpu:>7} {workers_cpu:>9} '
             f'{r["peak_rss_mb"]:>7.0f} '
             f'{r["base_rss_mb"]:>7.0f} {workers:>9} '
             f'{r["total_peak_rss_mb"]:>8.0f}')


def _seconds(value):
  return '' if value is None else f'{value:.2f}'


def target_lines(judged):
  """One printed line per target: the figure, the target, met or missed."""
  lines = []
  for name, t in judged.items():
    unit = '' if t['unit'] == 'x' else f' {t["unit"]}'
    if t['figure'] is None:
      verdict = 'not measured'
    else:
      verdict = (f'{t["figure"]:.2f}{unit} (target {t["comparison"]} '
                 f'{t["target"]}{unit}): ' + ('met' if t['met'] else 'missed'))
    extra = ''
    if len(t.get('ratios') or ()) > 1:
      extra = ' [each: ' + ', '.join(f'{r:.2f}' for r in t['ratios']) + ']'
    if name == 'dask_fixed_cost':
      more = [f'{label} {t[key]:.2f} s' for key, label in (
          ('in_one_run_call_seconds', 'per round within one run call'),
          ('multi_processing_seconds', 'DirectRunner multi_processing'))
              if t.get(key) is not None]
      extra = f' [{"; ".join(more)}]' if more else ''
    elif name == 's3_over_local' and t.get('small_in_memory') is not None:
      clients = judged['rounds_in_memory_over_loop']['clients']
      extra = (f' [small form in-process, {clients} clients: '
               f'{t["small_in_memory"]:.2f}x, not judged]')
    elif name == 'memory' and t['growth_mb']:
      extra = ' [growth over the base by clients: ' + ', '.join(
          f'{n}: {g:.0f} MB' for n, g in t['growth_mb'].items()) + ']'
    lines.append(f'{name}: {t["what"]}: {verdict}{extra}')
  return lines


def plan(args):
  """The rows to measure, in order."""
  ints = lambda text: [int(x) for x in text.split(',') if x]
  quick = args.quick
  sizes = ints(args.sizes) if args.sizes is not None else (
      [10, 100] if quick else [1, 10, 100, 1000])
  memory_sizes = ints(args.memory_sizes) if args.memory_sizes is not None \
      else ([100, 1000] if quick else [100, 1000, 10000])
  modes = args.modes.split(',') if args.modes else (
      ['in_memory', 'dask'] if quick else list(MODES))
  dask_sizes = ints(args.dask_sizes) if args.dask_sizes is not None else (
      [1] if quick else sizes)
  rounds_clients = args.rounds_clients if args.rounds_clients else (
      10 if quick else 100)
  kinds = set(args.kinds.split(',')) if args.kinds else set(KINDS)
  unknown = kinds - set(KINDS)
  if unknown:
    raise SystemExit(f'Unknown --kinds {",".join(sorted(unknown))}; choose '
                     f'from {",".join(KINDS)}.')
  tasks = [dict(kind='time', clients=n, mode=m) for m in modes
           for n in (dask_sizes if m == 'dask' else sizes)]
  tasks += [dict(kind='rounds', clients=rounds_clients, mode='in_memory',
                 rounds=args.rounds, repeat=n) for n in range(args.repeats)]
  if args.s3:
    tasks.append(dict(kind='rounds', clients=rounds_clients,
                      mode='in_memory', rounds=args.rounds, storage='s3'))
  if 'dask' in modes and not quick:
    tasks.append(dict(kind='rounds', clients=1, mode='dask',
                      rounds=args.rounds))
  tasks += [dict(kind='memory', clients=n, mode='in_memory')
            for n in memory_sizes]
  tasks = [t for t in tasks if t['kind'] in kinds]
  if args.cnn and 'cnn' in kinds:
    cnn = dict(kind='cnn', clients=runner_rows.CNN['clients_per_round'],
               rounds=args.cnn_rounds)
    for n in range(args.repeats):
      for threads in THREADINGS:
        tasks += [dict(cnn, mode='loop', threads=threads, repeat=n),
                  dict(cnn, mode='dask', threads=threads, repeat=n)]
    if args.s3:
      tasks.append(dict(cnn, mode='dask', threads='1', storage='s3'))
  return tasks, rounds_clients


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--quick', action='store_true', help='small sizes: '
                      'time rows at 10 and 100 clients in_memory and 1 on '
                      'Dask, rounds rows at 10 clients, memory at 100 and '
                      '1000; no CNN')
  parser.add_argument('--sizes', help='clients per round of the time rows, '
                      'comma-separated (default 1,10,100,1000)')
  parser.add_argument('--dask-sizes', help='clients per round of the Dask '
                      'time rows (default: --sizes; --quick: 1)')
  parser.add_argument('--memory-sizes', help='clients per round of the memory '
                      'rows (default 100,1000,10000)')
  parser.add_argument('--modes', help=f'time rows\' modes (default '
                      f'{",".join(MODES)}; --quick: in_memory,dask)')
  parser.add_argument('--rounds', type=int, default=None,
                      help='rounds measured in the rounds rows, in one run '
                      'call after a warm-up round (default 10; --quick: 3)')
  parser.add_argument('--rounds-clients', type=int,
                      help='clients per round of the rounds rows (default '
                      '100; --quick: 10)')
  parser.add_argument('--cnn', action=argparse.BooleanOptionalAction,
                      default=None, help='measure the CNN rows (minutes; '
                      'default: yes, except with --quick)')
  parser.add_argument('--cnn-rounds', type=int, help='rounds measured in '
                      'the CNN rows after a warm-up round (default: 3, or '
                      '--rounds if smaller)')
  parser.add_argument('--cnn-data', help='where to keep (and reuse) the '
                      'partitioned Fashion-MNIST (default: a temporary '
                      'directory)')
  parser.add_argument('--s3', action=argparse.BooleanOptionalAction,
                      default=True, help='measure the S3 rows (a moto server '
                      'on 127.0.0.1 in the row\'s process; default: yes)')
  parser.add_argument('--kinds', help=f'the kinds of rows to measure '
                      f'(default {",".join(KINDS)}; cnn also needs --cnn)')
  parser.add_argument('--repeats', type=int, default=None, help='times '
                      'the rows behind the judged ratios are measured, '
                      'interleaved; each ratio is judged on its median '
                      '(default 3; --quick: 1)')
  parser.add_argument('--workers', type=int, default=2, help='worker '
                      'processes of the multi_processing and Dask rows '
                      '(default 2)')
  parser.add_argument('--json', help='write the rows here')
  parser.add_argument('--child', help=argparse.SUPPRESS)
  parser.add_argument('--child-result', help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.child:
    runner_rows.child_main(args.child, args.child_result)
    return
  if args.rounds is None:
    args.rounds = 3 if args.quick else 10
  if args.cnn is None:
    args.cnn = not args.quick
  if args.repeats is None:
    args.repeats = 1 if args.quick else 3
  if args.cnn_rounds is None:
    args.cnn_rounds = min(3, args.rounds)
  for name in ('rounds', 'cnn_rounds', 'workers', 'repeats'):
    if getattr(args, name) < 1:
      parser.error(f'--{name.replace("_", "-")} must be at least 1.')
  tasks, rounds_clients = plan(args)
  settings = dict(workers=args.workers, rounds=args.rounds,
                  cnn_rounds=args.cnn_rounds, rounds_clients=rounds_clients,
                  repeats=args.repeats,
                  quick=args.quick, cnn=runner_rows.CNN if args.cnn else None)
  settings['cpus'] = os.cpu_count()
  settings['parallel_speedup'] = parallel_speedup(args.workers)
  print(f'{args.workers} processes on {os.cpu_count()} CPUs: '
        f'{settings["parallel_speedup"]:.2f}x the throughput of one '
        f'(ideal {min(args.workers, os.cpu_count())}x; below that the '
        'cores are shared with other work, and the multi-process rows show '
        'it)', flush=True)
  rows = []
  with tempfile.TemporaryDirectory(prefix='bench-runner-') as scratch:
    start = time.perf_counter()
    form_path = shards = cnn_form = cnn_shards = None
    most = max((t['clients'] for t in tasks if t['kind'] != 'cnn'),
               default=0)
    if most:
      form_path, shards = prepare(scratch, most)
      print(f'wrote {most} client shards in '
            f'{time.perf_counter() - start:.1f} s', flush=True)
    if any(t['kind'] == 'cnn' for t in tasks):
      start = time.perf_counter()
      cnn_form, cnn_shards, settings['cnn_parameters'] = \
          runner_rows.prepare_cnn(scratch, args.cnn_data)
      print(f'prepared Fashion-MNIST for {runner_rows.CNN["num_clients"]} '
            f'clients and the CNN form in {time.perf_counter() - start:.1f} s',
            flush=True)
    for task in tasks:
      cnn = task['kind'] == 'cnn'
      task.update(form=cnn_form if cnn else form_path,
                  shards=cnn_shards if cnn else shards, scratch=scratch,
                  workers=args.workers)
      start = time.perf_counter()
      row = run_child(task, scratch)
      row['process_seconds'] = time.perf_counter() - start
      rows.append(row)
      link_rows(rows)
      if args.json:  # After every row: a long run that stops keeps its rows.
        write_json(args.json, rows, settings)
      workers_cpu = row.get('workers_cpu_seconds')
      print(f'  {describe(row)}: {row["round_seconds"]:.2f} s a round (CPU: '
            f'{row.get("cpu_seconds", 0):.2f} s here' +
            ('' if workers_cpu is None else f', {workers_cpu:.2f} s workers')
            + f'), peak {row["peak_rss_mb"]:.0f} MB '
            f'({row["process_seconds"]:.0f} s in all)', flush=True)
  print_table(rows, settings.get('cnn_parameters'))
  for line in target_lines(targets(rows, rounds_clients, args.workers)):
    print(line)
  if args.json:
    write_json(args.json, rows, settings)


def write_json(path, rows, settings):
  with open(path, 'w') as f:
    json.dump({'rows': rows,
               'targets': targets(rows, settings['rounds_clients'],
                                        settings['workers']),
               'vector': VECTOR, **settings}, f, indent=1)


if __name__ == '__main__':
  main()
