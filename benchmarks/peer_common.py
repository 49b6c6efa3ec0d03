"""What the peer scripts of `benchmarks/peers.py` share.

A peer script runs in its peer's own virtual environment
(`venv/bin/python benchmarks/peer_X.py --task TASK.json --result OUT.json`),
so it imports only that peer, TensorFlow and NumPy, and this module, which
imports only NumPy and the standard library at its top. It reads
Fashion-MNIST's IDX files itself, takes the clients' partition, the initial
weights and the clients of every round from the files the benchmark wrote,
runs the workload, and writes per-round seconds and CPU seconds, its
versions and its final weights.

Exit status 3 with a `skip:` line means the peer is not installed there.
"""

import argparse
import gzip
import json
import os
import signal
import sys
import time

import numpy as np

SKIP_STATUS = 3
IMAGES = 'train-images-idx3-ubyte.gz'
LABELS = 'train-labels-idx1-ubyte.gz'


def parse_args(description):
  """The task (a dict) and the result path from the command line."""
  parser = argparse.ArgumentParser(description=description)
  parser.add_argument('--task', required=True, help='the task, a JSON file')
  parser.add_argument('--result', required=True, help='where the result goes')
  args = parser.parse_args()
  with open(args.task) as f:
    return json.load(f), args.result


def skip(reason):
  """Ends the script: the peer is not installed here."""
  print(f'skip: {reason}', file=sys.stderr)
  sys.exit(SKIP_STATUS)


def read_idx(path):
  """The array in one gzipped IDX file (unsigned bytes)."""
  with gzip.open(path, 'rb') as f:
    data = f.read()
  ndim = data[3]
  shape = tuple(int(d) for d in np.frombuffer(data, '>u4', ndim, offset=4))
  return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(shape)


class Clients:
  """Every client's (images, labels) in memory, as the workload's model takes
  them: images float32 in [0, 1], [N, 28, 28, 1] or flattened [N, 784];
  labels int32."""

  def __init__(self, task):
    x = read_idx(os.path.join(task['idx_dir'], IMAGES)).astype(
        np.float32) / 255.0
    self.x = x.reshape(len(x), 784) if task['model'] == 'logistic' else \
        x[..., None]
    self.y = read_idx(os.path.join(task['idx_dir'], LABELS)).astype(np.int32)
    self.partition = np.load(task['partition'])

  def __len__(self):
    return len(self.partition)

  def __getitem__(self, index):
    rows = self.partition[index]
    return self.x[rows], self.y[rows]


def build_keras(keras, model):
  """The workload's architecture in `keras` (the peer's Keras): the tutorial
  CNN of `canonical.learning.models.cnn_28x28`, or 784 -> 10 logistic
  regression."""
  layers = keras.layers
  if model == 'cnn':
    return keras.Sequential([
        keras.Input(shape=(28, 28, 1)),
        layers.Conv2D(32, 5, padding='same', activation='relu'),
        layers.MaxPooling2D(2),
        layers.Conv2D(64, 5, padding='same', activation='relu'),
        layers.MaxPooling2D(2),
        layers.Flatten(),
        layers.Dense(512, activation='relu'),
        layers.Dense(10),
    ])
  if model == 'logistic':
    return keras.Sequential([keras.Input(shape=(784,)), layers.Dense(10)])
  raise ValueError(f'Unknown model {model!r}.')


def load_weights(path):
  with np.load(path) as saved:
    return [saved[f'w{i}'] for i in range(len(saved.files))]


def save_weights(path, weights):
  np.savez(path, **{f'w{i}': np.asarray(w) for i, w in enumerate(weights)})


def descendants(pid=None):
  """Ids of the live processes below `pid` (default: this one)."""
  found, todo = [], [pid or os.getpid()]
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


_TICKS = os.sysconf('SC_CLK_TCK')


def _process_cpu(pid):
  try:
    with open(f'/proc/{pid}/stat') as f:
      fields = f.read().rsplit(')', 1)[1].split()
  except (FileNotFoundError, ProcessLookupError):
    return 0.0
  return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime


def tree_cpu():
  """CPU seconds of this process, its reaped children and its live
  descendants (TFF's worker_binary, Ray's actors do the work there)."""
  times = os.times()
  return sum(times[:4]) + sum(_process_cpu(p) for p in descendants())


class Rounds:
  """Wall and CPU seconds of each round, as the rounds pass."""

  def __init__(self):
    self.seconds, self.cpu = [], []
    self._start = self._cpu = None

  def start(self):
    self._cpu, self._start = tree_cpu(), time.perf_counter()

  def lap(self):
    """Ends a round (and starts the next)."""
    now = time.perf_counter()
    self.seconds.append(now - self._start)
    cpu = tree_cpu()
    self.cpu.append(cpu - self._cpu)
    self._start, self._cpu = time.perf_counter(), cpu


def versions(*packages):
  """{package: version} of the installed `packages` (absent ones left out)."""
  import importlib.metadata as metadata  # pylint: disable=g-import-not-at-top
  found = {}
  for name in packages:
    try:
      found[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
      pass
  return found


def peak_rss_mb():
  with open('/proc/self/status') as f:
    for line in f:
      if line.startswith('VmHWM:'):
        return int(line.split()[1]) / 1024
  return 0.0


def end_children():
  """Terminates the processes this one started that are still alive (TFF's
  C++ worker outlives Python)."""
  for pid in descendants():
    try:
      os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
      pass


def write_result(path, task, rounds, versions, weights, **facts):
  """The result the benchmark reads; the final weights beside it."""
  save_weights(task['weights_out'], weights)
  with open(path, 'w') as f:
    json.dump(dict(round_seconds=rounds.seconds, cpu_seconds=rounds.cpu,
                   versions=versions, peak_rss_mb=peak_rss_mb(), **facts), f)
