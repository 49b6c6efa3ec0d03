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

from canonical import _lazy
from canonical import _moved
from canonical import quiet as _quiet
from canonical.errors import Error
from canonical.errors import FederatedError
from canonical.errors import FormError

# The public names of the language, by the module each comes from, in the
# order the package imported them when it imported them eagerly.
_HOMES = {
    'canonical.compiler': ('compile',),
    'canonical.core.computations': ('Computation', 'federated_computation',
                                    'tf_computation'),
    'canonical.core.intrinsics': (
        'federated_aggregate', 'federated_apply', 'federated_broadcast',
        'federated_eval', 'federated_map', 'federated_max', 'federated_mean',
        'federated_min', 'federated_secure_modular_sum',
        'federated_secure_select', 'federated_secure_sum',
        'federated_secure_sum_bitwidth', 'federated_select', 'federated_sum',
        'federated_value', 'federated_zip', 'sequence_map', 'sequence_reduce',
        'sequence_sum'),
    'canonical.core.types': (
        'CLIENTS', 'clients', 'FederatedType', 'FunctionType', 'SequenceType',
        'SERVER', 'server', 'StructType', 'StructWithPythonType', 'TensorType',
        'to_type', 'Type', 'type_at_clients', 'type_at_server'),
    'canonical.executors.local': ('run_round',),
    'canonical.executors': ('reference',),
    'canonical.form': ('CanonicalForm', 'Piece'),
    'canonical.saving': ('fingerprint', 'load', 'save'),
    'canonical.templates': ('IterativeProcess',),
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
_moved.register(_moved.CANONICAL)
_lazy.around_import(_CONTEXT, _install_executor)


__getattr__, __dir__ = _lazy.module_getattr(globals(), _HOMES,
                                            fallback=_moved.attribute)
