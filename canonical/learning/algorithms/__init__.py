"""Federated learning algorithms, each an `IterativeProcess` that compiles to a
form.

`build_federated_averaging_process`: FedAvg with a pure client optimizer, a
server optimizer, and any broadcast and aggregation process of
`canonical.aggregators` (encoded, secure, differentially private).
"""

from canonical.learning.algorithms.fedavg import build_federated_averaging_process  # pylint: disable=line-too-long
from canonical.learning.algorithms.fedavg import ServerState

__all__ = ['ServerState', 'build_federated_averaging_process']
