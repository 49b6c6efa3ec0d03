"""A least-squares process by federated averaging over batched client
datasets, and random clients for it: the tests of batched client work."""

import numpy as np
import tensorflow as tf

import canonical as cf

BATCH = (tf.TensorSpec([None, 2], tf.float32), tf.TensorSpec([None],
                                                             tf.float32))
DATA = tf.data.DatasetSpec(BATCH)
W = tf.TensorSpec([2], tf.float32)


def regression_process(check_inputs=False):
  """Least squares by federated averaging: each client takes SGD steps over
  its batches (a filter drops empty ones) from the server's weights."""

  @cf.tf_computation(DATA, W)
  def train(data, weights):
    def step(state, batch):
      w, loss, n = state
      x, y = batch
      if check_inputs:
        tf.debugging.assert_less(tf.reduce_max(tf.abs(x)), 1e3)
      error = tf.linalg.matvec(x, w) - y
      return (w - 0.05 * tf.linalg.matvec(x, error, transpose_a=True),
              loss + tf.reduce_sum(error ** 2), n + tf.cast(tf.size(y),
                                                            tf.float32))

    w, loss, n = data.filter(lambda x, y: tf.size(y) > 0).reduce(
        (weights, 0.0, 0.0), step)
    return (w - weights) * n, loss, n

  @cf.tf_computation(W, W, tf.TensorSpec([], tf.float32))
  def apply(weights, delta, n):
    return weights + delta / tf.maximum(n, 1.0)

  @cf.federated_computation(cf.server(W), cf.clients(DATA))
  def next_fn(weights, data):
    delta, loss, n = cf.federated_map(
        train, (data, cf.federated_broadcast(weights)))
    total = cf.federated_sum(n)
    return (cf.federated_map(apply, (weights, cf.federated_sum(delta),
                                     total)),
            cf.federated_sum(loss))

  return cf.IterativeProcess(cf.tf_computation(lambda: tf.zeros([2])),
                             next_fn)


def clients(count, seed=0):
  rng = np.random.default_rng(seed)
  clients = {}
  for i in range(count):
    sizes = rng.integers(0, 4, size=rng.integers(1, 4))
    clients[f'c{i:02d}'] = [
        (rng.normal(size=(n, 2)).astype(np.float32),
         rng.normal(size=n).astype(np.float32)) for n in sizes]
  return clients


def dataset(elements):
  return tf.data.Dataset.from_generator(lambda: iter(elements),
                                        output_signature=BATCH)


def same(a, b):
  return all(np.array_equal(x, y) for x, y in zip(tf.nest.flatten(a),
                                                  tf.nest.flatten(b)))
