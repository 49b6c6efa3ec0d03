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

from canonical import _lazy

__getattr__, __dir__ = _lazy.module_getattr(globals(), {
    'canonical.learning.metrics.aggregators': (
        'finalize_then_sample', 'secure_sum_then_finalize',
        'sum_then_finalize'),
    'canonical.learning.metrics.sampling': ('FinalizeThenSampleFactory',),
    'canonical.learning.metrics.sum_factories': (
        'SecureSumFactory', 'SumThenFinalizeFactory',
        'create_default_secure_sum_quantization_ranges'),
    'canonical.learning.metrics.counters': (
        'NumBatchesCounter', 'NumExamplesCounter'),
    'canonical.learning.metrics.functional_metrics': (
        'create_functional_metric_fns',),
    'canonical.learning.metrics.keras_finalizer': (
        'create_keras_metric_finalizer',),
    'canonical.learning.metrics.types': (
        'FunctionalMetricFinalizersType', 'MetricFinalizersType',
        'MetricsAggregatorType'),
})
