"""The MapReduce back end (TFF's `tff.backends.mapreduce`): a round lowered to
the eight pieces of the canonical form, TFF's `MapReduceForm`.

TFF 0.87's names: `get_map_reduce_form_for_computation(next)` gives the form
of a round and `get_state_initialization_computation(initialize)` the
computation making its first state;
`check_computation_compatible_with_map_reduce_form` says why a round has no
form; `get_computation_for_map_reduce_form(form)` gives back the round the
form runs, as a federated computation; `MapReduceForm(...)` builds a form
from TFF's pieces. `get_distribute_aggregate_form_for_computation` gives
the round as TFF's five-piece `DistributeAggregateForm` (made from its
form), `get_broadcast_form_for_computation` the `BroadcastForm` of a
computation that only broadcasts, each with its way back to a computation;
`consolidate_and_extract_local_processing` and `parse_tff_to_tf` make
processing at one place one tf_computation. `compile(process)` is the same
lowering of a whole process, `CanonicalForm` (a `MapReduceForm`) the form
it gives, and the Beam runner (`beam_runner`) executes it.
"""

from canonical.backends.mapreduce.broadcast_form import BroadcastForm
from canonical.backends.mapreduce.broadcast_form import get_broadcast_form_for_computation
from canonical.backends.mapreduce.distribute_aggregate import DistributeAggregateForm
from canonical.backends.mapreduce.distribute_aggregate import get_computation_for_distribute_aggregate_form
from canonical.backends.mapreduce.distribute_aggregate import get_distribute_aggregate_form_for_computation
from canonical.backends.mapreduce.form_computation import get_computation_for_broadcast_form
from canonical.backends.mapreduce.form_computation import get_computation_for_map_reduce_form
from canonical.backends.mapreduce.form_utils import check_computation_compatible_with_map_reduce_form
from canonical.backends.mapreduce.form_utils import get_map_reduce_form_for_computation
from canonical.backends.mapreduce.form_utils import get_state_initialization_computation
from canonical.backends.mapreduce.local_processing import consolidate_and_extract_local_processing
from canonical.backends.mapreduce.local_processing import parse_tff_to_tf
from canonical.backends.mapreduce.map_reduce_form import MapReduceForm
from canonical.compiler import compile  # pylint: disable=redefined-builtin
from canonical.core.intrinsics import federated_secure_modular_sum
from canonical.form import CanonicalForm

__all__ = [
    'BroadcastForm', 'CanonicalForm', 'DistributeAggregateForm',
    'MapReduceForm', 'check_computation_compatible_with_map_reduce_form',
    'compile', 'consolidate_and_extract_local_processing',
    'federated_secure_modular_sum',
    'get_broadcast_form_for_computation',
    'get_computation_for_broadcast_form',
    'get_computation_for_distribute_aggregate_form',
    'get_computation_for_map_reduce_form',
    'get_distribute_aggregate_form_for_computation',
    'get_map_reduce_form_for_computation',
    'get_state_initialization_computation', 'parse_tff_to_tf',
]
