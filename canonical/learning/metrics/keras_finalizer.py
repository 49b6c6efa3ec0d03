"""TFF 0.87's `create_keras_metric_finalizer`: a Keras metric's `result()`
as a function of its variables' values (its unfinalized values).

The finalizer makes a fresh metric (from the constructor, or from the
metric's config), assigns it the values and returns `result()`. It runs as a
pure function (`call_local.PureFunction`): in eager code, in any graph and
inside computations, the metric's variables are call-local and lowered into
values, so any Keras metric finalizes at the server, no hand-written twin
needed.
"""

from typing import Callable, Union

import keras
import tensorflow as tf

from canonical import errors
from canonical.learning import call_local

_WHO = 'create_keras_metric_finalizer'


def create_keras_metric(metric: Union[keras.metrics.Metric,
                                      Callable[[], keras.metrics.Metric]]):
  """A new Keras metric like `metric` (made from its config), or the one
  the no-argument `metric` constructor makes."""
  if isinstance(metric, keras.metrics.Metric):
    try:
      return type(metric).from_config(metric.get_config())
    except (TypeError, ValueError) as e:
      raise errors.InvalidTypeError(
          f'{_WHO}: Keras metric {type(metric).__name__} (named '
          f'{metric.name!r}) cannot be made again from its get_config() '
          f'({e}); pass its constructor instead (a no-argument function '
          'making it).') from None
  if callable(metric):
    made = metric()
    if not isinstance(made, keras.metrics.Metric):
      raise errors.InvalidTypeError(
          f'{_WHO}: the metric constructor {metric!r} made a '
          f'{type(made).__name__}, not a Keras metric (keras.metrics.Metric).')
    return made
  raise errors.InvalidTypeError(
      f'{_WHO}: expected a Keras metric (keras.metrics.Metric) or a '
      f'no-argument function making one, got {type(metric).__name__}.')


def create_keras_metric_finalizer(metric):
  """The finalizer of `metric` (a Keras metric, or a no-argument function
  making one): `finalizer(unfinalized_values)` takes the list of its
  variables' values (`[total, count]` for a mean, the four confusion
  counts for AUC, ...) and returns `metric.result()` of them."""
  example = create_keras_metric(metric)  # Checks `metric` now, as TFF.
  name = example.name
  kept = [tf.TensorSpec(v.shape, tf.as_dtype(v.dtype))
          for v in example.variables]

  def result_of(values):
    fresh = create_keras_metric(metric)
    for variable, value in zip(fresh.variables, values):
      variable.assign(value)
    return fresh.result()

  pure = call_local.PureFunction(result_of, f'{_WHO}.finalizer')

  def finalizer(unfinalized_metric_values):
    if not isinstance(unfinalized_metric_values, (list, tuple)):
      raise errors.InvalidTypeError(
          f'{_WHO}: a finalizer takes the list of the metric\'s variables\' '
          f'values, got {type(unfinalized_metric_values).__name__}.')
    values = [tf.convert_to_tensor(v) for v in unfinalized_metric_values]
    if len(values) != len(kept):
      raise errors.InvalidValueError(
          f'{_WHO}: Keras metric {name!r} has {len(kept)} variables; its '
          f'finalizer was given {len(values)} values.')
    for spec, value in zip(kept, values):
      if (not spec.shape.is_compatible_with(value.shape) or
          spec.dtype != value.dtype):
        raise errors.InvalidValueError(
            f'{_WHO}: Keras metric {name!r} keeps a variable of '
            f'{spec.dtype.name}{spec.shape.as_list()}; its finalizer was '
            f'given {value.dtype.name}{value.shape.as_list()}.')
    return pure(values)

  return finalizer
