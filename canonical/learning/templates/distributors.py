"""TFF's `DistributionProcess`: how the server's model reaches the clients,
as a measured process, and `build_broadcast_process`, the plain broadcast.

`next(state@SERVER, value@SERVER)` returns `MeasuredProcessOutput(
state@SERVER, value'@CLIENTS, measurements@SERVER)`; what the clients get
may differ from what was sent (decoded from an encoding, say).
"""

from canonical import errors
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import types as ft
from canonical.learning.templates import checks
from canonical.templates import measured


class DistributionProcess(measured.MeasuredProcess):
  """TFF's `DistributionProcess(initialize_fn, next_fn)`: federated
  computations typed as above."""

  def __init__(self, initialize_fn, next_fn):
    where = checks.located('DistributionProcess')
    block = checks.block(initialize_fn, next_fn, ('the value to distribute',),
                         where)
    checks.placed(block.parameters[1], ft.SERVER, where,
                  "next_fn's second parameter (the value to distribute)")
    checks.placed(block.output.result, ft.CLIENTS, where,
                  'the result of next_fn\'s MeasuredProcessOutput')
    super().__init__(block.initialize, block.next, next_is_multi_arg=True)


def build_broadcast_process(value_type):
  """TFF's plain broadcast of `value_type` (unplaced, any of TFF's
  spellings): no state, no measurements."""
  where = 'build_broadcast_process'
  if isinstance(value_type, ft.FederatedType):
    raise errors.InvalidTypeError(
        f'{where}: value_type must not be placed (the type of the server '
        f'value), got {value_type}.')
  value_type = ft.to_member(value_type, where)

  @computations.federated_computation()
  def init_fn():
    return intrinsics.federated_value((), ft.SERVER)

  @computations.federated_computation(ft.server(()), ft.server(value_type))
  def next_fn(state, value):
    return measured.MeasuredProcessOutput(
        state, intrinsics.federated_broadcast(value),
        intrinsics.federated_value((), ft.SERVER))

  return DistributionProcess(init_fn, next_fn)
