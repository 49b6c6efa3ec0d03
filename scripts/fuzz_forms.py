"""Fuzzes the form loader: mutated form files, each loaded and run in a child.

Every mutation of a saved federated averaging form (small_8x8) gets its
checksum fixed, so it reaches the parser and the checks behind the envelope,
and is loaded and, if it loads, run for one round on two small clients. The
only acceptable outcomes are a loaded form that ran, a `FormError` at load,
or a round that failed with a Python exception; a child killed by a signal
(TensorFlow aborting) or running past `--timeout` is a finding, printed with
the mutation that made it (rerun one with `--only INDEX`).

Mutations are of two kinds, chosen at random: bytes of the serialized form
(flipped, replaced, deleted, inserted), and fields of its pieces' graphs
(a node's op swapped for another allowed op, a dtype or a shape dimension
changed, an input rewired or dropped, a constant's values, dtype or shape
changed, a call redirected to another function).

A child runs many mutations in turn, and TensorFlow can abort in a
background thread after the mutation that caused it has returned. So a
finding is confirmed before it counts: its mutation is run again alone, then
the `CONFIRM_BEFORE` mutations before it and itself again in one child. A
crash that neither reproduces is reported as unconfirmed (with TensorFlow's
fatal line), not counted as a finding: TensorFlow aborted once each in two
CI runs this way (FunctionHandleCache::Instantiate, in a thread of its own),
and neither reproduced in a dozen reruns of the same mutations.

    python scripts/fuzz_forms.py --count 2000 [--seed 0] [--timeout 60]
"""

import argparse
import collections
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTCOMES = ('ran', 'refused', 'round_failed')
CONFIRM_BEFORE = 20  # Mutations rerun before an unreproduced crash's.


def base_form_bytes():
  """The saved small fedavg form every mutation starts from."""
  from canonical.learning import algorithms  # pylint: disable=g-import-not-at-top
  from canonical import learning  # pylint: disable=g-import-not-at-top
  from canonical.learning import models  # pylint: disable=g-import-not-at-top
  import canonical as cf  # pylint: disable=g-import-not-at-top
  model = learning.KerasFunctionalModel.from_keras(models.small_8x8, seed=0)
  process = algorithms.build_federated_averaging_process(
      model, lambda: learning.sgd(0.1))
  return cf.saving.to_bytes(cf.compile(process))


def mutate(data, index, seed):
  """Mutation `index` of form file `data` (deterministic), checksum fixed."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from canonical.saving import envelope  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng([seed, index])
  payload = data[envelope.HEADER_BYTES:]
  mutated = _mutate_graph(payload, rng) if rng.random() >= 0.3 else payload
  while mutated == payload:  # Bytes, or a graph edit that changed nothing.
    mutated = _mutate_bytes(payload, rng)
  return envelope.wrap(mutated)


def _mutate_bytes(payload, rng):
  data = bytearray(payload)
  for _ in range(int(rng.integers(1, 4))):
    position = int(rng.integers(len(data)))
    kind = rng.integers(4)
    if kind == 0:
      data[position] ^= 1 << int(rng.integers(8))
    elif kind == 1:
      data[position] = int(rng.integers(256))
    elif kind == 2:
      del data[position:position + int(rng.integers(1, 8))]
    else:
      data[position:position] = bytes(
          int(b) for b in rng.integers(0, 256, int(rng.integers(1, 8))))
  return bytes(data)


def _mutate_graph(payload, rng):
  """One to three structural edits of one piece's graph."""
  from canonical.saving import canonical_form_pb2  # pylint: disable=g-import-not-at-top
  from canonical.saving import op_allowlist  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  proto = canonical_form_pb2.Form()
  proto.ParseFromString(payload)
  piece = proto.pieces[int(rng.integers(len(proto.pieces)))]
  graph = piece.graph
  nodes = list(graph.node) + [n for f in graph.library.function
                              for n in f.node_def]
  functions = [f.signature.name for f in graph.library.function]
  allowed = sorted(op_allowlist.default_allowed_ops())
  dtypes = [tf.float32, tf.int32, tf.int64, tf.float64, tf.bool, tf.string,
            tf.uint8, tf.float16, tf.complex64, tf.variant, tf.resource]
  for _ in range(int(rng.integers(1, 4))):
    node = nodes[int(rng.integers(len(nodes)))]
    kind = int(rng.integers(8))
    if kind == 0:
      node.op = allowed[int(rng.integers(len(allowed)))]
    elif kind == 1 and node.attr:
      key = sorted(node.attr)[int(rng.integers(len(node.attr)))]
      value = node.attr[key]
      if value.WhichOneof('value') == 'type':
        value.type = dtypes[int(rng.integers(len(dtypes)))].as_datatype_enum
      elif value.WhichOneof('value') == 'shape' and value.shape.dim:
        dim = value.shape.dim[int(rng.integers(len(value.shape.dim)))]
        dim.size = int(rng.choice([-1, 0, 1, 3, 1 << 20, -7]))
      elif value.WhichOneof('value') == 'i':
        value.i = int(rng.choice([-1, 0, 1, 2, 1 << 30, -(1 << 40)]))
      elif value.WhichOneof('value') == 'func' and functions:
        value.func.name = functions[int(rng.integers(len(functions)))]
    elif kind == 2 and node.input:
      node.input[int(rng.integers(len(node.input)))] = nodes[int(
          rng.integers(len(nodes)))].name
    elif kind == 3 and node.input:
      del node.input[int(rng.integers(len(node.input)))]
    elif kind == 4 and node.op == 'Const':
      tensor = node.attr['value'].tensor
      choice = int(rng.integers(4))
      if choice == 0:
        tensor.dtype = dtypes[int(rng.integers(len(dtypes)))].as_datatype_enum
      elif choice == 1 and tensor.tensor_shape.dim:
        tensor.tensor_shape.dim[0].size = int(rng.choice([0, 1, 7, 1 << 28]))
      elif choice == 2:
        tensor.tensor_content = bytes(int(rng.integers(256))
                                      for _ in range(int(rng.integers(12))))
      else:
        tensor.ClearField('tensor_content')
        tensor.float_val.extend([float(rng.normal())])
    elif kind == 5 and node.attr:
      del node.attr[sorted(node.attr)[int(rng.integers(len(node.attr)))]]
    elif kind == 6:
      node.input.append(nodes[int(rng.integers(len(nodes)))].name)
    else:
      for key in sorted(node.attr):
        value = node.attr[key]
        if value.WhichOneof('value') == 'list' and value.list.shape:
          shape = value.list.shape[0]
          if shape.dim:
            shape.dim[0].size = int(rng.choice([-1, 0, 5, 1 << 24]))
          break
  return proto.SerializeToString(deterministic=True)


def _clients(form):
  """Two small clients of the form's data type."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  x_spec, y_spec = form.client_data_spec.element_spec
  rng = np.random.default_rng(0)
  return [tf.data.Dataset.from_tensor_slices((
      rng.uniform(size=[4] + x_spec.shape[1:].as_list()).astype(
          x_spec.dtype.as_numpy_dtype),
      rng.integers(0, 10, [4]).astype(y_spec.dtype.as_numpy_dtype))).batch(2)
          for _ in range(2)]


def child(first, last, seed, base_path):
  """Runs mutations first..last-1, one JSON line each, before and after."""
  import canonical as cf  # pylint: disable=g-import-not-at-top
  from canonical.saving import form_file  # pylint: disable=g-import-not-at-top
  with open(base_path, 'rb') as f:
    base = f.read()
  clients = _clients(form_file.from_bytes(base))
  for index in range(first, last):
    print(json.dumps({'start': index}), flush=True)
    data = mutate(base, index, seed)
    try:
      form = form_file.from_bytes(data, where=f'mutation {index}')
    except cf.FormError as e:
      print(json.dumps({'index': index, 'outcome': 'refused',
                        'why': str(e)[:200]}), flush=True)
      continue
    try:
      cf.run_round(form, form.initialize(), clients)
      outcome, why = 'ran', ''
    except Exception as e:  # pylint: disable=broad-except
      outcome, why = 'round_failed', f'{type(e).__name__}: {str(e)[:200]}'
    print(json.dumps({'index': index, 'outcome': outcome, 'why': why}),
          flush=True)


def fuzz(count, seed=0, timeout=60.0, only=None, print_fn=print):
  """Runs `count` mutations in children; returns (counts, findings,
  unconfirmed): findings reproduce, unconfirmed crashes did not."""
  import tempfile  # pylint: disable=g-import-not-at-top
  counts = collections.Counter()
  findings, unconfirmed = [], []
  with tempfile.TemporaryDirectory(prefix='fuzz-forms-') as scratch:
    base_path = os.path.join(scratch, 'base.pb')
    with open(base_path, 'wb') as f:
      f.write(base_form_bytes())
    first, last = (only, only + 1) if only is not None else (0, count)
    while first < last:
      index, reached = _run_child(first, last, seed, base_path, timeout,
                                  counts, print_fn)
      if index is None:
        break
      confirmed = _confirm(index, seed, base_path, timeout, counts)
      if confirmed is None:
        unconfirmed.append(reached)
        print_fn(f'UNCONFIRMED {reached["outcome"]} at mutation {index}, not '
                 f'reproduced alone or after the {CONFIRM_BEFORE} before it: '
                 f'{reached["why"]}')
      else:
        findings.append(confirmed)
        counts[confirmed['outcome']] += 1
        print_fn(f'FINDING mutation {index}: {confirmed["outcome"]} '
                 f'(rerun: python scripts/fuzz_forms.py --only {index} '
                 f'--seed {seed})')
      first = index + 1
  return counts, findings, unconfirmed


def _confirm(index, seed, base_path, timeout, counts):
  """The finding at `index` if a crash reproduces, alone or after the
  mutations before it; None otherwise (then `counts` holds the lone run's
  outcome)."""
  alone = collections.Counter()
  crashed, finding = _run_child(index, index + 1, seed, base_path, timeout,
                                alone, lambda line: None)
  if crashed is not None:
    return finding
  start = max(0, index - CONFIRM_BEFORE)
  crashed, finding = _run_child(start, index + 1, seed, base_path, timeout,
                                collections.Counter(), lambda line: None)
  if crashed is not None:
    return dict(finding, why=f'{finding["why"]} (rerunning mutations '
                             f'{start}-{index} in one child)')
  counts.update(alone)
  return None


def _run_child(first, last, seed, base_path, timeout, counts, print_fn):
  """Runs a child from `first`; returns (None, None) once it reaches `last`,
  or (index, finding) for the mutation that killed or hung it."""
  import selectors  # pylint: disable=g-import-not-at-top
  process = subprocess.Popen(
      [sys.executable, os.path.abspath(__file__), '--child', str(first),
       str(last), str(seed), base_path], cwd=ROOT, stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3',
               PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH',
                                                             '')))
  selector = selectors.DefaultSelector()
  selector.register(process.stdout, selectors.EVENT_READ)
  current, deadline = None, time.monotonic() + timeout + 120  # Start-up.
  try:
    while True:
      if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
        process.kill()
        process.wait()
        return current, {'index': current, 'outcome': 'hang',
                         'why': f'no answer in {timeout:.0f} s'}
      line = process.stdout.readline()
      if not line:
        process.wait()
        if current is None or process.returncode == 0:
          if process.returncode != 0:
            raise RuntimeError(f'The fuzz child failed before any mutation: '
                               f'{process.stderr.read()[-2000:]}')
          return None, None
        return current, {'index': current, 'outcome': 'crash',
                         'why': f'exit {process.returncode}: '
                                f'{_fatal_lines(process.stderr.read())}'}
      record = json.loads(line)
      if 'start' in record:
        current, deadline = record['start'], time.monotonic() + timeout
        continue
      counts[record['outcome']] += 1
      if record['index'] % 100 == 99:
        print_fn(f'{record["index"] + 1} mutations: {dict(counts)}')
  finally:
    if process.poll() is None:
      process.kill()
      process.wait()


def _fatal_lines(stderr):
  """TensorFlow's fatal line (F... / Check failed) and the stderr's tail."""
  fatal = [line for line in stderr.splitlines()
           if line.startswith('F0') or 'Check failed' in line][:3]
  return ' | '.join(fatal + [stderr[-300:]])


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--count', type=int, default=300)
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--timeout', type=float, default=60.0,
                      help='seconds one mutation may take')
  parser.add_argument('--only', type=int, help='run this mutation alone')
  parser.add_argument('--json', help='write the counts and findings here')
  parser.add_argument('--child', nargs=4, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.child:
    first, last, seed, base_path = args.child
    child(int(first), int(last), int(seed), base_path)
    return 0
  start = time.perf_counter()
  counts, findings, unconfirmed = fuzz(args.count, args.seed, args.timeout,
                                       args.only)
  print(f'{sum(counts.values())} mutations in '
        f'{time.perf_counter() - start:.0f} s: {dict(counts)}; '
        f'{len(findings)} findings, {len(unconfirmed)} unconfirmed')
  if args.json:
    with open(args.json, 'w') as f:
      json.dump({'counts': dict(counts), 'findings': findings,
                 'unconfirmed': unconfirmed, 'seed': args.seed,
                 'count': args.count}, f, indent=1)
  return 1 if findings else 0


if __name__ == '__main__':
  sys.exit(main())
