"""Aggregation, with TensorFlow Federated's names (`tff.aggregators`), and the
processes federated averaging composes.

TFF's factories, composable (an outer factory takes inner ones): the
`UnweightedAggregationFactory` / `WeightedAggregationFactory` bases,
`SumFactory`, `MeanFactory`, `UnweightedMeanFactory`, `EncodedSumFactory`
(on `encoders`), `DifferentiallyPrivateFactory`, `SecureSumFactory` (on the
secure sums), `clipping_factory`, `zeroing_factory` and the
`PrivateQuantileEstimationProcess` that adapts their norms. Each factory's
`create` returns a `canonical.templates.AggregationProcess`.

The builders of `canonical.templates.measured_process.MeasuredProcess`es
that `canonical.learning.build_federated_averaging_process` takes: the
weighted mean, plain or tensor by tensor through encoders (`mean`), the
broadcast, plain or encoded (`broadcast`), the mean through secure sums as
rotated integer levels (`secure_mean`), and DP-FedAvg's mean (`dp_mean`),
also through secure sums (`dp_secure_mean`).
"""

from canonical.aggregators.broadcast import build_broadcast_process
from canonical.aggregators.broadcast import build_encoded_broadcast_process
from canonical.aggregators.differential_privacy import DifferentiallyPrivateFactory
from canonical.aggregators.dp_mean import build_dp_mean_process
from canonical.aggregators.dp_mean import round_noise_multiplier
from canonical.aggregators.dp_secure_mean import build_dp_secure_mean_process
from canonical.aggregators.encoded import EncodedSumFactory
from canonical.aggregators.factory import AggregationFactory
from canonical.aggregators.factory import UnweightedAggregationFactory
from canonical.aggregators.factory import WeightedAggregationFactory
from canonical.aggregators.mean import build_encoded_mean_process
from canonical.aggregators.mean import build_weighted_mean_process
from canonical.aggregators.mean_factory import MeanFactory
from canonical.aggregators.mean_factory import UnweightedMeanFactory
from canonical.aggregators.quantile_estimation import PrivateQuantileEstimationProcess
from canonical.aggregators.robust import clipping_factory
from canonical.aggregators.robust import zeroing_factory
from canonical.aggregators.secure import SecureSumFactory
from canonical.aggregators.secure_mean import build_secure_mean_process
from canonical.aggregators.sum_factory import SumFactory

__all__ = [
    'AggregationFactory', 'DifferentiallyPrivateFactory', 'EncodedSumFactory',
    'MeanFactory', 'PrivateQuantileEstimationProcess', 'SecureSumFactory',
    'SumFactory', 'UnweightedAggregationFactory', 'UnweightedMeanFactory',
    'WeightedAggregationFactory', 'build_broadcast_process',
    'build_dp_mean_process', 'build_dp_secure_mean_process',
    'build_encoded_broadcast_process', 'build_encoded_mean_process',
    'build_secure_mean_process', 'build_weighted_mean_process',
    'clipping_factory', 'round_noise_multiplier', 'zeroing_factory',
]
