"""What running clients together could save on W1: the moonshot's ceiling.

Issue 31's moonshot is to run clients of the same shape together, since the
pieces are pure. On W1 (`benchmarks/peers.py`: the tutorial CNN, clients of
30 batches of 20) every client trains its own copy of the model, so "together"
means each step's convolutions grouped over a client axis and the dense layers
as batched matrix products. This measures, on random data of W1's shapes
(the cost does not depend on the values), seconds for --clients clients'
--steps SGD steps:

  one after another  each client's steps in a `tf.while_loop`, one call a
                     client: the compute floor's work, and what our batched
                     work runs today
  grouped            all clients' steps in one `tf.while_loop`, each client
                     with its own weights: convolutions grouped by client
                     (`feature_group_count`), dense layers as batched
                     matmuls. What a vectorising rewrite of the work piece
                     could reach
  one shared model   all clients' examples through one model, a batch of
                     clients x 20 a step. Not federated averaging (clients
                     share weights): a bound on what batching can buy

Each figure is the median of --repeats passes, interleaved; `x one after
another` divides by that row's time in the same pass. `max diff` is the
largest difference of the grouped clients' final weights from one after
another's (the same arithmetic, summed in another order), also as a part of
the largest change training made to a weight. --threads sets
TensorFlow's intra-op threads (a Dask worker of ours runs with 1). Prints a
table and writes JSON.

Usage: python -m benchmarks.vectorised_clients [--clients 10] [--steps 30]
    [--repeats 3] [--threads 0]
    [--json benchmarks/results/vectorised_clients.json]
"""

import argparse
import json
import os
import statistics
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROWS = ('one after another', 'grouped', 'one shared model')
BATCH = 20
LEARNING_RATE = 0.02


def _cnn(tf):
  """W1's CNN (`canonical.learning.models.cnn_28x28`) as a function of its
  weights, per client or grouped over a leading client axis."""

  def conv(x, kernel, bias, clients):
    """`x` [batch, h, w, clients * c_in]; `kernel` [clients, 5, 5, c_in,
    c_out]: client k's channels meet only client k's kernel."""
    c_out = kernel.shape[-1]
    kernel = tf.transpose(kernel, [1, 2, 3, 0, 4])
    kernel = tf.reshape(kernel, [5, 5, kernel.shape[2], clients * c_out])
    x = tf.nn.conv2d(x, kernel, 1, 'SAME') + tf.reshape(bias, [-1])
    return tf.nn.max_pool2d(tf.nn.relu(x), 2, 2, 'VALID')

  def logits(weights, x):
    """`weights`: each with a leading client axis; `x` [clients, batch, 28,
    28, 1]."""
    clients, batch = x.shape[0], x.shape[1]
    h = tf.reshape(tf.transpose(x, [1, 2, 3, 0, 4]), [batch, 28, 28, clients])
    h = conv(h, weights[0], weights[1], clients)
    h = conv(h, weights[2], weights[3], clients)
    h = tf.reshape(h, [batch, 7, 7, clients, 64])
    h = tf.reshape(tf.transpose(h, [3, 0, 1, 2, 4]), [clients, batch, -1])
    h = tf.nn.relu(tf.matmul(h, weights[4]) + weights[5][:, None])
    return tf.matmul(h, weights[6]) + weights[7][:, None]

  def train(weights, xs, ys):
    """Steps of SGD from `weights` on batches `xs` [steps, clients, batch,
    ...]: the clients' final weights."""

    def step(i, weights):
      with tf.GradientTape() as tape:
        tape.watch(weights)
        losses = tf.nn.sparse_softmax_cross_entropy_with_logits(
            ys[i], logits(weights, xs[i]))
        # Each client's own mean loss: its gradient is its own.
        loss = tf.reduce_sum(tf.reduce_mean(losses, axis=1))
      gradients = tape.gradient(loss, weights)
      return i + 1, [w - LEARNING_RATE * g for w, g in zip(weights, gradients)]

    return tf.while_loop(lambda i, _: i < xs.shape[0], step, [0, weights])[1]

  return train


def _passes(clients, steps, repeats):
  import keras  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from canonical.learning import models  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  keras.utils.set_random_seed(0)
  initial = [tf.constant(w) for w in models.cnn_28x28().get_weights()]
  xs = tf.constant(rng.uniform(size=[steps, clients, BATCH, 28, 28, 1]),
                   tf.float32)
  ys = tf.constant(rng.integers(0, 10, [steps, clients, BATCH]), tf.int64)
  train = tf.function(_cnn(tf))

  def stacked(count):
    return [tf.stack([w] * count) for w in initial]

  def one_after_another():
    return [train(stacked(1), xs[:, k:k + 1], ys[:, k:k + 1])
            for k in range(clients)]

  shared_xs = tf.reshape(xs, [steps, 1, clients * BATCH, 28, 28, 1])
  shared_ys = tf.reshape(ys, [steps, 1, clients * BATCH])
  runs = {
      'one after another': one_after_another,
      'grouped': lambda: train(stacked(clients), xs, ys),
      'one shared model': lambda: train(stacked(1), shared_xs, shared_ys),
  }
  results = {name: run() for name, run in runs.items()}  # Warm: traces.
  apart = [tf.concat([r[i] for r in results['one after another']], 0)
           for i in range(len(initial))]
  max_diff = max(float(tf.reduce_max(tf.abs(a - g)))
                 for a, g in zip(apart, results['grouped']))
  # Against the largest change training made to a weight: float summation
  # order moves a weight by a tiny part of it, a client's kernel mixed with
  # another's by a large one.
  max_change = max(float(tf.reduce_max(tf.abs(a - w)))
                   for a, w in zip(apart, initial))
  passes = []
  for _ in range(repeats):
    timed = {}
    for name in ROWS:
      start = time.perf_counter()
      runs[name]()
      timed[name] = time.perf_counter() - start
    passes.append(timed)
  return passes, max_diff, max_change


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--clients', type=int, default=10)
  parser.add_argument('--steps', type=int, default=30)
  parser.add_argument('--repeats', type=int, default=3)
  parser.add_argument('--threads', type=int, default=0,
                      help="TensorFlow's intra-op threads (0: its default)")
  parser.add_argument('--json', default=os.path.join(
      ROOT, 'benchmarks', 'results', 'vectorised_clients.json'))
  args = parser.parse_args(argv)
  # TensorFlow's plain CPU kernels have no gradient of a grouped convolution;
  # oneDNN's have, and TensorFlow turns them on by default only on some CPUs.
  os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.threading.set_intra_op_parallelism_threads(args.threads)
  passes, max_diff, max_change = _passes(args.clients, args.steps,
                                         args.repeats)
  print(f'{args.clients} clients of {args.steps} SGD steps of {BATCH} '
        f'examples, W1\'s CNN, {args.threads or "default"} intra-op threads; '
        f'median of {args.repeats} passes:')
  print(f'{"row":<20}{"s":>8}{"x one after another":>22}')
  rows = []
  for name in ROWS:
    seconds = statistics.median(p[name] for p in passes)
    ratio = statistics.median(p[name] / p['one after another']
                              for p in passes)
    rows.append({'row': name, 'seconds': seconds,
                 'over_one_after_another': ratio,
                 'passes': [p[name] for p in passes]})
    print(f'{name:<20}{seconds:>8.3f}{ratio:>21.2f}x')
  print(f'max diff of the grouped clients\' weights: {max_diff:.2e}, '
        f'{max_diff / max_change:.1e} of the largest change training made '
        f'({max_change:.2e})')
  os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
  with open(args.json, 'w') as f:
    json.dump({'clients': args.clients, 'steps': args.steps,
               'repeats': args.repeats, 'threads': args.threads,
               'max_diff_grouped': max_diff, 'max_change': max_change,
               'relative_diff_grouped': max_diff / max_change, 'rows': rows},
              f, indent=1)
  print(f'wrote {args.json}')


if __name__ == '__main__':
  main()
