"""TFF 0.87's `tff.learning.metrics`: aggregating a model's unfinalized
metrics from the clients and finalizing them at the server.

- `aggregators`: `sum_then_finalize` (a builder's default),
  `secure_sum_then_finalize` (over the secure sums of `tff.aggregators`),
  `finalize_then_sample`: a builder's `metrics_aggregator`;
- `sum_factories`: `SumThenFinalizeFactory`, `SecureSumFactory`,
  `create_default_secure_sum_quantization_ranges`;
- `sampling`: `FinalizeThenSampleFactory`;
- `counters`: `NumExamplesCounter`, `NumBatchesCounter`;
- `functional_metrics`: `create_functional_metric_fns` (Keras metrics as a
  `FunctionalModel`'s pure metrics functions);
- `keras_finalizer`: `create_keras_metric_finalizer` (a Keras metric's
  `result()` of its variables' values);
- `types`: the type annotations;
- `finalizing`: finalizers of either form, applied and checked.

Names are imported on first use.
"""

from typing import TYPE_CHECKING

from canonical import _lazy

if TYPE_CHECKING:  # Imported on first use (`_lazy.declared`).
  from canonical.learning.metrics.aggregators import finalize_then_sample
  from canonical.learning.metrics.aggregators import secure_sum_then_finalize
  from canonical.learning.metrics.aggregators import sum_then_finalize
  from canonical.learning.metrics.sampling import FinalizeThenSampleFactory
  from canonical.learning.metrics.sum_factories import SecureSumFactory
  from canonical.learning.metrics.sum_factories import SumThenFinalizeFactory
  from canonical.learning.metrics.sum_factories import create_default_secure_sum_quantization_ranges
  from canonical.learning.metrics.counters import NumBatchesCounter
  from canonical.learning.metrics.counters import NumExamplesCounter
  from canonical.learning.metrics.functional_metrics import create_functional_metric_fns
  from canonical.learning.metrics.keras_finalizer import create_keras_metric_finalizer
  from canonical.learning.metrics.types import FunctionalMetricFinalizersType
  from canonical.learning.metrics.types import MetricFinalizersType
  from canonical.learning.metrics.types import MetricsAggregatorType

__getattr__, __dir__ = _lazy.declared(globals())
