"""Running a process or a form in this process.

`reference`: a federated computation by its plain meaning, op by op, without
compiling (the yardstick). `local`: a compiled form's pieces in a loop
(`run_round`), merging accumulators in a random tree if asked.
"""

from canonical.executors.local import run_round
from canonical.executors import reference

__all__ = ['reference', 'run_round']
