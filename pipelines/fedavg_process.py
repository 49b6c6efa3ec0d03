"""The main job's model and process: the model its flags name, checked
against the data; the federated averaging process they build (TFF's FedAvg
with the factory and distributor the flags name: encoders, error feedback,
secure sums, DP, or one of TFF's model aggregators); the evaluator of the
server model on the test set."""

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
  """TFF 0.87's federated averaging (`tff.learning.algorithms`) with the
  config's model aggregator and distributor: `build_weighted_fed_avg`, or
  for `--tff-aggregator dp` `build_unweighted_fed_avg` with TFF's
  `dp_aggregator`, each client making `config.epochs` passes (our
  `client_epochs`). DP noise comes from `noise_seed` (a secret one drawn
  now if None)."""
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
            seed=noise_seed),
        client_epochs=config.epochs)
  return algorithms.build_weighted_fed_avg(
      model, client_optimizer_fn=client_optimizer,
      server_optimizer_fn=server_optimizer,
      model_distributor=_model_distributor(config, model),
      model_aggregator=_model_aggregator(config, model, noise_seed),
      client_epochs=config.epochs)


def _model_distributor(config, model):
  """The broadcast encoder's `DistributionProcess`; None: TFF's plain one."""
  if encoder_choice.is_identity(config.broadcast_encoder):
    return None
  _warn_if_encodes_nothing('--broadcast-encoder', config.broadcast_encoder,
                           model.weights_spec.trainable +
                           model.weights_spec.non_trainable, config)
  from canonical.learning import templates  # pylint: disable=g-import-not-at-top
  return templates.build_encoded_broadcast_process(
      model.weights_spec, encoder_choice.encoder_fn(
          config.broadcast_encoder, 'broadcast', config.threshold,
          config.seed))


def _model_aggregator(config, model, noise_seed):
  """The weighted factory the flags name: TFF's (`--tff-aggregator`), the
  DP mean (through secure sums with `secure:BITS`), the secure mean, the
  encoded mean (with error feedback) or the plain mean."""
  from canonical import aggregators  # pylint: disable=g-import-not-at-top
  if config.tff_aggregator is not None:
    return tff_aggregator(config.tff_aggregator)()
  secure_bits = encoder_choice.secure_bits(config.aggregation_encoder)
  if config.private and config.dp_mechanism != 'gaussian':
    return aggregators.as_weighted_aggregator(
        _dp_mechanism_factory(config, model, noise_seed))
  if config.private and secure_bits is not None:
    return aggregators.DPSecureMeanFactory(
        config.noise_multiplier, config.clip, config.clients_per_round,
        bits=secure_bits, seed=noise_seed)
  if config.private:
    return aggregators.DPMeanFactory(
        config.noise_multiplier, config.clip, config.clients_per_round,
        adaptive=config.adaptive_clip, seed=noise_seed)
  if secure_bits is not None:
    return aggregators.SecureMeanFactory(bits=secure_bits, seed=config.seed)
  inner = None
  if not encoder_choice.is_identity(config.aggregation_encoder):
    _warn_if_encodes_nothing('--aggregation-encoder',
                             config.aggregation_encoder,
                             model.weights_spec.trainable, config)
    inner = aggregators.EncodedSumFactory(
        encoder_choice.encoder_fn(config.aggregation_encoder, 'aggregation',
                                  config.threshold, config.seed),
        error_feedback=config.error_feedback)
  # no_nan_division: a round whose every update was dropped moves nothing.
  return aggregators.MeanFactory(inner, no_nan_division=True)


def _dp_mechanism_factory(config, model, noise_seed):
  """The unweighted DP mean --dp-mechanism names (not Gaussian)."""
  from canonical import aggregators  # pylint: disable=g-import-not-at-top
  z, k, clip = (config.noise_multiplier, config.clients_per_round,
                config.clip)
  dp = aggregators.DifferentiallyPrivateFactory
  if config.dp_mechanism == 'tree' and config.adaptive_clip:
    return dp.tree_adaptive(z, k, model.weights_spec.trainable,
                            initial_l2_norm_clip=clip, noise_seed=noise_seed)
  if config.dp_mechanism == 'tree':
    return dp.tree_aggregation(z, k, clip, model.weights_spec.trainable,
                               noise_seed=noise_seed)
  if config.dp_mechanism == 'banded':
    return aggregators.BandedMatrixFactorizationFactory(
        z, k, clip, config.bands, config.rounds, noise_seed=noise_seed)
  # Each client's discrete noise, summed by the secure sums; the mean
  # divides by the clients counted through a secure sum too.
  return aggregators.UnweightedMeanFactory(
      value_sum_factory=aggregators.DistributedDpSumFactory(
          z, k, config.ddp_bits, clip, mechanism=config.dp_mechanism,
          rotation_type='hd'),
      count_sum_factory=aggregators.SecureSumFactory(1, 0))


def _warn_if_encodes_nothing(flag, text, specs, config):
  warning = encoder_choice.encodes_nothing(flag, text, specs,
                                           config.threshold)
  if warning:
    _log.warning(warning)


def tff_aggregator(name):
  """The factory builder a weighted --tff-aggregator NAME names (dp's
  takes the noise: `build_process`)."""
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
    # The first field of the form's state (TFF's LearningAlgorithmState)
    # holds the model's ModelWeights (trainable, non_trainable).
    weights = state[0]
    means = metric_sums(tuple(weights[0]), tuple(weights[1]), test)
    return {'loss': float(means['loss']), 'accuracy': float(means['accuracy'])}

  return evaluate
