"""TensorFlow Federated's `EstimationProcess`: an iterative process with a
`report` that reads its current estimate from the state.

Its `next(state@SERVER, value@CLIENTS)` returns the new state alone, so it is
an `IterativeProcess` here too (one that compiles, with empty metrics). The
aggregators use one to adapt a clipping or zeroing norm, or a secure sum's
bounds: `report(state)` is the norm a round uses, `next` moves it.
"""

import tensorflow as tf

from canonical.core import computations
from canonical.core.intrinsics import maps
from canonical.core import naming
from canonical.core import types as ft
from canonical import errors
from canonical.templates import iterative_process
from canonical.templates import measured


class EstimationProcess(iterative_process.IterativeProcess):
  """TFF's `EstimationProcess(initialize_fn, next_fn, report_fn,
  next_is_multi_arg=None)`: `report_fn` takes the state and returns the
  estimate."""

  def __init__(self, initialize_fn, next_fn, report_fn,
               next_is_multi_arg=None):
    super().__init__(initialize_fn, next_fn, next_is_multi_arg)
    where = f'EstimationProcess at {self.location}'
    params = measured.parameter_types(report_fn, f'{where}: report_fn')
    if len(params) != 1 or not measured.fits(params[0], self.state_type):
      raise errors.FederatedError(
          f'{where}: report_fn must take the state '
          f'({self.state_type}) as its one parameter, '
          f'{naming.describe_object(report_fn)} takes '
          f'{", ".join(str(p) for p in params) or "nothing"}.')
    self._report_fn = report_fn

  @property
  def report(self):
    """The computation reading the current estimate from the state."""
    return self._report_fn

  def map(self, map_fn):
    """A process like this one whose `report` is `map_fn(report(state))`.

    `map_fn` is a federated computation taking the estimate, or (a
    convenience TFF does not have) a tf_computation, applied at the place
    of the estimate.
    """
    where = f'EstimationProcess.map at {naming.user_location()}'
    estimate = measured.result_type(self._report_fn)
    if isinstance(map_fn, computations.FederatedComputation):
      params = map_fn.parameter_types
      if len(params) != 1 or not measured.fits(params[0], estimate):
        raise errors.FederatedError(
            f'{where}: map_fn must take the estimate ({estimate}), '
            f'{naming.describe_object(map_fn)} takes '
            f'{", ".join(str(p) for p in params) or "nothing"}.')
      apply = map_fn
    elif isinstance(map_fn, (computations.TFComputation,
                             computations.PolymorphicComputation)):
      def apply(value):
        return maps.federated_map(map_fn, value)
    else:
      raise errors.FederatedError(
          f'{where}: map_fn must be a computation, got '
          f'{naming.describe_object(map_fn)}.')
    report = self._report_fn
    mapped = computations.federated_computation(
        lambda state: apply(report(state)), self.state_type)
    return EstimationProcess(self.initialize, self.next, mapped)


def check_scalar_estimator(process, name, dtype):
  """`process` is an EstimationProcess whose `next` takes one `dtype` scalar
  per client and returns only the state, and whose `report` gives one
  `dtype` scalar at SERVER (what clipping, zeroing and secure sums adapt by).
  """
  if not isinstance(process, EstimationProcess):
    raise errors.InvalidTypeError(
        f'{name} must be a number or an EstimationProcess, got '
        f'{naming.describe_object(process)}.')
  scalar = tf.TensorSpec([], dtype)
  params = process.next.parameter_types
  if len(params) != 2 or not measured.fits(params[1], ft.clients(scalar)):
    raise errors.FederatedError(
        f'{name}: its next must take (state, {ft.clients(scalar)}), it takes '
        f'{", ".join(str(p) for p in params)}.')
  if not isinstance(process.next, iterative_process.StateOnlyNext):
    raise errors.FederatedError(
        f'{name}: its next must return only the new state.')
  estimate = measured.result_type(process.report)
  if not measured.fits(ft.server(scalar), estimate):
    raise errors.FederatedError(
        f'{name}: its report must return {ft.server(scalar)}, it returns '
        f'{measured.describe_type(estimate)}.')
