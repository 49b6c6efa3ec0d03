"""TensorFlow Federated's API over a compiler to the canonical form.

`import canonical as tff`: the federated language (`core`), processes
(`templates`), the compiler (`compiler`) to `CanonicalForm` (`form`), the
executors (`executors`), forms on disk (`saving`), storage (`io`), secure
aggregation (`secagg`), and `learning`, `aggregators`, `privacy`, `program`,
`simulation`, `backends`, `analytics`, and TFF 0.87's `tensorflow` and
`types`. Every error it raises is an `Error`.

Importing the package imports neither TensorFlow nor anything that does, so
that a command line answers `--help` at once: the first use of a name of the
language imports the language whole (the modules the package imported
eagerly before, in the same order), and a subpackage is imported alone on
first use. A federated computation called from Python runs as its
compiled form (`executors.compiled`), however its module was reached.
"""

from typing import TYPE_CHECKING

from canonical import _lazy
from canonical import quiet as _quiet
from canonical.errors import Error
from canonical.errors import FederatedError
from canonical.errors import FormError

if TYPE_CHECKING:  # The language's public names, imported on first use
  # (`_lazy.declared`), all together and in this order: the order in which
  # the package imported them when it imported them eagerly.
  from canonical.compiler import compile
  from canonical.core.computations import Computation
  from canonical.core.computations import federated_computation
  from canonical.core.computations import tf_computation
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
  from canonical.core.types import Type
  from canonical.core.types import type_at_clients
  from canonical.core.types import type_at_server
  from canonical.executors.local import run_round
  from canonical.executors import reference
  from canonical.form import CanonicalForm
  from canonical.form import Piece
  from canonical.saving import fingerprint
  from canonical.saving import load
  from canonical.saving import save
  from canonical.templates import IterativeProcess

# Old import paths of moved modules -> their new homes (`_lazy`).
_OLD_PATHS = {
    'canonical.aggregations': ['canonical.core.intrinsics.registry',
                               'canonical.core.intrinsics.means'],
    'canonical.computations': ['canonical.core.computations'],
    'canonical.dataset_seeds': ['canonical.core.dataset_seeds'],
    'canonical.evaluation': ['canonical.core.evaluation'],
    'canonical.intrinsics': ['canonical.core.intrinsics'],
    'canonical.ir': ['canonical.core.ir', 'canonical.core.naming',
                     'canonical.errors'],
    'canonical.sequences': ['canonical.core.intrinsics.sequences'],
    'canonical.process': ['canonical.templates.iterative_process'],
    'canonical.reference': ['canonical.executors.reference'],
    'canonical.local_runner': ['canonical.executors.local'],
    'canonical.secure_sums': ['canonical.secagg.sums'],
    'canonical.storage': ['canonical.io'],
    'canonical.fedavg': ['canonical.learning.algorithms',
                         'canonical.aggregators',
                         'canonical.learning.framework',
                         'canonical.templates.measured_process'],
    'canonical.fedavg.averaging': ['canonical.learning.algorithms.fedavg'],
    'canonical.fedavg.broadcast': ['canonical.aggregators.broadcast',
                                   'canonical.learning.framework'],
    'canonical.fedavg.mean': ['canonical.aggregators.mean',
                              'canonical.learning.framework'],
    'canonical.fedavg.dp_mean': ['canonical.aggregators.dp_mean',
                                 'canonical.learning.framework'],
    'canonical.fedavg.secure_mean': ['canonical.aggregators.secure_mean',
                                     'canonical.learning.framework'],
    'canonical.fedavg.dp_secure_mean': ['canonical.aggregators.dp_secure_mean',
                                        'canonical.learning.framework'],
    'canonical.fedavg.measured_process': [
        'canonical.templates.measured_process'],
    'canonical.fedavg.specs': ['canonical.core.specs',
                               'canonical.learning.model_fns'],
}

_CONTEXT = 'canonical.core.context'


def _run_compiled(computation, *args):
  from canonical.executors import compiled  # pylint: disable=g-import-not-at-top
  return compiled.run(computation, *args)


def _install_executor(load, context):
  """The language's execution context runs a federated computation called
  from Python as its compiled form (by its plain meaning where it has
  none), however the context is reached (a name of this package, or `from
  canonical.core.computations import ...`)."""
  load(context)
  context.set_executor(_run_compiled)


_quiet.on_import()  # TensorFlow's, absl's and Beam's lines of no use.
_lazy.register_old_paths(_OLD_PATHS)
_lazy.around_import(_CONTEXT, _install_executor)


__getattr__, __dir__ = _lazy.declared(globals(), load_all=True,
                                      fallback=_lazy.old_path_attribute)
