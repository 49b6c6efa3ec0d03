"""Aggregation, with TensorFlow Federated's names (`tff.aggregators`), and the
processes federated averaging composes.

TFF's factories, composable (an outer factory takes inner ones): the
`UnweightedAggregationFactory` / `WeightedAggregationFactory` bases,
`SumFactory`, `MeanFactory`, `UnweightedMeanFactory`, `EncodedSumFactory`
(on `encoders`), `DifferentiallyPrivateFactory`, `SecureSumFactory` (on the
secure sums), `SecureModularSumFactory`, `DistributedDpSumFactory` (each
client noises its own value before a secure sum; TFF 0.87 keeps it out of
`tff.aggregators`, we export it as our extension), the rotations
(`HadamardTransformFactory`, `DiscreteFourierTransformFactory`),
`UnweightedReservoirSamplingFactory`, `clipping_factory`, `zeroing_factory`,
`concat_factory`, `add_measurements`, `as_weighted_aggregator` and the
`PrivateQuantileEstimationProcess` that adapts their norms; and, not in
TFF, `BandedMatrixFactorizationFactory` (banded-MF DP-FTRL). Each factory's
`create` returns a `canonical.templates.AggregationProcess`. The primitives
`secure_quantized_sum` and `federated_sample` are called while tracing.

The builders of `canonical.templates.measured_process.MeasuredProcess`es
that `canonical.learning.build_federated_averaging_process` takes: the
weighted mean, plain or tensor by tensor through encoders (`mean`), the
broadcast, plain or encoded (`broadcast`), the mean through secure sums as
rotated integer levels (`secure_mean`), and DP-FedAvg's mean (`dp_mean`),
also through secure sums (`dp_secure_mean`).
"""

from canonical.aggregators.banded_mf import BandedMatrixFactorizationFactory
from canonical.aggregators.broadcast import build_broadcast_process
from canonical.aggregators.concat import concat_factory
from canonical.aggregators.broadcast import build_encoded_broadcast_process
from canonical.aggregators.differential_privacy import DifferentiallyPrivateFactory
from canonical.aggregators.distributed_dp import DistributedDpSumFactory
from canonical.aggregators.dp_mean import build_dp_mean_process
from canonical.aggregators.dp_mean import DPMeanFactory
from canonical.aggregators.dp_mean import round_noise_multiplier
from canonical.aggregators.dp_secure_mean import build_dp_secure_mean_process
from canonical.aggregators.dp_secure_mean import DPSecureMeanFactory
from canonical.aggregators.encoded import EncodedSumFactory
from canonical.aggregators.factory import AggregationFactory
from canonical.aggregators.factory import UnweightedAggregationFactory
from canonical.aggregators.factory import WeightedAggregationFactory
from canonical.aggregators.factory_utils import as_weighted_aggregator
from canonical.aggregators.mean import build_encoded_mean_process
from canonical.aggregators.mean import build_weighted_mean_process
from canonical.aggregators.mean_factory import MeanFactory
from canonical.aggregators.mean_factory import UnweightedMeanFactory
from canonical.aggregators.measurements import add_measurements
from canonical.aggregators.primitives import secure_quantized_sum
from canonical.aggregators.quantile_estimation import PrivateQuantileEstimationProcess
from canonical.aggregators.robust import clipping_factory
from canonical.aggregators.robust import zeroing_factory
from canonical.aggregators.rotation import DiscreteFourierTransformFactory
from canonical.aggregators.rotation import HadamardTransformFactory
from canonical.aggregators.sampling import federated_sample
from canonical.aggregators.sampling import UnweightedReservoirSamplingFactory
from canonical.aggregators.secure import SecureSumFactory
from canonical.aggregators.secure_mean import build_secure_mean_process
from canonical.aggregators.secure_mean import SecureMeanFactory
from canonical.aggregators.secure_modular import SecureModularSumFactory
from canonical.aggregators.sum_factory import SumFactory

__all__ = [
    'AggregationFactory', 'BandedMatrixFactorizationFactory', 'DPMeanFactory', 'DPSecureMeanFactory',
    'DifferentiallyPrivateFactory', 'DistributedDpSumFactory',
    'DiscreteFourierTransformFactory', 'EncodedSumFactory',
    'HadamardTransformFactory', 'MeanFactory',
    'PrivateQuantileEstimationProcess', 'SecureMeanFactory',
    'SecureModularSumFactory',
    'SecureSumFactory', 'SumFactory', 'UnweightedAggregationFactory',
    'UnweightedMeanFactory', 'UnweightedReservoirSamplingFactory',
    'WeightedAggregationFactory', 'add_measurements', 'as_weighted_aggregator',
    'build_broadcast_process',
    'build_dp_mean_process', 'build_dp_secure_mean_process',
    'build_encoded_broadcast_process', 'build_encoded_mean_process',
    'build_secure_mean_process', 'build_weighted_mean_process',
    'clipping_factory', 'concat_factory', 'federated_sample',
    'round_noise_multiplier', 'secure_quantized_sum', 'zeroing_factory',
]
