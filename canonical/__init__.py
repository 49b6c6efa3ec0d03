"""The federated language, its compiler to the canonical form, and local executors."""

from canonical import reference
from canonical.compiler import compile  # pylint: disable=redefined-builtin
from canonical.computations import federated_computation
from canonical.computations import tf_computation
from canonical.form import CanonicalForm
from canonical.form import FormError
from canonical.form import Piece
from canonical.intrinsics import federated_aggregate
from canonical.intrinsics import federated_apply
from canonical.intrinsics import federated_broadcast
from canonical.intrinsics import federated_eval
from canonical.intrinsics import federated_map
from canonical.intrinsics import federated_max
from canonical.intrinsics import federated_mean
from canonical.intrinsics import federated_min
from canonical.intrinsics import federated_secure_modular_sum
from canonical.intrinsics import federated_secure_sum
from canonical.intrinsics import federated_secure_sum_bitwidth
from canonical.intrinsics import federated_sum
from canonical.intrinsics import federated_value
from canonical.intrinsics import federated_zip
from canonical.ir import FederatedError
from canonical.local_runner import run_round
from canonical.process import IterativeProcess
from canonical.sequences import sequence_map
from canonical.sequences import sequence_reduce
from canonical.sequences import sequence_sum
from canonical.types import CLIENTS
from canonical.types import clients
from canonical.types import FederatedType
from canonical.types import SequenceType
from canonical.types import SERVER
from canonical.types import server
from canonical.types import StructType
from canonical.types import StructWithPythonType
from canonical.types import TensorType
from canonical.types import to_type
from canonical.types import type_at_clients
from canonical.types import type_at_server
from canonical.saving import fingerprint
from canonical.saving import load
from canonical.saving import save


def __getattr__(name):
  """`canonical.learning` (TFF's `tff.learning`) and `canonical.fedavg`,
  imported on first use: they bring Keras, which the language alone does
  not need."""
  if name in ('learning', 'fedavg'):
    import importlib  # pylint: disable=g-import-not-at-top
    return importlib.import_module(f'canonical.{name}')
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
