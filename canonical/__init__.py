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
from canonical.intrinsics import federated_map
from canonical.intrinsics import federated_max
from canonical.intrinsics import federated_mean
from canonical.intrinsics import federated_min
from canonical.intrinsics import federated_sum
from canonical.intrinsics import federated_value
from canonical.intrinsics import federated_zip
from canonical.ir import FederatedError
from canonical.local_runner import run_round
from canonical.process import IterativeProcess
from canonical.types import CLIENTS
from canonical.types import clients
from canonical.types import FederatedType
from canonical.types import SERVER
from canonical.types import server
from canonical.saving import fingerprint
from canonical.saving import load
from canonical.saving import save
