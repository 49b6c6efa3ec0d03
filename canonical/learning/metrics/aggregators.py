"""TFF 0.87's metrics aggregators: what a learning builder's
`metrics_aggregator` is.

Each (`sum_then_finalize`, `secure_sum_then_finalize`,
`finalize_then_sample`) takes the model's metric finalizers (`VariableModel.
metric_finalizers()`, an `OrderedDict`, or `FunctionalModel.
finalize_metrics`, a function) and returns a federated aggregation of the
clients' unfinalized metrics: called, while a federated computation is
traced, on the unfinalized metrics placed at CLIENTS, it gives the finalized
metrics at SERVER.
"""

import collections

from canonical import errors
from canonical.core import intrinsics
from canonical.core import ir
from canonical.core import specs
from canonical.core import types as ft
from canonical.learning.metrics import finalizing
from canonical.learning.metrics import sampling
from canonical.learning.metrics import sum_factories

DEFAULT_SECURE_LOWER_BOUND = 0
DEFAULT_SECURE_UPPER_BOUND = 2**20 - 1


class MetricsAggregation:
  """A federated aggregation of unfinalized metrics at CLIENTS into
  finalized metrics at SERVER: TFF's polymorphic computation, typed by the
  value it is called on inside a federated computation."""

  def __init__(self, name, metric_finalizers, aggregate):
    self._name = name
    self._finalizers = metric_finalizers
    self._aggregate = aggregate

  def __call__(self, client_unfinalized_metrics):
    value = client_unfinalized_metrics
    if not (isinstance(value, ir.Value) and
            isinstance(value.type_signature, ft.FederatedType) and
            value.type_signature.placement == ft.CLIENTS):
      raise errors.FederatedError(
          f'{self._name}: call it inside a federated computation on the '
          'unfinalized metrics placed at CLIENTS (a learning builder does), '
          f'got {type(value).__name__}.')
    member = specs.plain(value.type_signature.member)
    finalizing.check_matches(self._finalizers, member, self._name)
    return self._aggregate(value, member)

  def __repr__(self):
    return f'<metrics aggregation {self._name}>'


def _finalizer(metric_finalizers, member):
  return specs.tf_computation(
      lambda unfinalized: finalizing.finalize(metric_finalizers, unfinalized),
      member)


def sum_then_finalize(metric_finalizers, local_unfinalized_metrics_type=None):
  """Sums the clients' unfinalized metrics, then finalizes the sum at the
  server (a builder's default). `local_unfinalized_metrics_type` is unused,
  as in TFF."""
  del local_unfinalized_metrics_type  # TFF's is unused too.
  who = 'sum_then_finalize'
  finalizing.check_finalizers(metric_finalizers, who)

  def aggregate(value, member):
    return intrinsics.federated_map(_finalizer(metric_finalizers, member),
                                    intrinsics.federated_sum(value))

  return MetricsAggregation(who, metric_finalizers, aggregate)


def secure_sum_then_finalize(metric_finalizers,
                             local_unfinalized_metrics_type=None,
                             metric_value_ranges=None):
  """Sums the clients' unfinalized metrics by secure sums, then finalizes
  them; the result also holds `secure_sum_measurements` (one entry per
  group of values with the same range and dtype, see `SecureSumFactory`).
  Values are clipped to `metric_value_ranges` (a partial structure of
  `(lower, upper)` pairs; unset ones take `[0, 2**20 - 1]`)."""
  del local_unfinalized_metrics_type  # TFF's is unused too.
  who = 'secure_sum_then_finalize'
  finalizing.check_finalizers(metric_finalizers, who)
  sum_factories.check_value_ranges(metric_value_ranges, who)

  def aggregate(value, member):
    defaults = sum_factories.create_default_secure_sum_quantization_ranges(
        member, lower_bound=DEFAULT_SECURE_LOWER_BOUND,
        upper_bound=DEFAULT_SECURE_UPPER_BOUND,
        use_auto_tuned_bounds_for_float_values=False)
    ranges = sum_factories.fill_in_ranges(defaults, metric_value_ranges, who)
    process = sum_factories.SecureSumFactory(ranges).create(member)
    output = process.next(process.initialize(), value)
    measurements_type = specs.plain(output.measurements.type_signature.member)

    def finalize(unfinalized, measurements):
      finalized = collections.OrderedDict(
          secure_sum_measurements=measurements)
      finalized.update(finalizing.finalize(metric_finalizers, unfinalized))
      return finalized

    finalize_tf = specs.tf_computation(finalize, member, measurements_type)
    return intrinsics.federated_map(
        finalize_tf, (output.result, output.measurements))

  return MetricsAggregation(who, metric_finalizers, aggregate)


def finalize_then_sample(metric_finalizers,
                         local_unfinalized_metrics_type=None, sample_size=100):
  """Finalizes each client's metrics, then keeps those of at most
  `sample_size` clients, sampled uniformly: each metric becomes the list of
  the sampled clients' values (`FinalizeThenSampleFactory`'s current round
  samples). `local_unfinalized_metrics_type` is unused, as in TFF."""
  del local_unfinalized_metrics_type  # TFF's is unused too.
  who = 'finalize_then_sample'
  finalizing.check_finalizers(metric_finalizers, who)
  sampling.check_sample_size(sample_size, who)

  def aggregate(value, member):
    process = sampling.FinalizeThenSampleFactory(sample_size).create(
        metric_finalizers, member)
    return process.next(process.initialize(), value).result[0]

  return MetricsAggregation(who, metric_finalizers, aggregate)
