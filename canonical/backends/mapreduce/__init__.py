"""The MapReduce back end (TFF's `tff.backends.mapreduce`): a round lowered to
the eight pieces of the canonical form, TFF's `MapReduceForm`.

TFF 0.87's names: `get_map_reduce_form_for_computation(next)` gives the form
of a round and `get_state_initialization_computation(initialize)` the
computation making its first state;
`check_computation_compatible_with_map_reduce_form` says why a round has no
form; `get_computation_for_map_reduce_form(form)` gives back the round the
form runs, as a federated computation; `get_broadcast_form_for_computation`
gives the `BroadcastForm` of a computation that only broadcasts.
`compile(process)` is the same lowering of a whole process, `CanonicalForm`
(`MapReduceForm`) the form it gives, and the Beam runner (`beam_runner`)
executes it.
"""

from canonical.backends.mapreduce.broadcast_form import BroadcastForm
from canonical.backends.mapreduce.broadcast_form import get_broadcast_form_for_computation
from canonical.backends.mapreduce.form_computation import get_computation_for_map_reduce_form
from canonical.backends.mapreduce.form_utils import check_computation_compatible_with_map_reduce_form
from canonical.backends.mapreduce.form_utils import get_map_reduce_form_for_computation
from canonical.backends.mapreduce.form_utils import get_state_initialization_computation
from canonical.compiler import compile  # pylint: disable=redefined-builtin
from canonical.core.intrinsics import federated_secure_modular_sum
from canonical.form import CanonicalForm
from canonical.form import MapReduceForm

__all__ = [
    'BroadcastForm', 'CanonicalForm', 'MapReduceForm',
    'check_computation_compatible_with_map_reduce_form', 'compile',
    'federated_secure_modular_sum', 'get_broadcast_form_for_computation',
    'get_computation_for_map_reduce_form',
    'get_map_reduce_form_for_computation',
    'get_state_initialization_computation',
]
