"""TFF's `DistributionProcess`: how the server's model reaches the clients,
as a measured process; `build_broadcast_process`, the plain broadcast, and
(ours) `build_encoded_broadcast_process`, each tensor encoded, and
`from_broadcast_process`, an older broadcast process as a distributor.

`next(state@SERVER, value@SERVER)` returns `MeasuredProcessOutput(
state@SERVER, value'@CLIENTS, measurements@SERVER)`; what the clients get
may differ from what was sent (decoded from an encoding, say).
"""

from canonical import aggregators
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


def build_encoded_broadcast_process(value_type, encoder_fn):
  """A broadcast of `value_type` (the model weights: `tff.learning.models.
  weights_type_from_model(model_fn)`) with each tensor encoded by
  `encoder_fn(tf.TensorSpec)`'s `te.encoders.as_simple_encoder(...)`: the
  server encodes, the encoded tensors travel, each client decodes. Our
  extension of TFF's API, for `model_distributor=` of TFF's learning
  algorithms; the state is the encoders' (and the round, which seeds their
  noise), the measurements empty. It runs
  `canonical.aggregators.build_encoded_broadcast_process`."""
  where = 'build_encoded_broadcast_process'
  value_type = ft.to_member(value_type, where)
  return from_broadcast_process(
      aggregators.build_encoded_broadcast_process(value_type, encoder_fn))


def from_broadcast_process(broadcast):
  """The `DistributionProcess` running an older broadcast process
  (`canonical.aggregators.build_broadcast_process` or
  `build_encoded_broadcast_process`), its encoders included; the
  measurements are empty."""

  @computations.federated_computation()
  def init_fn():
    return intrinsics.federated_eval(broadcast.initialize, ft.SERVER)

  @computations.federated_computation(ft.server(broadcast.state_spec),
                                      ft.server(broadcast.value_spec))
  def next_fn(state, value):
    new_state, at_clients = broadcast.next(state, value)
    return measured.MeasuredProcessOutput(
        new_state, at_clients, intrinsics.federated_value((), ft.SERVER))

  process = DistributionProcess(init_fn, next_fn)
  process.encoders = broadcast.encoders
  return process
