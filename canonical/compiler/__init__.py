"""The compiler: `IterativeProcess` -> `CanonicalForm`, in small passes.

trace     -> the `ir.Graph` of `next` (`canonical.core.computations`)
check     -> purity of every tf_computation, and the round's dependency
             rules (`checks`)
partition -> which ops run in prepare, work, the aggregations and update
             (`plan`)
emit      -> the pieces; each calls the user's already traced functions, and
             each intrinsic is built in by its spec's lowering (`pieces`)

`graph_walk` holds what the passes share: what `next` returns, which ops it
needs, and which ops are boundaries (a broadcast, an aggregation).
"""

from canonical.compiler.checks import check
from canonical.compiler.checks import check_purity
from canonical.compiler.checks import check_round
from canonical.compiler.checks import computations_of
from canonical.compiler.graph_walk import client_results
from canonical.compiler.graph_walk import live_ops
from canonical.compiler.pieces import emit
from canonical.compiler.plan import partition
from canonical.compiler.plan import Plan
from canonical.core import ir
from canonical import errors
from canonical import form
from canonical.core import privacy_releases
from canonical.templates import iterative_process


def compile(process: iterative_process.IterativeProcess,  # pylint: disable=redefined-builtin
            name: str | None = None, description: str = '',
            encoders: dict | None = None) -> form.CanonicalForm:
  """Lowers `process` into a `CanonicalForm`; raises `FederatedError` if it
  cannot."""
  if not isinstance(process, iterative_process.IterativeProcess):
    raise errors.FederatedError('compile expects an IterativeProcess, got '
                                f'{type(process).__name__}.')
  graph = process.next.trace()
  check(process, graph)
  plan = partition(graph, process.has_client_state)
  return emit(process, plan, name=name or graph.name, description=description,
              encoders=process.encoders if encoders is None else encoders,
              privacy_releases=ir.noted(graph, privacy_releases.Release))
