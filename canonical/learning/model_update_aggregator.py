"""TensorFlow Federated's recommended aggregators of model updates
(`tff.learning.robust_aggregator`, `compression_aggregator`, `dp_aggregator`,
`secure_aggregator`, `ddp_secure_aggregator`), composed from
`canonical.aggregators` as TFF composes them: an adaptive zeroing
outermost, an adaptive L2 clip, then the mean.

The adaptive norms are `PrivateQuantileEstimationProcess.no_noise`
estimators: zeroing at 2 C + 1 for C near the 0.98 quantile of the update
norms (from 10, learning rate ln 10, so it adapts within a few rounds),
clipping near their 0.8 quantile (from 1, learning rate 0.2).
"""

import math

from canonical.aggregators import differential_privacy
from canonical.aggregators import distributed_dp
from canonical.aggregators import encoded
from canonical.aggregators import factory
from canonical.aggregators import mean_factory
from canonical.aggregators import quantile_estimation
from canonical.aggregators import robust
from canonical.aggregators import secure
from canonical import errors

_Quantile = quantile_estimation.PrivateQuantileEstimationProcess


def _zeroing(inner, secure_estimation=False):
  norm = _Quantile.no_noise(
      initial_estimate=10.0, target_quantile=0.98,
      learning_rate=math.log(10.0), multiplier=2.0, increment=1.0,
      secure_estimation=secure_estimation)
  count = (secure.SecureSumFactory(upper_bound_threshold=1,
                                   lower_bound_threshold=0)
           if secure_estimation else None)
  return robust.zeroing_factory(norm, inner, zeroed_count_sum_factory=count)


def _clipping(inner, secure_estimation=False):
  norm = _Quantile.no_noise(initial_estimate=1.0, target_quantile=0.8,
                            learning_rate=0.2,
                            secure_estimation=secure_estimation)
  count = (secure.SecureSumFactory(upper_bound_threshold=1,
                                   lower_bound_threshold=0)
           if secure_estimation else None)
  return robust.clipping_factory(norm, inner,
                                 clipped_count_sum_factory=count)


def _with_debug(aggregator, weighted, debug_measurements_fn, where):
  if debug_measurements_fn is None:
    return aggregator
  aggregator = debug_measurements_fn(aggregator)
  kind = (factory.WeightedAggregationFactory if weighted else
          factory.UnweightedAggregationFactory)
  if not isinstance(aggregator, kind):
    raise errors.InvalidTypeError(
        f'{where}: debug_measurements_fn must return a {kind.__name__} '
        f'(weighted={weighted}), got {type(aggregator).__name__}.')
  return aggregator


def _wrapped(aggregator, zeroing, clipping, secure_estimation=False):
  if clipping:
    aggregator = _clipping(aggregator, secure_estimation)
  if zeroing:
    aggregator = _zeroing(aggregator, secure_estimation)
  return aggregator


def robust_aggregator(*, zeroing=True, clipping=True, weighted=True,
                      debug_measurements_fn=None):
  """The mean (weighted or not) with adaptive zeroing and clipping."""
  aggregator = (mean_factory.MeanFactory() if weighted else
                mean_factory.UnweightedMeanFactory())
  aggregator = _with_debug(aggregator, weighted, debug_measurements_fn,
                           'robust_aggregator')
  return _wrapped(aggregator, zeroing, clipping)


def compression_aggregator(*, zeroing=True, clipping=True, weighted=True,
                           debug_measurements_fn=None, **kwargs):
  """`robust_aggregator` whose sum of (weighted) updates quantizes every
  tensor of more than 20000 elements to 8 bits (`kwargs` go to
  `EncodedSumFactory.quantize_above_threshold`)."""
  value_sum = encoded.EncodedSumFactory.quantize_above_threshold(
      quantization_bits=8, threshold=20000, **kwargs)
  aggregator = (mean_factory.MeanFactory(value_sum) if weighted else
                mean_factory.UnweightedMeanFactory(value_sum))
  aggregator = _with_debug(aggregator, weighted, debug_measurements_fn,
                           'compression_aggregator')
  return _wrapped(aggregator, zeroing, clipping)


def dp_aggregator(noise_multiplier, clients_per_round, zeroing=True, *,
                  seed=None):
  """DP-FedAvg's mean with an adaptive clip
  (`DifferentiallyPrivateFactory.gaussian_adaptive`), with adaptive zeroing
  outside it. `seed` (not in TFF) fixes the noise: the main job keeps one
  per run, so that a resumed run rebuilds the same form."""
  dp_factory = differential_privacy.DifferentiallyPrivateFactory
  aggregator = dp_factory.gaussian_adaptive(noise_multiplier,
                                            clients_per_round, seed=seed)
  return _zeroing(aggregator) if zeroing else aggregator


def secure_aggregator(*, zeroing=True, clipping=True, weighted=True):
  """The mean through secure sums (`SecureSumFactory`, its bound adapted to
  twice the 0.95 quantile of the values' largest magnitudes), with adaptive
  zeroing and clipping whose norms are also estimated through secure sums."""
  bound = _Quantile.no_noise(initial_estimate=50.0, target_quantile=0.95,
                             learning_rate=1.0, multiplier=2.0,
                             secure_estimation=True)
  value_sum = secure.SecureSumFactory(bound)
  if weighted:
    aggregator = mean_factory.MeanFactory(
        value_sum_factory=value_sum,
        # 2**20 - 1: weights up to about a million, integers exactly.
        weight_sum_factory=secure.SecureSumFactory(
            upper_bound_threshold=float(2**20 - 1),
            lower_bound_threshold=0.0))
  else:
    aggregator = mean_factory.UnweightedMeanFactory(
        value_sum_factory=value_sum,
        count_sum_factory=secure.SecureSumFactory(upper_bound_threshold=1,
                                                  lower_bound_threshold=0))
  return _wrapped(aggregator, zeroing, clipping, secure_estimation=True)


def ddp_secure_aggregator(noise_multiplier, expected_clients_per_round,
                          bits=20, zeroing=True, rotation_type='hd'):
  """The unweighted mean with distributed DP, as TFF composes it: a
  `DistributedDpSumFactory` (Skellam noise added by each client, adaptive
  L2 clip from 0.1, `bits`-bit secure modular sums) over a securely summed
  count, with adaptive zeroing (its norm estimated through secure sums)
  outside when `zeroing`."""
  value_sum = distributed_dp.DistributedDpSumFactory(
      noise_multiplier=noise_multiplier,
      expected_clients_per_round=expected_clients_per_round, bits=bits,
      l2_clip=0.1, mechanism='distributed_skellam',
      rotation_type=rotation_type, auto_l2_clip=True)
  aggregator = mean_factory.UnweightedMeanFactory(
      value_sum_factory=value_sum,
      count_sum_factory=secure.SecureSumFactory(upper_bound_threshold=1,
                                                lower_bound_threshold=0))
  if zeroing:
    aggregator = _zeroing(aggregator, secure_estimation=True)
  return aggregator
