"""Where a small client's time goes: a W2 client's cost, step by step.

W2 of `benchmarks/peers.py`: FedAvg of a logistic regression (784 -> 10)
built as a TFF user builds it, saved and loaded; clients of 20 Fashion-MNIST
examples, one batch each. For --clients clients, milliseconds a client of:

  floor              one plain `tf.function` SGD step on the client's batch,
                     in memory (the compute floor's work for a client)
  read, tf.data      `TFRecordClientData.read` (a dataset over its file), then
                     iterated: what reading cost through tf.data
  read, elements     `TFRecordClientData.read_elements` (no tf.data)
  work, dataset      the work piece called on the client's dataset
  work, elements     the work piece called on its element list (unrolled)
  accumulate         the accumulate piece, once a client
  batched            work then accumulate of all clients in one call
                     (`canonical.executors.batched_work`)

Each figure is the median of --repeats passes, interleaved; `x floor` divides
by the floor of the same pass. Prints a table and writes JSON.

Usage: python -m benchmarks.client_cost [--clients 200] [--repeats 3]
    [--json benchmarks/results/client_cost.json]
"""

import argparse
import json
import os
import statistics
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = ('floor', 'read, tf.data', 'read, elements', 'work, dataset',
         'work, elements', 'accumulate', 'batched')


def _setup(clients, directory):
  import keras  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import beam_runner  # pylint: disable=g-import-not-at-top
  import canonical as tff  # pylint: disable=g-import-not-at-top
  from benchmarks import peers_rows  # pylint: disable=g-import-not-at-top
  from pipelines import datasets  # pylint: disable=g-import-not-at-top
  data = datasets.load('fashion_mnist')
  x = data.train_x.reshape(-1, 784)[:clients * 20]
  y = data.train_y[:clients * 20]
  initial = peers_rows.build_keras('logistic').get_weights()
  spec = (tf.TensorSpec([None, 784], tf.float32),
          tf.TensorSpec([None], tf.int32))
  form = tff.compile(peers_rows.build_process('logistic', initial, spec, 0.02,
                                              1.0))
  path = os.path.join(directory, 'form.pb')
  tff.save(form, path)
  source = beam_runner.write_client_data(
      os.path.join(directory, 'clients'),
      {peers_rows.client_id(i): tf.data.Dataset.from_tensor_slices(
          (x[20 * i:20 * i + 20], y[20 * i:20 * i + 20])).batch(20)
       for i in range(clients)})
  del keras, np
  return tff.load(path), source, initial, x, y


def _passes(form, source, initial, x, y, repeats):
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from canonical.executors import batched_work  # pylint: disable=g-import-not-at-top
  ids = source.client_ids()
  spec = form.client_data_spec
  broadcast = form.prepare(form.initialize())
  elements = [source.read_elements(c, spec) for c in ids]
  datasets = [source.read(c, spec) for c in ids]
  kernel, bias = (tf.constant(w) for w in initial)

  @tf.function
  def sgd_step(xb, yb):
    with tf.GradientTape() as tape:
      tape.watch([kernel, bias])
      logits = tf.matmul(xb, kernel) + bias
      loss = tf.reduce_mean(
          tf.nn.sparse_softmax_cross_entropy_with_logits(yb, logits))
    grads = tape.gradient(loss, [kernel, bias])
    return kernel - 0.02 * grads[0], bias - 0.02 * grads[1]

  update = form.work(elements[0], broadcast)[0]
  batched = batched_work.BatchedWork.of(form)

  def read_dataset():
    for c in ids:
      for _ in source.read(c, spec):
        pass

  steps = {
      'floor': lambda: [sgd_step(x[20 * i:20 * i + 20], y[20 * i:20 * i + 20])
                        for i in range(len(ids))],
      'read, tf.data': read_dataset,
      'read, elements': lambda: [source.read_elements(c, spec) for c in ids],
      'work, dataset': lambda: [form.work(d, broadcast) for d in datasets],
      'work, elements': lambda: [form.work(e, broadcast) for e in elements],
      'accumulate': lambda: [form.accumulate(form.zero(), update)
                             for _ in ids],
      'batched': lambda: batched(None, broadcast, elements),
  }
  for step in steps.values():  # Warm: traces, caches.
    step()
  passes = []
  for _ in range(repeats):
    timed = {}
    for name in STEPS:
      start = time.perf_counter()
      steps[name]()
      timed[name] = (time.perf_counter() - start) / len(ids) * 1e3
    passes.append(timed)
  del np
  return passes


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--clients', type=int, default=200)
  parser.add_argument('--repeats', type=int, default=3)
  parser.add_argument('--json', default=os.path.join(
      ROOT, 'benchmarks', 'results', 'client_cost.json'))
  args = parser.parse_args(argv)
  with tempfile.TemporaryDirectory() as directory:
    passes = _passes(*_setup(args.clients, directory), args.repeats)
  rows = []
  print(f'ms a client ({args.clients} clients of 20 examples), median of '
        f'{args.repeats} passes:')
  print(f'{"step":<18}{"ms":>9}{"x floor":>10}')
  for name in STEPS:
    ms = statistics.median(p[name] for p in passes)
    ratio = statistics.median(p[name] / p['floor'] for p in passes)
    rows.append({'step': name, 'ms_per_client': ms, 'over_floor': ratio,
                 'passes': [p[name] for p in passes]})
    print(f'{name:<18}{ms:>9.3f}{ratio:>9.2f}x')
  os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
  with open(args.json, 'w') as f:
    json.dump({'clients': args.clients, 'repeats': args.repeats,
               'rows': rows}, f, indent=1)
  print(f'wrote {args.json}')


if __name__ == '__main__':
  main()
