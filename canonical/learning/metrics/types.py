"""TFF 0.87's type annotations of `tff.learning.metrics`."""

import collections
from collections.abc import Callable
from typing import Any, Optional, Protocol

MetricFinalizersType = collections.OrderedDict[str, Callable[[Any], Any]]
MetricsState = collections.OrderedDict[str, Any]
FunctionalMetricFinalizersType = Callable[[MetricsState], MetricsState]


class MetricsAggregatorType(Protocol):
  """What a builder's `metrics_aggregator` is: the metrics' finalizers in,
  a federated aggregation of unfinalized metrics at CLIENTS out."""

  def __call__(self, metric_finalizers: MetricFinalizersType,
               local_unfinalized_metrics_type: Optional[Any] = None) -> Any:
    ...
