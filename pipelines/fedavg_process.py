"""The main job's model and process: the model its flags name, checked
against the data; the federated averaging process they build (our builder
with encoders, secure sums or DP, or TFF's FedAvg with one of TFF's model
aggregators); the evaluator of the server model on the test set."""

import functools
import logging

# TensorFlow and what imports it are imported where they are used.
from pipelines import encoder_choice
from pipelines.fedavg_config import ConfigError

_MODEL_FOR_SHAPE = {(28, 28, 1): 'cnn_28x28', (8, 8, 1): 'small_8x8'}

_log = logging.getLogger(__name__)


def model_for(config, image_shape, num_classes):
  """The `FunctionalModel` the config names, checked against the data."""
  name = config.model
  if name == 'auto':
    name = _MODEL_FOR_SHAPE.get(tuple(image_shape))
    if name is None:
      raise ConfigError(
          f'No ready model for {list(image_shape)} images; ready models take '
          f'{", ".join(str(list(s)) for s in _MODEL_FOR_SHAPE)}.')
  from canonical import learning  # pylint: disable=g-import-not-at-top
  builder = functools.partial(getattr(learning.models, name),
                              num_classes=num_classes)
  model = learning.KerasFunctionalModel.from_keras(builder, seed=config.seed)
  expected = tuple(model.x_spec.shape[1:])
  if expected != tuple(image_shape):
    raise ConfigError(f'--model {name} takes {list(expected)} images, the '
                      f'dataset has {list(image_shape)}.')
  return name, model


def build_process(config, model, noise_seed=None):
  """The federated averaging process with the config's encoders (DP runs:
  the noise from `noise_seed`, a secret one drawn now if None), or TFF's
  with the config's TFF aggregator."""
  if config.tff_aggregator is not None:
    return _tff_process(config, model, noise_seed)
  from canonical import learning  # pylint: disable=g-import-not-at-top
  from canonical.learning import algorithms  # pylint: disable=g-import-not-at-top
  from canonical.learning import framework  # pylint: disable=g-import-not-at-top
  weights = model.weights_spec
  for flag, text, specs in (
      ('--broadcast-encoder', config.broadcast_encoder,
       weights.trainable + weights.non_trainable),
      ('--aggregation-encoder', config.aggregation_encoder,
       weights.trainable)):
    warning = encoder_choice.encodes_nothing(flag, text, specs,
                                             config.threshold)
    if warning:
      _log.warning(warning)
  broadcast_process = aggregation_process = None
  if not encoder_choice.is_identity(config.broadcast_encoder):
    broadcast_process = framework.build_encoded_broadcast_process_from_model(
        model, encoder_choice.encoder_fn(config.broadcast_encoder, 'broadcast',
                                         config.threshold, config.seed))
  secure_bits = encoder_choice.secure_bits(config.aggregation_encoder)
  if config.private and secure_bits is not None:
    aggregation_process = framework.build_dp_secure_mean_process_from_model(
        model, noise_multiplier=config.noise_multiplier, clip=config.clip,
        expected_clients=config.clients_per_round, bits=secure_bits,
        seed=noise_seed)
  elif config.private:
    aggregation_process = framework.build_dp_mean_process_from_model(
        model, noise_multiplier=config.noise_multiplier, clip=config.clip,
        expected_clients=config.clients_per_round,
        adaptive=config.adaptive_clip, seed=noise_seed)
  elif secure_bits is not None:
    aggregation_process = framework.build_secure_mean_process_from_model(
        model, bits=secure_bits, seed=config.seed)
  elif not encoder_choice.is_identity(config.aggregation_encoder):
    aggregation_process = framework.build_encoded_mean_process_from_model(
        model, encoder_choice.encoder_fn(config.aggregation_encoder,
                                         'aggregation', config.threshold,
                                         config.seed),
        error_feedback=config.error_feedback)
  if config.server_optimizer == 'adam':
    server_optimizer = learning.adam(config.server_lr)
  else:
    server_optimizer = learning.sgd(config.server_lr, config.server_momentum)
  return algorithms.build_federated_averaging_process(
      model, client_optimizer_fn=lambda: learning.sgd(config.client_lr),
      server_optimizer_fn=lambda: server_optimizer,
      broadcast_process=broadcast_process,
      aggregation_process=aggregation_process, client_epochs=config.epochs)


def _tff_process(config, model, noise_seed=None):
  """TFF 0.87's `build_weighted_fed_avg` with the config's aggregator; for
  dp, `build_unweighted_fed_avg` with `dp_aggregator` (DP's mean counts each
  client once), its noise from `noise_seed`."""
  from canonical import learning  # pylint: disable=g-import-not-at-top
  from canonical.learning import algorithms  # pylint: disable=g-import-not-at-top
  tff_optimizers = learning.optimizers
  if config.server_optimizer == 'adam':
    server_optimizer = tff_optimizers.build_adam(config.server_lr)
  else:
    server_optimizer = tff_optimizers.build_sgdm(
        config.server_lr, config.server_momentum or None)
  client_optimizer = tff_optimizers.build_sgdm(config.client_lr)
  if config.tff_aggregator == 'dp':
    return algorithms.build_unweighted_fed_avg(
        model, client_optimizer_fn=client_optimizer,
        server_optimizer_fn=server_optimizer,
        model_aggregator=learning.dp_aggregator(
            config.noise_multiplier, config.clients_per_round,
            seed=noise_seed))
  return algorithms.build_weighted_fed_avg(
      model, client_optimizer_fn=client_optimizer,
      server_optimizer_fn=server_optimizer,
      model_aggregator=tff_aggregator(config.tff_aggregator)())


def tff_aggregator(name):
  """The factory builder a weighted --tff-aggregator NAME names (dp's
  takes the noise: `_tff_process`)."""
  from canonical import aggregators  # pylint: disable=g-import-not-at-top
  from canonical import learning  # pylint: disable=g-import-not-at-top
  return {'mean': aggregators.MeanFactory,
          'compression': learning.compression_aggregator,
          'robust': learning.robust_aggregator,
          'secure': learning.secure_aggregator}[name]


def make_evaluator(model, test_x, test_y, batch_size=500):
  """`evaluate(state)`: the server model's test loss and accuracy."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from canonical import learning  # pylint: disable=g-import-not-at-top
  test = tf.data.Dataset.from_tensor_slices((test_x, test_y)).batch(batch_size)

  @tf.function
  def metric_sums(trainable, non_trainable, dataset):
    weights = learning.ModelWeights(trainable, non_trainable)
    return model.mean_metrics(learning.evaluate(model, weights, dataset))

  def evaluate(state):
    # The first field of the form's state holds the model's ModelWeights
    # (trainable, non_trainable): ServerState's and TFF's
    # LearningAlgorithmState's alike.
    weights = state[0]
    means = metric_sums(tuple(weights[0]), tuple(weights[1]), test)
    return {'loss': float(means['loss']), 'accuracy': float(means['accuracy'])}

  return evaluate
