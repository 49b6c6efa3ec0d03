"""The workload in TensorFlow Federated 0.87, for benchmarks/peers.py.

Run in TFF's own venv (TensorFlow 2.14; see peer_common).
`tff.learning.algorithms.build_weighted_fed_avg` of the Keras model with
`build_sgdm` client and server optimizers, on TFF's default (C++) execution
context; the state starts at the benchmark's initial weights
(`set_model_weights`). Each round's clients get in-memory `tf.data` datasets,
built before the round is timed. The C++ context's `worker_binary` outlives
Python: it is ended on the way out.
"""

import collections

import peer_common

try:
  import tensorflow_federated as tff
except ImportError as e:
  peer_common.skip(f'tensorflow-federated is not installed here ({e})')
import tensorflow as tf


def main():
  task, result_path = peer_common.parse_args(__doc__.split('\n')[0])
  clients = peer_common.Clients(task)
  samples, batch = task['samples'], task['batch_size']

  def dataset(client):
    x, y = clients[client]
    return tf.data.Dataset.from_tensor_slices(
        collections.OrderedDict(x=x, y=y)).batch(batch)

  input_spec = dataset(0).element_spec

  def model_fn():
    return tff.learning.models.from_keras_model(
        peer_common.build_keras(tf.keras, task['model']),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=input_spec)

  process = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=task['client_lr']),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=task['server_lr']))
  state = process.initialize()
  state = process.set_model_weights(state, tff.learning.models.ModelWeights(
      trainable=peer_common.load_weights(task['initial_weights']),
      non_trainable=[]))
  rounds = peer_common.Rounds()
  for sampled in samples:
    data = [dataset(c) for c in sampled]
    rounds.start()
    state = process.next(state, data).state
    rounds.lap()
  weights = process.get_model_weights(state).trainable
  peer_common.write_result(
      result_path, task, rounds,
      versions=peer_common.versions('tensorflow-federated', 'tensorflow',
                                    'keras'),
      weights=[tf.convert_to_tensor(w).numpy() for w in weights])


if __name__ == '__main__':
  try:
    main()
  finally:
    peer_common.end_children()
