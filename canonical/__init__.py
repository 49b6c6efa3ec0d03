"""TensorFlow Federated's API over a compiler to the canonical form.

`import canonical as tff`: the federated language (`core`), processes
(`templates`), the compiler (`compiler`) to `CanonicalForm` (`form`), the
executors (`executors`), forms on disk (`saving`), storage (`io`), secure
aggregation (`secagg`), and, on first use, `learning`, `aggregators`,
`privacy`, `program`, `simulation`, `backends`, and TFF 0.87's
`tensorflow` and `types`. Every error it raises is an `Error`.
"""

from canonical import _moved
from canonical.compiler import compile  # pylint: disable=redefined-builtin
from canonical.core.computations import Computation
from canonical.core.computations import federated_computation
from canonical.core.computations import tf_computation
from canonical.core import context as _context
from canonical.core.intrinsics import federated_aggregate
from canonical.core.intrinsics import federated_apply
from canonical.core.intrinsics import federated_broadcast
from canonical.core.intrinsics import federated_eval
from canonical.core.intrinsics import federated_map
from canonical.core.intrinsics import federated_max
from canonical.core.intrinsics import federated_mean
from canonical.core.intrinsics import federated_min
from canonical.core.intrinsics import federated_secure_modular_sum
from canonical.core.intrinsics import federated_secure_select
from canonical.core.intrinsics import federated_secure_sum
from canonical.core.intrinsics import federated_secure_sum_bitwidth
from canonical.core.intrinsics import federated_select
from canonical.core.intrinsics import federated_sum
from canonical.core.intrinsics import federated_value
from canonical.core.intrinsics import federated_zip
from canonical.core.intrinsics import sequence_map
from canonical.core.intrinsics import sequence_reduce
from canonical.core.intrinsics import sequence_sum
from canonical.core.types import CLIENTS
from canonical.core.types import clients
from canonical.core.types import FederatedType
from canonical.core.types import FunctionType
from canonical.core.types import SequenceType
from canonical.core.types import SERVER
from canonical.core.types import server
from canonical.core.types import StructType
from canonical.core.types import StructWithPythonType
from canonical.core.types import TensorType
from canonical.core.types import to_type
from canonical.core.types import type_at_clients
from canonical.core.types import type_at_server
from canonical.errors import Error
from canonical.errors import FederatedError
from canonical.executors.local import run_round
from canonical.executors import reference
from canonical.form import CanonicalForm
from canonical.form import FormError
from canonical.form import Piece
from canonical.saving import fingerprint
from canonical.saving import load
from canonical.saving import save
from canonical.templates import IterativeProcess

_moved.register(_moved.CANONICAL)
# A federated computation called from Python runs by its plain meaning.
_context.set_executor(reference.run)

# Subpackages imported on first use: they bring Keras or dp-accounting, which
# the language alone does not need.
_ON_FIRST_USE = ('aggregators', 'backends', 'learning', 'privacy', 'program',
                 'simulation', 'tensorflow', 'types')


def __getattr__(name):
  if name in _ON_FIRST_USE:
    import importlib  # pylint: disable=g-import-not-at-top
    return importlib.import_module(f'canonical.{name}')
  return _moved.attribute(__name__, name)
