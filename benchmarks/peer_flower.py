"""The workload in Flower 1.42 (simulation on Ray), for benchmarks/peers.py.

Run in Flower's own venv (see peer_common). `run_simulation` with one
SuperNode per client of a round and `actors` Ray actors (one CPU each). The
server's strategy is Flower's message-based `FedAvg` (the clients' models
averaged weighted by their 'num-examples'), except that each round it sends
every node the benchmark's client to train (by index in the message's config)
instead of sampling nodes. The ClientApp keeps each actor's data, Keras model
and `tf.function` train step (one SGD step per batch) in this module, which
the actors import by name: a cache in `__main__` would be pickled by value
and lost at every call. A round is timed from the strategy configuring it to
its aggregate.
"""

import json
import os
import sys
import time

import peer_common

try:
  import flwr  # pylint: disable=unused-import
except ImportError as e:
  peer_common.skip(f'Flower is not installed here ({e})')
from flwr.app import ArrayRecord
from flwr.app import ConfigRecord
from flwr.app import Message
from flwr.app import MessageType
from flwr.app import MetricRecord
from flwr.app import RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import ServerApp
from flwr.serverapp.strategy import FedAvg
from flwr.simulation import run_simulation

# The actor's task path, data, model and train step, made at its first call.
_ACTOR = {}
# How long a round waits for every simulated node to have registered: at
# 1,000 nodes (W3) a round once started with 219 of them.
NODES_SECONDS = 300


def _actor(task_path):
  if _ACTOR.get('task_path') != task_path:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    with open(task_path) as f:
      task = json.load(f)
    model = peer_common.build_keras(tf.keras, task['model'])
    lr = task['client_lr']

    @tf.function
    def train_step(x, y):
      with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.cast(y, tf.int64), logits=logits))
      variables = model.trainable_variables
      for variable, gradient in zip(variables,
                                    tape.gradient(loss, variables)):
        variable.assign_sub(lr * gradient)

    _ACTOR.update(task_path=task_path, task=task, model=model,
                  train_step=train_step, clients=peer_common.Clients(task))
  return _ACTOR


def train(message, context):
  """Trains the client the config names, from the arrays sent."""
  del context
  config = message.content['config']
  actor = _actor(config['task'])
  x, y = actor['clients'][int(config['client'])]
  model, batch = actor['model'], actor['task']['batch_size']
  model.set_weights(message.content['arrays'].to_numpy_ndarrays())
  for i in range(0, len(x), batch):
    actor['train_step'](x[i:i + batch], y[i:i + batch])
  return Message(RecordDict({
      'arrays': ArrayRecord(model.get_weights()),
      'metrics': MetricRecord({'num-examples': len(x)})}), reply_to=message)


CLIENT_APP = ClientApp()
CLIENT_APP.train()(train)


class PlannedFedAvg(FedAvg):
  """FedAvg sending each node the client it trains this round."""

  def __init__(self, task_path, samples, rounds):
    nodes = len(samples[0])
    super().__init__(fraction_train=1.0, fraction_evaluate=0.0,
                     min_train_nodes=nodes, min_available_nodes=nodes)
    self.task_path, self.samples, self.rounds = task_path, samples, rounds

  def configure_train(self, server_round, arrays, config, grid):
    sampled = self.samples[server_round - 1]
    deadline = time.monotonic() + NODES_SECONDS
    nodes = sorted(grid.get_node_ids())
    while len(nodes) < len(sampled) and time.monotonic() < deadline:
      time.sleep(0.1)
      nodes = sorted(grid.get_node_ids())
    self.rounds.start()
    if len(nodes) != len(sampled):
      raise RuntimeError(f'{len(nodes)} nodes for {len(sampled)} clients.')
    return [Message(RecordDict({'arrays': arrays, 'config': ConfigRecord({
        'task': self.task_path, 'client': int(client),
        'server-round': server_round})}), message_type=MessageType.TRAIN,
                    dst_node_id=node) for node, client in zip(nodes, sampled)]

  def aggregate_train(self, server_round, replies):
    replies = list(replies)
    failed = [m.error.reason for m in replies if m.has_error()]
    if failed or len(replies) != len(self.samples[server_round - 1]):
      raise RuntimeError(f'Round {server_round}: {len(replies)} replies, '
                         f'failures: {failed[:3]}')
    result = super().aggregate_train(server_round, replies)
    self.rounds.lap()
    return result


def main():
  task, result_path = peer_common.parse_args(__doc__.split('\n')[0])
  task_path = os.path.abspath(sys.argv[sys.argv.index('--task') + 1])
  # Ray's actors import this module (and peer_common) by name.
  here = os.path.dirname(os.path.abspath(__file__))
  os.environ['PYTHONPATH'] = os.pathsep.join(
      p for p in (here, os.environ.get('PYTHONPATH')) if p)
  import peer_flower  # pylint: disable=g-import-not-at-top,import-self
  samples = task['samples']
  rounds = peer_common.Rounds()
  final = {}
  server_app = ServerApp()

  @server_app.main()
  def run_rounds(grid, context):
    del context
    strategy = peer_flower.PlannedFedAvg(task_path, samples, rounds)
    result = strategy.start(
        grid=grid, num_rounds=len(samples),
        initial_arrays=ArrayRecord(
            peer_common.load_weights(task['initial_weights'])))
    final['weights'] = result.arrays.to_numpy_ndarrays()

  actors = task.get('actors', 2)
  run_simulation(server_app=server_app, client_app=peer_flower.CLIENT_APP,
                 num_supernodes=len(samples[0]),
                 backend_config={'client_resources': {'num_cpus': 1,
                                                      'num_gpus': 0.0},
                                 'init_args': {'num_cpus': actors}})
  if 'weights' not in final:
    raise RuntimeError('The Flower simulation ended without a result.')
  peer_common.write_result(
      result_path, task, rounds,
      versions=peer_common.versions('flwr', 'ray', 'tensorflow', 'keras'),
      weights=final['weights'], actors=actors)


if __name__ == '__main__':
  try:
    main()
  finally:
    peer_common.end_children()
