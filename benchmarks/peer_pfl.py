"""The workload in pfl-research (TensorFlow backend), for benchmarks/peers.py.

Run in pfl's own venv (see peer_common). FedAvg in one process:
`SimulatedBackend` over a `FederatedDataset` of numpy arrays in memory
(pfl slices each user's arrays in the round), a `TFModel` of the Keras model
compiled with the client SGD, the server SGD as its central optimizer,
updates weighted by datapoints (`WeightByDatapoints`). Its user sampler hands
out the benchmark's clients, round after round, in order. A callback times
each central iteration. pfl evaluates each user before and after training in
iteration 0 whatever the frequency: that round is a warm-up.

The model is a Keras 2 one (`tf_keras`, which pfl[tf] installs, through
TF_USE_LEGACY_KERAS): pfl keys a model's variables by `variable.name`, which
Keras 3 does not make unique ('kernel' in every layer), so with Keras 3 a
multi-layer model would silently train and average only its last layer's.
"""

import os

os.environ['TF_USE_LEGACY_KERAS'] = '1'  # Before TensorFlow is imported.

import peer_common  # pylint: disable=g-import-not-at-top,wrong-import-position

try:
  import pfl  # pylint: disable=unused-import
except ImportError as e:
  peer_common.skip(f'pfl-research is not installed here ({e})')
import tensorflow as tf
from pfl.aggregate.simulate import SimulatedBackend
from pfl.aggregate.weighting import WeightByDatapoints
from pfl.algorithm import FederatedAveraging
from pfl.algorithm import NNAlgorithmParams
from pfl.callback.base import TrainingProcessCallback
from pfl.data.dataset import Dataset
from pfl.data.federated_dataset import FederatedDataset
from pfl.hyperparam import NNTrainHyperParams
from pfl.metrics import Metrics
from pfl.model.tensorflow import TFModel


class RoundClock(TrainingProcessCallback):
  """Laps `rounds` at the end of every central iteration."""

  def __init__(self, rounds):
    self.rounds = rounds

  def on_train_begin(self, *, model):
    self.rounds.start()
    return Metrics()

  def after_central_iteration(self, aggregate_metrics, model, *,
                              central_iteration):
    self.rounds.lap()
    return False, Metrics()


def main():
  task, result_path = peer_common.parse_args(__doc__.split('\n')[0])
  clients = peer_common.Clients(task)
  samples = task['samples']
  keras_model = peer_common.build_keras(tf.keras, task['model'])
  keras_model.set_weights(peer_common.load_weights(task['initial_weights']))
  keras_model.compile(
      optimizer=tf.keras.optimizers.SGD(task['client_lr']),
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  model = TFModel(keras_model, metrics={},
                  central_optimizer=tf.keras.optimizers.SGD(
                      task['server_lr']))
  if len(model.variable_map) != len(keras_model.trainable_variables):
    raise RuntimeError('pfl sees fewer variables than the model has: their '
                       'names are not unique (Keras 3?).')
  order = iter([c for sampled in samples for c in sampled])
  training = FederatedDataset(
      lambda user: Dataset(list(clients[user]), user_id=user),
      lambda: next(order))
  backend = SimulatedBackend(training_data=training, val_data=None,
                             postprocessors=[WeightByDatapoints()])
  rounds = peer_common.Rounds()
  FederatedAveraging().run(
      algorithm_params=NNAlgorithmParams(
          central_num_iterations=len(samples),
          evaluation_frequency=len(samples) + 1,
          train_cohort_size=len(samples[0]), val_cohort_size=None),
      backend=backend, model=model,
      model_train_params=NNTrainHyperParams(
          local_num_epochs=task['epochs'],
          local_learning_rate=task['client_lr'],
          local_batch_size=task['batch_size']),
      callbacks=[RoundClock(rounds)], send_metrics_to_platform=False)
  peer_common.write_result(
      result_path, task, rounds,
      versions=peer_common.versions('pfl', 'tensorflow', 'tf-keras'),
      weights=[w.numpy() for w in keras_model.trainable_variables])


if __name__ == '__main__':
  main()
