"""The MapReduce back end (TFF's `tff.backends.mapreduce`): a round lowered to
the eight pieces of the canonical form, TFF's `MapReduceForm`.

`compile(process)` is the lowering and `CanonicalForm` the form it gives; the
Beam runner (`beam_runner`) executes it.
"""

from canonical.compiler import compile  # pylint: disable=redefined-builtin
from canonical.form import CanonicalForm

__all__ = ['CanonicalForm', 'compile']
