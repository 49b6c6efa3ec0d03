"""Federated averaging with encoded broadcast and aggregation, as in TFF's tutorial.

`build_federated_averaging_process` returns a `canonical.IterativeProcess` that
`canonical.compile` lowers into the canonical form; the encoded processes
carry `encoders` (tensor_encoding-compatible) into its prepare, work,
accumulate and update pieces.
"""

from canonical.fedavg.averaging import build_federated_averaging_process
from canonical.fedavg.averaging import ServerState
from canonical.fedavg.broadcast import build_broadcast_process
from canonical.fedavg.broadcast import build_encoded_broadcast_process
from canonical.fedavg.broadcast import build_encoded_broadcast_process_from_model
from canonical.fedavg.dp_mean import build_dp_mean_process
from canonical.fedavg.dp_mean import build_dp_mean_process_from_model
from canonical.fedavg.dp_mean import round_noise_multiplier
from canonical.fedavg.dp_secure_mean import build_dp_secure_mean_process
from canonical.fedavg.dp_secure_mean import build_dp_secure_mean_process_from_model
from canonical.fedavg.mean import build_encoded_mean_process
from canonical.fedavg.mean import build_encoded_mean_process_from_model
from canonical.fedavg.mean import build_weighted_mean_process
from canonical.fedavg.measured_process import MeasuredProcess
from canonical.fedavg.secure_mean import build_secure_mean_process
from canonical.fedavg.secure_mean import build_secure_mean_process_from_model

__all__ = [
    'MeasuredProcess', 'ServerState', 'build_broadcast_process',
    'build_dp_mean_process', 'build_dp_mean_process_from_model',
    'build_dp_secure_mean_process', 'build_dp_secure_mean_process_from_model',
    'build_encoded_broadcast_process',
    'build_encoded_broadcast_process_from_model', 'build_encoded_mean_process',
    'build_encoded_mean_process_from_model',
    'build_federated_averaging_process', 'build_secure_mean_process',
    'round_noise_multiplier',
    'build_secure_mean_process_from_model', 'build_weighted_mean_process',
]
