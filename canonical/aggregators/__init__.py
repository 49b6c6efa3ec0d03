"""Aggregation processes: how values travel between the server and clients.

Each builder returns a `canonical.templates.MeasuredProcess` whose `next` a
round composes (TFF's aggregators, as processes): the weighted mean, plain or
tensor by tensor through encoders (`mean`), the broadcast, plain or encoded
(`broadcast`), the mean through secure sums as rotated integer levels
(`secure_mean`), and DP-FedAvg's mean (`dp_mean`), also through secure sums
(`dp_secure_mean`). `canonical.learning.framework` builds them for a model.
"""

from canonical.aggregators.broadcast import build_broadcast_process
from canonical.aggregators.broadcast import build_encoded_broadcast_process
from canonical.aggregators.dp_mean import build_dp_mean_process
from canonical.aggregators.dp_mean import round_noise_multiplier
from canonical.aggregators.dp_secure_mean import build_dp_secure_mean_process
from canonical.aggregators.mean import build_encoded_mean_process
from canonical.aggregators.mean import build_weighted_mean_process
from canonical.aggregators.secure_mean import build_secure_mean_process

__all__ = [
    'build_broadcast_process', 'build_dp_mean_process',
    'build_dp_secure_mean_process', 'build_encoded_broadcast_process',
    'build_encoded_mean_process', 'build_secure_mean_process',
    'build_weighted_mean_process', 'round_noise_multiplier',
]
