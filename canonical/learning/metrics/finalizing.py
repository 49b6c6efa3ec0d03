"""Finalizing unfinalized metrics, whichever form the finalizers take: an
`OrderedDict` of metric name to finalizer (a `VariableModel`'s
`metric_finalizers()`), or one function of the whole state (a
`FunctionalModel`'s `finalize_metrics`)."""

import collections
import collections.abc

from canonical import errors


def check_finalizers(metric_finalizers, who):
  """Raises unless `metric_finalizers` is a function or an `OrderedDict` of
  str to function."""
  if callable(metric_finalizers):
    return
  if not isinstance(metric_finalizers, collections.OrderedDict):
    raise errors.InvalidTypeError(
        f'{who}: metric_finalizers must be an OrderedDict of metric name to '
        'finalizer (VariableModel.metric_finalizers()) or a function of the '
        "metrics' state (FunctionalModel.finalize_metrics), got "
        f'{type(metric_finalizers).__name__}.')
  for name, finalizer in metric_finalizers.items():
    if not isinstance(name, str) or not callable(finalizer):
      raise errors.InvalidTypeError(
          f'{who}: metric_finalizers maps {name!r} to '
          f'{type(finalizer).__name__}; it must map metric names (str) to '
          'functions.')


def check_matches(metric_finalizers, unfinalized_type, who):
  """Raises unless an `OrderedDict` of finalizers names exactly the metrics
  of `unfinalized_type` (a function of the whole state is not checked)."""
  if not isinstance(unfinalized_type, collections.abc.Mapping):
    raise errors.InvalidTypeError(
        f'{who}: the unfinalized metrics must be an OrderedDict of metric '
        f'name to values, got {type(unfinalized_type).__name__}.')
  if callable(metric_finalizers):
    return
  finalized, unfinalized = set(metric_finalizers), set(unfinalized_type)
  if finalized != unfinalized:
    raise errors.InvalidValueError(
        f'{who}: the metric names of metric_finalizers and of the '
        'unfinalized metrics differ: only in metric_finalizers: '
        f'{sorted(finalized - unfinalized)}; only in the unfinalized '
        f'metrics: {sorted(unfinalized - finalized)}.')


def finalize(metric_finalizers, unfinalized):
  """The finalized metrics of `unfinalized` (inside a computation)."""
  if callable(metric_finalizers):
    return metric_finalizers(unfinalized)
  return collections.OrderedDict(
      (name, finalizer(unfinalized[name]))
      for name, finalizer in metric_finalizers.items())
