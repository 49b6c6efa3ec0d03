"""`tff.learning.templates` of TFF 0.87: the `LearningProcess` contract and
the building blocks a learning algorithm is composed of.

- `learning_process`: `LearningProcess`, `LearningProcessOutput`,
  `LearningAlgorithmState`;
- `distributors`: `DistributionProcess`, `build_broadcast_process`,
  `build_encoded_broadcast_process` and `from_broadcast_process` (ours);
- `client_works`: `ClientWorkProcess`, `ClientResult`;
- `model_delta`: `build_model_delta_client_work`,
  `build_functional_model_delta_client_work` (and `ClientWeighting`);
- `finalizers`: `FinalizerProcess`, `build_apply_optimizer_finalizer`,
  `reject_non_finite_update`;
- `composers`: `compose_learning_process`;
- `checks`: the type checks the blocks share.

Each block is a `tff.templates.MeasuredProcess` of federated computations;
composing inlines their `next`s into one round, which compiles to a form.
"""

from canonical.learning.templates.client_works import ClientResult
from canonical.learning.templates.client_works import ClientWorkProcess
from canonical.learning.templates.composers import compose_learning_process
from canonical.learning.templates.distributors import build_broadcast_process
from canonical.learning.templates.distributors import build_encoded_broadcast_process  # pylint: disable=line-too-long
from canonical.learning.templates.distributors import from_broadcast_process
from canonical.learning.templates.distributors import DistributionProcess
from canonical.learning.templates.finalizers import build_apply_optimizer_finalizer  # pylint: disable=line-too-long
from canonical.learning.templates.finalizers import FinalizerProcess
from canonical.learning.templates.finalizers import reject_non_finite_update
from canonical.learning.templates.learning_process import LearningAlgorithmState
from canonical.learning.templates.learning_process import LearningProcess
from canonical.learning.templates.learning_process import LearningProcessOutput
from canonical.learning.templates.learning_process import LearningProcessOutputWithClientState  # pylint: disable=line-too-long
from canonical.learning.templates.learning_process import model_weights_computations  # pylint: disable=line-too-long
from canonical.learning.templates.model_delta import build_functional_model_delta_client_work  # pylint: disable=line-too-long
from canonical.learning.templates.model_delta import build_model_delta_client_work  # pylint: disable=line-too-long

__all__ = [
    'ClientResult', 'ClientWorkProcess', 'DistributionProcess',
    'FinalizerProcess', 'LearningAlgorithmState', 'LearningProcess',
    'LearningProcessOutput', 'LearningProcessOutputWithClientState',
    'build_apply_optimizer_finalizer',
    'build_broadcast_process', 'build_encoded_broadcast_process',
    'from_broadcast_process',
    'build_functional_model_delta_client_work',
    'build_model_delta_client_work', 'compose_learning_process',
    'model_weights_computations', 'reject_non_finite_update',
]
