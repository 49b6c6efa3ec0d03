"""Seconds per FedAvg round in ours and in the systems people pick instead,
against the compute floor, on the same workloads.

Workloads (Fashion-MNIST from Debian's dataset-fashion-mnist, IID: a seeded
permutation of the training set cut into equal clients; client SGD lr 0.02,
server SGD lr 1.0, 1 local epoch, batches of 20; --warmup rounds, then
--rounds measured; every system starts from the same initial weights and
trains the same clients each round: the runner's `sample_clients`, drawn once
here and handed to every system):
  W1  the tutorial CNN (`cnn_28x28`, 1,663,370 weights), 10 clients a round
      of 600 examples (30 batches), from 100.
  W2  logistic regression (784 -> 10, 7,850 weights), 100 clients a round of
      20 examples (one batch each), from 3,000.
  W3  W2's clients, 1,000 a round.

Systems, each a row measured in its own process (see
`benchmarks/peers_rows.py` for ours, `benchmarks/peer_*.py` for the peers):
  floor   the round's client SGD steps as one plain TF loop, data in memory.
          Every ratio divides by it, measured in the same repeat.
  loop    ours: FedAvg built as a TFF user would, compiled, saved, loaded,
          rounds by `canonical.run_round`, each client's file read in the
          round.
  api     ours through TFF's API, as the tff row runs TFF: the process built
          as a TFF user would, rounds by `process.next(state, datasets)` on
          in-memory tf.data datasets built before the round.
  beam    ours: `beam_runner.run` on the in-process runner; the measured
          rounds in one call, wall time / rounds.
  dask    the same on a local Dask cluster of --dask-workers processes
          (started in the row's process and warmed before any round).
  pfl     pfl-research (`SimulatedBackend` + `TFModel`), in its own venv.
  tff     TensorFlow Federated 0.87 (its C++ context), in its own venv.
  flower  Flower (`run_simulation`, --flower-actors Ray actors), in its own
          venv.
A peer whose venv (--pfl-venv, --tff-venv, --flower-venv; env PEERS_PFL_VENV
and so on; default $PEERS/venv-pfl, venv-tff, venv-flwr with PEERS=/work/peers)
or package is missing is skipped, and the JSON says why. Install them as
../shared/peers/README.md says. Ours reads client data from files inside the
round; the floor, pfl, TFF (datasets built before the round) and Flower have
it in memory.

Systems run interleaved: repeat r runs every system on the first workload,
then on the next; ratios to the floor are formed within a repeat, and the
table shows medians over --repeats. `cpu_seconds` is CPU per measured round of
the row's process (a peer's: its process tree, TFF's worker_binary and Ray's
actors included), `workers_cpu_seconds` the Dask workers', and
`total_cpu_seconds` their sum. `same_result`
compares every system's final weights with the floor's: ours in process
(same clients, same order, same initial weights) must agree to float
tolerance, which is what makes the comparison one of equal work; Dask's
(which merges each worker's partial sum) and the peers' agreement is
reported. Before the rows, `parallel_speedup` measures the cores there are
to share. Then `targets` judges issue 31's targets (met / missed / not
measured): each of ours over the floor (median ratio), and each of ours
against the fastest peer measured (median seconds, ours / theirs < 1).

Usage (from the repository root):
  python -m benchmarks.peers [--quick] [--workloads W1,W2,W3]
      [--systems floor,loop,api,beam,dask,pfl,tff,flower] [--repeats 3]
      [--rounds 5] [--warmup 2] [--data DIR] [--json PATH]
"""

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks import peers_rows
from benchmarks import runner
from benchmarks import runner_rows

ROOT = runner_rows.ROOT
HERE = os.path.join(ROOT, 'benchmarks')
DEFAULT_JSON = os.path.join(HERE, 'results', 'peers.json')
IDX_DIR = os.environ.get('FASHION_MNIST_DIR',
                         '/usr/share/datasets/fashion-mnist')
PEERS_DIR = os.environ.get('PEERS', '/work/peers')

TRAINING = dict(batch_size=20, client_lr=0.02, server_lr=1.0, epochs=1)
WORKLOADS = {
    'W1': dict(model='cnn', num_clients=100, examples=600,
               clients_per_round=10),
    'W2': dict(model='logistic', num_clients=3000, examples=20,
               clients_per_round=100),
    'W3': dict(model='logistic', num_clients=3000, examples=20,
               clients_per_round=1000),
}
QUICK_WORKLOADS = {
    'W1': dict(WORKLOADS['W1'], num_clients=10, examples=60,
               clients_per_round=2),
    'W2': dict(WORKLOADS['W2'], num_clients=100, clients_per_round=10),
    'W3': dict(WORKLOADS['W3'], num_clients=100, clients_per_round=30),
}
MODELS = {'cnn': 'the tutorial CNN (cnn_28x28)',
          'logistic': 'logistic regression (784 -> 10)'}
SYSTEMS = {
    'floor': 'compute floor (plain TF loop, in memory)',
    'loop': 'ours, local loop',
    'api': 'ours, TFF API (process.next)',
    'beam': 'ours, Beam in process',
    'dask': 'ours, Dask with {dask_workers} workers',
    'pfl': 'pfl-research, one process',
    'tff': 'TFF 0.87',
    'flower': 'Flower, {flower_actors} Ray actors',
}
OURS = ('loop', 'beam', 'dask')
PEERS = {'pfl': ('peer_pfl.py', 'venv-pfl'),
         'tff': ('peer_tff.py', 'venv-tff'),
         'flower': ('peer_flower.py', 'venv-flwr')}
SKIP_STATUS = 3  # peer_common.SKIP_STATUS: the peer is not installed.
# Issue 31's targets: ours over the floor, median of the repeats.
IN_PROCESS_TARGETS = {'W1': 1.05, 'W2': 1.5, 'W3': 1.5}
DASK_TARGETS = {'W1': 0.6, 'W2': 1.0, 'W3': 1.0}
# Final weights of ours and of the floor agree within these (np.allclose).
TOLERANCE = dict(rtol=1e-5, atol=1e-5)
# Ours that sum the clients' updates in the floor's order, so end on its
# weights within TOLERANCE. Dask merges each worker's partial sum: float
# re-association, ~1e-8 on W2/W3, which W1's 2,100 SGD steps amplify to
# ~1e-2 (as the peers' own orders do); its difference is reported, not judged.
SAME_ORDER = ('loop', 'api', 'beam')
# Issue 36's targets for ours through TFF's API on W2: `process.next` over
# `run_round` on element lists (the loop row), and over TFF 0.87's own
# `process.next` (at least 5x faster: at most 0.2 of its seconds).
API_OVER_LOOP_TARGET = 1.5
API_OVER_TFF_TARGET = 0.2
API_TARGET_WORKLOADS = ('W2',)


class BenchmarkError(RuntimeError):
  """A row of ours that failed, or a setting that cannot run."""


# ---------------------------------------------------------------------------
# Child processes


def _environment():
  env = {**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '2'}
  for name in ('PYTHONPATH', 'VIRTUAL_ENV'):
    env.pop(name, None)
  return env


def _end_group(pgid):
  """Ends what is left of a process group this benchmark started (a peer's
  children that outlive it: TFF's worker_binary, Ray's processes)."""
  for sig in (signal.SIGTERM, signal.SIGKILL):
    try:
      os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
      return
    time.sleep(0.5)


def _run(command, log_path, timeout=None, env=None):
  """Runs `command` in its own session, output to `log_path`; its exit
  status (None on timeout). Whatever it leaves running is ended."""
  with open(log_path, 'w') as log:
    proc = subprocess.Popen(command, cwd=ROOT, stdout=log,
                            stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=env or _environment(),
                            start_new_session=True)
    try:
      return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
      return None
    finally:
      _end_group(proc.pid)
      proc.wait()


def _tail(path, lines=30):
  with open(path, errors='replace') as f:
    return ''.join(f.readlines()[-lines:])


def run_ours(task, scratch):
  """`peers_rows.child_main(task)` in a fresh Python process; its result."""
  name = f'{task["kind"]}-{task.get("workload", task.get("key"))}-' \
         f'{task.get("repeat", 0)}'
  result_path = os.path.join(scratch, f'{name}.json')
  log_path = os.path.join(scratch, f'{name}.log')
  status = _run([sys.executable, '-m', 'benchmarks.peers', '--child',
                 json.dumps(task), '--child-result', result_path], log_path)
  if status != 0:
    raise BenchmarkError(f'{name} failed (exit {status}):\n'
                         f'{_tail(log_path)}')
  with open(result_path) as f:
    return json.load(f)


def peer_python(venv):
  return os.path.join(venv, 'bin', 'python')


def missing_peer(venv):
  """Why a peer cannot run from `venv`, or None."""
  if not os.path.isdir(venv):
    return (f'no venv at {venv} (install it as ../shared/peers/README.md '
            'says, or point the --*-venv flag at one)')
  if not os.access(peer_python(venv), os.X_OK):
    return f'{venv} has no bin/python'
  return None


def run_peer(system, venv, task, scratch, timeout):
  """(status, result or reason): 'measured', 'skipped' or 'failed'."""
  script, _ = PEERS[system]
  name = f'{system}-{task["workload"]}-{task["repeat"]}'
  task_path = os.path.join(scratch, f'{name}-task.json')
  result_path = os.path.join(scratch, f'{name}.json')
  log_path = os.path.join(scratch, f'{name}.log')
  with open(task_path, 'w') as f:
    json.dump(task, f)
  status = _run([peer_python(venv), os.path.join(HERE, script), '--task',
                 task_path, '--result', result_path], log_path, timeout)
  if status == 0:
    with open(result_path) as f:
      return 'measured', json.load(f)
  if status == SKIP_STATUS:
    lines = [l for l in _tail(log_path).splitlines()
             if l.startswith('skip: ')]
    return 'skipped', lines[-1][len('skip: '):] if lines else 'not installed'
  what = 'timed out' if status is None else f'exit {status}'
  return 'failed', f'{what}; its output ends:\n{_tail(log_path, 15)}'


# ---------------------------------------------------------------------------
# Plan


def data_key(workload):
  return f'{workload["model"]}-{workload["num_clients"]}x' \
         f'{workload["examples"]}'


def prepare_all(workloads, total_rounds, data_dir, scratch):
  """Prepares every data set once (its client files reused from `data_dir`
  when written there with the same settings; the form compiled anew);
  {key: prepared facts and paths}."""
  prepared = {}
  for key in sorted({data_key(w) for w in workloads.values()}):
    first = next(w for w in workloads.values() if data_key(w) == key)
    directory = os.path.join(data_dir, key)
    task = dict(kind='prepare', key=key, model=first['model'],
                num_clients=first['num_clients'], examples=first['examples'],
                **TRAINING, dir=directory,
                partition=os.path.join(directory, 'partition.npy'),
                initial_weights=os.path.join(directory, 'initial.npz'),
                shards=os.path.join(directory, 'clients'),
                form=os.path.join(scratch, f'form-{key}.pb'),
                sampling={name: dict(clients_per_round=w['clients_per_round'],
                                     rounds=total_rounds)
                          for name, w in workloads.items()
                          if data_key(w) == key})
    start = time.perf_counter()
    facts = run_ours(task, scratch)
    print(f'prepared {key} ({first["num_clients"]} clients of '
          f'{first["examples"]} examples; client files '
          f'{"reused from" if facts["reused_data"] else "written to"} '
          f'{directory}) in {time.perf_counter() - start:.1f} s', flush=True)
    prepared[key] = dict(task, **facts)
  return prepared


def weights_path(scratch, system, workload, repeat):
  """Where a row leaves its final weights (for `link`)."""
  return os.path.join(scratch, f'weights-{system}-{workload}-{repeat}.npz')


def row_task(system, name, workload, data, repeat, args, scratch):
  """What a row of `system` is given."""
  task = dict(workload=name, repeat=repeat, model=workload['model'],
              **TRAINING, samples=data['samples'][name], warmup=args.warmup,
              partition=data['partition'],
              initial_weights=data['initial_weights'],
              weights_out=weights_path(scratch, system, name, repeat))
  if system in PEERS:
    return dict(task, idx_dir=IDX_DIR, actors=args.flower_actors)
  kind = 'beam' if system in ('beam', 'dask') else system  # Or floor, loop, api.
  return dict(task, kind=kind, form=data['form'], shards=data['shards'],
              scratch=scratch, mode='dask' if system == 'dask' else 'in_memory',
              workers=args.dask_workers, threads=None)


def measure(system, name, workload, data, repeat, args, scratch):
  """One row: the system's seconds per measured round and facts."""
  task = row_task(system, name, workload, data, repeat, args, scratch)
  row = dict(workload=name, system=system, repeat=repeat)
  start = time.perf_counter()
  if system in PEERS:
    status, result = run_peer(system, args.venvs[system], task, scratch,
                              args.peer_timeout)
    if status != 'measured':
      return dict(row, status=status, reason=result)
    warmup = args.warmup
    measured, cpu = result['round_seconds'][warmup:], \
        result['cpu_seconds'][warmup:]
    row.update(round_seconds=_mean(measured), each_round_seconds=measured,
               warmup_seconds=result['round_seconds'][:warmup],
               cpu_seconds=_mean(cpu), rounds=len(measured),
               timed='each round, in the peer\'s process (CPU: its process '
                     'tree)',
               **{k: v for k, v in result.items()
                  if k not in ('round_seconds', 'cpu_seconds')})
  else:
    row.update(run_ours(task, scratch))
  row.update(status='measured',
             process_seconds=time.perf_counter() - start)
  row['total_cpu_seconds'] = row['cpu_seconds'] + (
      row.get('workers_cpu_seconds') or 0.0)
  return row


def _mean(values):
  return sum(values) / len(values)


# ---------------------------------------------------------------------------
# What the rows say together


def _weights(path):
  import numpy as np  # pylint: disable=g-import-not-at-top
  with np.load(path) as saved:
    return [saved[f'w{i}'] for i in range(len(saved.files))]


def link(rows, row, scratch):
  """The row's ratio to the floor of its workload and repeat, and how far
  its final weights are from the floor's."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  floor = next((r for r in rows if r['system'] == 'floor' and
                r['workload'] == row['workload'] and
                r['repeat'] == row['repeat'] and
                r['status'] == 'measured'), None)
  if floor is None or row['status'] != 'measured':
    return
  row['floor_seconds'] = floor['round_seconds']
  row['ratio'] = row['round_seconds'] / floor['round_seconds']
  row['cpu_ratio'] = row['total_cpu_seconds'] / floor[
      'total_cpu_seconds'] if floor['total_cpu_seconds'] else None
  ours, theirs = (_weights(weights_path(scratch, r['system'], r['workload'],
                                        r['repeat'])) for r in (row, floor))
  if [w.shape for w in ours] != [w.shape for w in theirs]:
    row.update(max_abs_diff_to_floor=None, same_as_floor=False)
    return
  row['max_abs_diff_to_floor'] = max(
      float(np.max(np.abs(a - b))) for a, b in zip(ours, theirs))
  row['same_as_floor'] = all(np.allclose(a, b, **TOLERANCE)
                             for a, b in zip(ours, theirs))


def summary(rows):
  """{workload: {system: medians over the repeats, and each repeat's}}."""
  result = {}
  for row in rows:
    if row['status'] != 'measured':
      continue
    entry = result.setdefault(row['workload'], {}).setdefault(
        row['system'], dict(seconds=[], ratios=[], cpu_seconds=[]))
    entry['seconds'].append(row['round_seconds'])
    entry['cpu_seconds'].append(row['total_cpu_seconds'])
    if row.get('ratio') is not None:
      entry['ratios'].append(row['ratio'])
  for systems in result.values():
    for entry in systems.values():
      entry['median_seconds'] = statistics.median(entry['seconds'])
      entry['median_cpu_seconds'] = statistics.median(entry['cpu_seconds'])
      entry['median_ratio'] = statistics.median(entry['ratios']) if \
          entry['ratios'] else None
  return result


def same_result(rows):
  """Whether every system's final weights agree with the floor's, per
  workload (the largest difference over the repeats); judged on SAME_ORDER."""
  workloads = {}
  for row in rows:
    if row['system'] == 'floor' or 'same_as_floor' not in row:
      continue
    entry = workloads.setdefault(row['workload'], {}).setdefault(
        row['system'], dict(max_abs_diff=0.0, within_tolerance=True,
                            judged=row['system'] in SAME_ORDER))
    diff = row.get('max_abs_diff_to_floor')
    entry['max_abs_diff'] = None if diff is None or entry[
        'max_abs_diff'] is None else max(entry['max_abs_diff'], diff)
    entry['within_tolerance'] = entry['within_tolerance'] and bool(
        row['same_as_floor'])
  judged = [e['within_tolerance'] for systems in workloads.values()
            for e in systems.values() if e['judged']]
  return dict(tolerance=TOLERANCE, judged_systems=list(SAME_ORDER),
              ok=all(judged) if judged else None, workloads=workloads)


def targets(summarized, workload_names, labels, rows_by_repeat=()):
  """Issue 31's targets on the medians, and issue 36's on the rows
  (figure and met None: not measured)."""
  result = {}
  for name in workload_names:
    systems = summarized.get(name, {})
    for system in OURS:
      target = (DASK_TARGETS if system == 'dask' else IN_PROCESS_TARGETS).get(
          name)
      entry = systems.get(system, {})
      result[f'{name}_{system}_over_floor'] = runner.judge(
          f'{name}: {labels[system]} over the compute floor, median of the '
          'repeats', entry.get('median_ratio'), target,
          ratios=entry.get('ratios', []))
    peers = {p: systems[p]['median_seconds'] for p in PEERS if p in systems}
    for system in OURS:
      ours = systems.get(system, {}).get('median_seconds')
      figure = ours / min(peers.values()) if ours and peers else None
      result[f'{name}_{system}_faster_than_peers'] = runner.judge(
          f'{name}: {labels[system]} seconds over the fastest peer measured '
          f'({", ".join(sorted(peers)) or "none"})', figure, 1.0, below=True,
          ours_seconds=ours, peer_seconds=peers)
  result.update(api_targets(rows_by_repeat, workload_names))
  return result


def api_targets(rows, workload_names):
  """Issue 36's targets: ours through TFF's API over the loop, and over
  TFF 0.87's `process.next`; ratios formed within each repeat, median."""
  result = {}
  for name in workload_names:
    if name not in API_TARGET_WORKLOADS:
      continue
    for baseline, target, what in (
        ('loop', API_OVER_LOOP_TARGET, 'run_round on element lists (loop)'),
        ('tff', API_OVER_TFF_TARGET, 'TFF 0.87\'s process.next')):
      ratios = _paired_ratios(rows, name, 'api', baseline)
      result[f'{name}_api_over_{baseline}'] = runner.judge(
          f'{name}: ours through TFF\'s API (process.next) over {what}, '
          'median of the repeats', statistics.median(ratios) if ratios
          else None, target, ratios=ratios)
  return result


def _paired_ratios(rows, workload, system, baseline):
  """`system`'s seconds over `baseline`'s, per repeat both measured."""
  seconds = {}
  for row in rows:
    if row['workload'] == workload and row['status'] == 'measured':
      seconds[(row['system'], row['repeat'])] = row['round_seconds']
  return [seconds[(system, r)] / seconds[(baseline, r)]
          for (s, r) in sorted(seconds) if s == system and
          (baseline, r) in seconds]


# ---------------------------------------------------------------------------
# Output


def _cell(entry, figure, ratio):
  if entry is None:
    return ''
  text = f'{entry[figure]:.3f} s'
  if entry.get(ratio) is not None:
    text += f' ({entry[ratio]:.2f}x)'
  return text


def print_table(summarized, workload_names, systems, workloads, labels,
                skipped, failed, print_fn=print):
  """Median seconds per round (and ratio to the floor), then median CPU
  seconds per round, by system and workload."""
  for name in workload_names:
    w = workloads[name]
    print_fn(f'{name}: {MODELS[w["model"]]}, {w["clients_per_round"]} '
             f'clients a round of {w["examples"]} examples, from '
             f'{w["num_clients"]}')
  width = 22
  for title, figure in (('seconds per round (x the floor)', 'median_seconds'),
                        ('CPU seconds per round, all its processes',
                         'median_cpu_seconds')):
    print_fn(f'\n{title}, median of the repeats:')
    print_fn(f'{"system":42}' + ''.join(f'{n:>{width}}'
                                        for n in workload_names))
    for system in systems:
      cells = []
      for name in workload_names:
        entry = summarized.get(name, {}).get(system)
        if entry is None:
          cells.append('failed' if (system, name) in failed else
                       'skipped' if system in skipped else '')
        elif figure == 'median_seconds':
          cells.append(_cell(entry, figure, 'median_ratio'))
        else:
          cells.append(f'{entry[figure]:.3f} s')
      print_fn(f'{labels[system]:42}' + ''.join(f'{c:>{width}}'
                                                 for c in cells))
  for system, reason in skipped.items():
    print_fn(f'{system} skipped: {reason}')


def machine():
  facts = dict(cpus=os.cpu_count(), platform=platform.platform(),
               python=platform.python_version())
  try:
    with open('/proc/cpuinfo') as f:
      facts['cpu_model'] = next(
          (l.split(':', 1)[1].strip() for l in f if l.startswith(
              'model name')), None)
    with open('/proc/meminfo') as f:
      facts['memory_gb'] = int(f.readline().split()[1]) / 2**20
  except OSError:
    pass
  return facts


def write_json(path, report):
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  with open(path, 'w') as f:
    json.dump(report, f, indent=1)


# ---------------------------------------------------------------------------
# Main


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0] + ' ' +
                                   __doc__.split('\n')[1])
  parser.add_argument('--quick', action='store_true', help='tiny settings '
                      'for a test: W2 as 10 clients a round of 20 from 100 '
                      '(W1: 2 of 60 from 10, W3: 30 of 20 from 100), 1 '
                      'warm-up round, 2 measured, 1 repeat')
  parser.add_argument('--workloads', help='comma-separated, from '
                      f'{",".join(WORKLOADS)} (default: all; --quick: W2)')
  parser.add_argument('--systems', default=','.join(SYSTEMS),
                      help=f'comma-separated, in the order run (default '
                      f'{",".join(SYSTEMS)})')
  parser.add_argument('--repeats', type=int, help='times every row is '
                      'measured, interleaved (default 3; --quick: 1)')
  parser.add_argument('--rounds', type=int, help='rounds measured after the '
                      'warm-up (default 5; --quick: 2)')
  parser.add_argument('--warmup', type=int, help='warm-up rounds (default 2; '
                      '--quick: 1)')
  parser.add_argument('--dask-workers', type=int, default=2,
                      help='worker processes of the Dask row (default 2)')
  parser.add_argument('--flower-actors', type=int, default=2,
                      help='Ray actors of the Flower row (default 2)')
  for system, (_, venv) in PEERS.items():
    variable = f'PEERS_{system.upper()}_VENV'
    parser.add_argument(f'--{system}-venv',
                        default=os.environ.get(variable,
                                               os.path.join(PEERS_DIR, venv)),
                        help=f'{system}\'s venv (default ${variable} or '
                        f'$PEERS/{venv}, PEERS={PEERS_DIR})')
  parser.add_argument('--peer-timeout', type=float, default=3600,
                      help='seconds a peer row may take (default 3600)')
  parser.add_argument('--data', help='where to keep the clients\' files, '
                      'partition and initial weights, reused when written '
                      'with the same settings; the form is compiled anew '
                      'every run (default: a temporary directory)')
  parser.add_argument('--json', default=DEFAULT_JSON, help='where the JSON '
                      'goes (default benchmarks/results/peers.json)')
  parser.add_argument('--child', help=argparse.SUPPRESS)
  parser.add_argument('--child-result', help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.child:
    return args
  quick = args.quick
  for name, full, small in (('repeats', 3, 1), ('rounds', 5, 2),
                            ('warmup', 2, 1)):
    if getattr(args, name) is None:
      setattr(args, name, small if quick else full)
  for name in ('repeats', 'rounds', 'warmup', 'dask_workers',
               'flower_actors'):
    if getattr(args, name) < 1:
      parser.error(f'--{name.replace("_", "-")} must be at least 1.')
  args.workloads = (args.workloads or ('W2' if quick else ','.join(
      WORKLOADS))).split(',')
  unknown = [w for w in args.workloads if w not in WORKLOADS]
  if unknown:
    parser.error(f'unknown --workloads {",".join(unknown)}; choose from '
                 f'{",".join(WORKLOADS)}.')
  args.systems = [s for s in args.systems.split(',') if s]
  unknown = [s for s in args.systems if s not in SYSTEMS]
  if unknown:
    parser.error(f'unknown --systems {",".join(unknown)}; choose from '
                 f'{",".join(SYSTEMS)}.')
  args.venvs = {s: os.path.abspath(getattr(args, f'{s}_venv'))
                for s in PEERS}
  return args


def main(argv=None):
  args = parse_args(argv)
  if args.child:
    peers_rows.child_main(args.child, args.child_result)
    return
  try:
    run(args)
  except BenchmarkError as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(1)


def run(args):
  shapes = QUICK_WORKLOADS if args.quick else WORKLOADS
  workloads = {name: shapes[name] for name in args.workloads}
  labels = {system: SYSTEMS[system].format(
      dask_workers=args.dask_workers, flower_actors=args.flower_actors)
            for system in SYSTEMS}
  skipped = {s: missing_peer(args.venvs[s]) for s in args.systems
             if s in PEERS and missing_peer(args.venvs[s])}
  for system, reason in skipped.items():
    print(f'{system}: skipped: {reason}', flush=True)
  report = dict(
      settings=dict(quick=args.quick, workloads=workloads,
                    systems=args.systems, repeats=args.repeats,
                    rounds=args.rounds, warmup=args.warmup,
                    dask_workers=args.dask_workers,
                    flower_actors=args.flower_actors, venvs=args.venvs,
                    idx_dir=IDX_DIR, **TRAINING),
      machine=dict(machine(), load_average_before=os.getloadavg()),
      labels=labels,
      skipped=dict(skipped), versions={}, rows=[])
  report['parallel_speedup'] = runner.parallel_speedup(args.dask_workers)
  report['machine']['parallel_speedup'] = report['parallel_speedup']
  print(f'{args.dask_workers} processes on {os.cpu_count()} CPUs: '
        f'{report["parallel_speedup"]:.2f}x the throughput of one', flush=True)
  rows, failed = report['rows'], set()
  started = time.perf_counter()
  with tempfile.TemporaryDirectory(prefix='bench-peers-') as scratch:
    data_dir = args.data or os.path.join(scratch, 'data')
    prepared = prepare_all(workloads, args.warmup + args.rounds, data_dir,
                           scratch)
    for key, data in prepared.items():
      report.setdefault('data', {})[key] = {
          k: data[k] for k in ('parameters', 'prepare_seconds', 'num_clients',
                               'examples', 'model', 'reused_data')}
      report['versions']['ours'] = data['versions']
    for repeat in range(args.repeats):
      for name, workload in workloads.items():
        data = prepared[data_key(workload)]
        for system in args.systems:
          if system in skipped:
            continue
          try:
            row = measure(system, name, workload, data, repeat, args,
                          scratch)
          except BenchmarkError as e:
            row = dict(workload=name, system=system, repeat=repeat,
                       status='failed', reason=str(e))
          rows.append(row)
          _report_row(row, report, skipped, failed, scratch)
          finish(report, args)
          write_json(args.json, report)
    report['seconds'] = time.perf_counter() - started
    report['machine']['load_average_after'] = os.getloadavg()
    finish(report, args)
    write_json(args.json, report)
  print()
  print_table(report['summary'], args.workloads, args.systems, workloads,
              labels, skipped, failed)
  print(f'\nsame_result: final weights of ours in process vs the floor within '
        f'rtol {TOLERANCE["rtol"]}, atol {TOLERANCE["atol"]}: ' +
        {True: 'yes', False: 'NO', None: 'not measured'}[
            report['same_result']['ok']])
  for name, systems in report['same_result']['workloads'].items():
    print(f'  {name}: ' + ', '.join(
        f'{s} {e["max_abs_diff"]:.1e}' for s, e in systems.items()
        if e['max_abs_diff'] is not None))
  for line in runner.target_lines(report['targets']):
    print(line)
  print(f'wrote {args.json} ({report["seconds"]:.0f} s in all)')
  ours_failed = [r for r in rows if r['status'] == 'failed' and
                 r['system'] not in PEERS]
  if ours_failed:
    raise BenchmarkError(
        'rows of ours failed (their output is printed above and in the '
        'JSON): ' + ', '.join(f'{r["system"]} {r["workload"]} repeat '
                              f'{r["repeat"] + 1}' for r in ours_failed))


def _report_row(row, report, skipped, failed, scratch):
  """Prints the row's line; notes a peer found missing and its versions."""
  where = f'  repeat {row["repeat"] + 1} {row["workload"]} ' \
          f'{report["labels"][row["system"]]}'
  if row['status'] == 'skipped':
    skipped[row['system']] = report['skipped'][row['system']] = row['reason']
    print(f'{where}: skipped: {row["reason"]}', flush=True)
    return
  if row['status'] == 'failed':
    failed.add((row['system'], row['workload']))
    print(f'{where}: FAILED: {row["reason"]}', flush=True)
    return
  link(report['rows'], row, scratch)
  if row['system'] in PEERS:
    report['versions'].setdefault(row['system'], row.pop('versions', None))
  ratio = '' if row.get('ratio') is None else \
      f' ({row["ratio"]:.2f}x the floor)'
  print(f'{where}: {row["round_seconds"]:.3f} s a round{ratio}, CPU '
        f'{row["total_cpu_seconds"]:.3f} s ({row["process_seconds"]:.0f} s '
        'in all)', flush=True)


def finish(report, args):
  """The sections computed from the rows."""
  report['summary'] = summary(report['rows'])
  report['same_result'] = same_result(report['rows'])
  report['targets'] = targets(report['summary'], args.workloads,
                              report['labels'], report['rows'])


if __name__ == '__main__':
  main()
