"""Federated learning algorithms, each a process that compiles to a form.

TFF 0.87's `tff.learning.algorithms`, composed from `tff.learning.templates`
as TFF composes them, with TFF's state, metrics and numbers:

- `averaging`: `build_weighted_fed_avg`, `build_unweighted_fed_avg`,
  `build_weighted_fed_prox`, `build_unweighted_fed_prox`, `build_fed_sgd`;
- `scheduled`: `build_weighted_fed_avg_with_optimizer_schedule`;
- `mime`: `build_weighted_mime_lite`, `build_unweighted_mime_lite`,
  `build_mime_lite_with_optimizer_schedule`;
- `kmeans`: `build_fed_kmeans`;
- `reconstruction`: `build_fed_recon`, `build_fed_recon_eval`;
- `fed_eval`: `build_fed_eval` (and the evaluation composition it shares);
- `personalization_eval`: `build_personalization_eval_computation` (a
  federated computation, not a process).

`build_federated_averaging_process` (`fedavg`, TFF's older builder): FedAvg
with any broadcast and aggregation process of `canonical.aggregators`
(encoded, secure, differentially private).
"""

from canonical.learning.algorithms.averaging import build_fed_sgd
from canonical.learning.algorithms.averaging import build_unweighted_fed_avg
from canonical.learning.algorithms.averaging import build_unweighted_fed_prox
from canonical.learning.algorithms.averaging import build_weighted_fed_avg
from canonical.learning.algorithms.averaging import build_weighted_fed_prox
from canonical.learning.algorithms.fed_eval import build_fed_eval
from canonical.learning.algorithms.fedavg import build_federated_averaging_process  # pylint: disable=line-too-long
from canonical.learning.algorithms.fedavg import ServerState
from canonical.learning.algorithms.kmeans import build_fed_kmeans
from canonical.learning.algorithms.mime import build_mime_lite_with_optimizer_schedule  # pylint: disable=line-too-long
from canonical.learning.algorithms.mime import build_unweighted_mime_lite
from canonical.learning.algorithms.mime import build_weighted_mime_lite
from canonical.learning.algorithms.personalization_eval import build_personalization_eval_computation  # pylint: disable=line-too-long
from canonical.learning.algorithms.reconstruction import build_fed_recon
from canonical.learning.algorithms.reconstruction import build_fed_recon_eval
from canonical.learning.algorithms.scheduled import build_weighted_fed_avg_with_optimizer_schedule  # pylint: disable=line-too-long

__all__ = [
    'ServerState', 'build_fed_eval', 'build_fed_kmeans', 'build_fed_recon',
    'build_fed_recon_eval', 'build_fed_sgd',
    'build_federated_averaging_process',
    'build_mime_lite_with_optimizer_schedule',
    'build_personalization_eval_computation', 'build_unweighted_fed_avg',
    'build_unweighted_fed_prox', 'build_unweighted_mime_lite',
    'build_weighted_fed_avg', 'build_weighted_fed_avg_with_optimizer_schedule',
    'build_weighted_fed_prox', 'build_weighted_mime_lite',
]
