"""The intrinsics, with TensorFlow Federated's names: one module per family,
one spec per intrinsic in the registry (`registry`).

Called while tracing a federated computation, each checks its arguments by
its type rule and appends one op to the graph; the compiler, the executors
and the process checks read the op's spec (`registry.of(op)`).
"""

from canonical.core.intrinsics.aggregate import federated_aggregate
from canonical.core.intrinsics.broadcast import federated_broadcast
from canonical.core.intrinsics.maps import federated_apply
from canonical.core.intrinsics.maps import federated_map
from canonical.core.intrinsics.means import federated_mean
from canonical.core.intrinsics.reductions import federated_max
from canonical.core.intrinsics.reductions import federated_min
from canonical.core.intrinsics.reductions import federated_sum
from canonical.core.intrinsics import registry
from canonical.core.intrinsics.secure_sums import federated_secure_modular_sum
from canonical.core.intrinsics.secure_sums import (
    federated_secure_modular_sum_with_client_noise)
from canonical.core.intrinsics.secure_sums import federated_secure_sum
from canonical.core.intrinsics.secure_sums import federated_secure_sum_bitwidth
from canonical.core.intrinsics.selects import federated_secure_select
from canonical.core.intrinsics.selects import federated_select
from canonical.core.intrinsics.sequences import sequence_map
from canonical.core.intrinsics.sequences import sequence_reduce
from canonical.core.intrinsics.sequences import sequence_sum
from canonical.core.intrinsics.structure import federated_zip
from canonical.core.intrinsics.values import federated_eval
from canonical.core.intrinsics.values import federated_value
from canonical.core.ir import select

__all__ = [
    'federated_aggregate', 'federated_apply', 'federated_broadcast',
    'federated_eval', 'federated_map', 'federated_max', 'federated_mean',
    'federated_min', 'federated_secure_modular_sum',
    'federated_secure_modular_sum_with_client_noise', 'federated_secure_select',
    'federated_secure_sum', 'federated_secure_sum_bitwidth',
    'federated_select', 'federated_sum', 'federated_value',
    'federated_zip', 'registry', 'select', 'sequence_map', 'sequence_reduce',
    'sequence_sum',
]
