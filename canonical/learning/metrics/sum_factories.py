"""TFF 0.87's metric aggregation factories that sum: `SumThenFinalizeFactory`
(sums each round, keeps the total over rounds, finalizes both) and
`SecureSumFactory` (sums unfinalized metrics by secure sums), with
`create_default_secure_sum_quantization_ranges`.

Secure sums work on integers, so every value is clipped to a range (float
ones are then quantized): `SecureSumFactory` groups the metrics' tensors by
range and dtype and runs one `tff.aggregators.SecureSumFactory` per group,
as TFF does; each group's measurements come under its key
`'<lower>/<upper>/<dtype>'`.
"""

import collections
import collections.abc
import math
import numbers

import tensorflow as tf

from canonical import aggregators
from canonical import errors
from canonical.aggregators import factory
from canonical.aggregators import quantile_estimation
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import specs
from canonical.core import types as ft
from canonical.learning.metrics import finalizing
from canonical.templates import aggregation_process
from canonical.templates import estimation_process
from canonical.templates import measured

DEFAULT_FIXED_SECURE_LOWER_BOUND = 0
DEFAULT_FIXED_SECURE_UPPER_BOUND = 2**20 - 1


def _member(value_type, where):
  """The unfinalized metrics' type as a structure of specs."""
  member = specs.plain(ft.to_member(value_type, where))
  if not isinstance(member, collections.abc.Mapping):
    raise errors.InvalidTypeError(
        f'{where}: the unfinalized metrics must be an OrderedDict of metric '
        f'name to values, got {ft.describe(member)}.')
  return member


class SumThenFinalizeFactory(factory.UnweightedAggregationFactory):
  """Sums the clients' unfinalized metrics with `inner_summation_factory`
  (default `tff.aggregators.SumFactory()`; a secure one for secure sums),
  adds the sum to the state's total over rounds (starting from
  `initial_unfinalized_metrics`, or zeros), and finalizes both: the result
  is `(current_round_metrics, total_rounds_metrics)`, the measurements are
  the inner process's."""

  def __init__(self, metric_finalizers, initial_unfinalized_metrics=None,
               inner_summation_factory=None):
    who = 'SumThenFinalizeFactory'
    finalizing.check_finalizers(metric_finalizers, who)
    if initial_unfinalized_metrics is not None and not isinstance(
        initial_unfinalized_metrics, collections.OrderedDict):
      raise errors.InvalidTypeError(
          f'{who}: initial_unfinalized_metrics must be an OrderedDict, got '
          f'{type(initial_unfinalized_metrics).__name__}.')
    if inner_summation_factory is None:
      inner_summation_factory = aggregators.SumFactory()
    elif not isinstance(inner_summation_factory,
                        factory.UnweightedAggregationFactory):
      raise errors.InvalidTypeError(
          f'{who}: inner_summation_factory must be a tff.aggregators.'
          'UnweightedAggregationFactory, got '
          f'{type(inner_summation_factory).__name__}.')
    self._finalizers = metric_finalizers
    self._initial = initial_unfinalized_metrics
    self._inner = inner_summation_factory

  def create(self, local_unfinalized_metrics_type):
    who = 'SumThenFinalizeFactory.create'
    member = _member(local_unfinalized_metrics_type, who)
    finalizing.check_matches(self._finalizers, member, who)
    inner = self._inner.create(member)
    initial = self._initial

    def first_totals():
      if initial is None:
        return tf.nest.map_structure(
            lambda s: tf.zeros(s.shape, s.dtype), member)
      return tf.nest.map_structure(
          lambda s, v: tf.cast(tf.reshape(v, s.shape), s.dtype), member,
          initial)

    totals_tf = specs.tf_computation(first_totals)
    add_tf = specs.tf_computation(
        lambda a, b: tf.nest.map_structure(tf.add, a, b), member, member)
    finalize_tf = specs.tf_computation(
        lambda u: finalizing.finalize(self._finalizers, u), member)

    @computations.federated_computation()
    def init_fn():
      return intrinsics.federated_zip(
          (inner.initialize(), intrinsics.federated_eval(totals_tf,
                                                         ft.SERVER)))

    @computations.federated_computation(
        measured.result_type(init_fn), ft.clients(member))
    def next_fn(state, unfinalized_metrics):
      inner_state, totals = state[0], state[1]
      output = inner.next(inner_state, unfinalized_metrics)
      totals = intrinsics.federated_map(add_tf, (totals, output.result))
      return measured.MeasuredProcessOutput(
          state=intrinsics.federated_zip((output.state, totals)),
          result=intrinsics.federated_zip(
              (intrinsics.federated_map(finalize_tf, output.result),
               intrinsics.federated_map(finalize_tf, totals))),
          measurements=output.measurements)

    return aggregation_process.AggregationProcess(init_fn, next_fn)


def _auto_tuned_upper_bound():
  """TFF's default upper bound of float metrics: an estimate of their 95th
  percentile, doubled, reported by secure sums."""
  return quantile_estimation.PrivateQuantileEstimationProcess.no_noise(
      initial_estimate=50.0, target_quantile=0.95, learning_rate=1.0,
      multiplier=2.0, secure_estimation=True)


def create_default_secure_sum_quantization_ranges(
    local_unfinalized_metrics_type,
    lower_bound=DEFAULT_FIXED_SECURE_LOWER_BOUND,
    upper_bound=DEFAULT_FIXED_SECURE_UPPER_BOUND,
    use_auto_tuned_bounds_for_float_values=True):
  """The unfinalized metrics' structure with each tensor replaced by its
  `(lower, upper)` range: `(ceil(lower), floor(upper))` for integers; for
  floats `(float(lower), float(upper))`, or with auto-tuned bounds `(None,
  <estimation process>)`."""
  who = 'create_default_secure_sum_quantization_ranges'
  for name, bound in (('lower_bound', lower_bound),
                      ('upper_bound', upper_bound)):
    if isinstance(bound, bool) or not isinstance(bound, numbers.Real):
      raise errors.InvalidTypeError(
          f'{who}: {name} must be an int or a float, got {bound!r}.')
  if lower_bound >= upper_bound:
    raise errors.InvalidValueError(
        f'{who}: upper_bound ({upper_bound}) must be greater than '
        f'lower_bound ({lower_bound}).')
  member = specs.plain(ft.to_member(local_unfinalized_metrics_type, who))
  estimator = (_auto_tuned_upper_bound()
               if use_auto_tuned_bounds_for_float_values else None)

  def default_range(spec):
    if spec.dtype.is_floating:
      if estimator is not None:
        return (None, estimator)
      return (float(lower_bound), float(upper_bound))
    if spec.dtype.is_integer:
      lower, upper = math.ceil(lower_bound), math.floor(upper_bound)
      if upper - lower < 1:
        raise errors.InvalidValueError(
            f'{who}: an integer tensor needs a range at least 1 wide, and '
            f'[{lower_bound}, {upper_bound}] gives [{lower}, {upper}].')
      return (lower, upper)
    raise errors.InvalidTypeError(
        f'{who}: only float and integer tensors can be summed securely, got '
        f'{spec.dtype.name} in {ft.describe(member)}.')

  return tf.nest.map_structure(default_range, member)


def check_value_ranges(metric_value_ranges, who):
  if metric_value_ranges is not None and not isinstance(
      metric_value_ranges, collections.OrderedDict):
    raise errors.InvalidTypeError(
        f'{who}: metric_value_ranges must be an OrderedDict (a partial '
        'structure of the unfinalized metrics with (lower, upper) leaves), '
        f'got {type(metric_value_ranges).__name__}.')


def _is_range(value):
  return isinstance(value, tuple) and len(value) == 2 and not isinstance(
      value[1], (tuple, list, collections.abc.Mapping))


def _check_range(value, who):
  if not _is_range(value):
    raise errors.InvalidValueError(
        f'{who}: a metric value range is a (lower, upper) pair, got '
        f'{value!r}.')
  lower, upper = value
  if isinstance(upper, estimation_process.EstimationProcess):
    return value
  if type(lower) is not type(upper) or not isinstance(lower, (int, float)):
    raise errors.InvalidTypeError(
        f'{who}: a range\'s bounds must both be ints or both floats, got '
        f'{value!r}.')
  return value


def fill_in_ranges(defaults, user_ranges, who):
  """`defaults` (a structure of ranges) with the ranges `user_ranges` gives
  (a partial structure: a missing key or a None leaf keeps the default)."""
  if user_ranges is None:
    return defaults
  if isinstance(defaults, collections.abc.Mapping):
    if not isinstance(user_ranges, collections.abc.Mapping):
      raise errors.InvalidTypeError(
          f'{who}: metric_value_ranges has {user_ranges!r} where the metrics '
          'have a mapping.')
    unknown = set(user_ranges) - set(defaults)
    if unknown:
      raise errors.InvalidValueError(
          f'{who}: metric_value_ranges names {sorted(unknown)}, which the '
          f'unfinalized metrics do not have ({list(defaults)}).')
    return type(defaults)(
        (key, fill_in_ranges(value, user_ranges.get(key), who))
        for key, value in defaults.items())
  if isinstance(defaults, list):
    if not isinstance(user_ranges, (list, tuple)) or len(user_ranges) != len(
        defaults):
      raise errors.InvalidValueError(
          f'{who}: metric_value_ranges has {user_ranges!r} where the metrics '
          f'have {len(defaults)} values.')
    return [fill_in_ranges(d, u, who) for d, u in zip(defaults, user_ranges)]
  return _check_range(user_ranges, who)


def factory_key(lower, upper, dtype):
  """TFF's key of a group of values summed together: 'lower/upper/dtype'."""
  if isinstance(upper, estimation_process.EstimationProcess):
    upper = 'default_estimation_process'
  return '/'.join(str(part) for part in (lower, upper, dtype.name))


def _flat_ranges(ranges, member):
  """The ranges in the order of `tf.nest.flatten(member)`."""
  flat = []

  def walk(value):
    if _is_range(value):
      flat.append(value)
    elif isinstance(value, collections.abc.Mapping):
      for key in sorted(value):
        walk(value[key])
    else:
      for item in value:
        walk(item)

  walk(ranges)
  if len(flat) != len(tf.nest.flatten(member)):
    raise errors.InvalidValueError(
        f'SecureSumFactory: metric_value_ranges do not fit the unfinalized '
        f'metrics {ft.describe(member)}.')
  return flat


class SecureSumFactory(factory.UnweightedAggregationFactory):
  """Sums unfinalized metrics by secure sums: each tensor clipped to its
  range in `metric_value_ranges` (a partial structure; unset ones take
  `create_default_secure_sum_quantization_ranges`' ranges: auto-tuned for
  floats, `[0, 2**20 - 1]` for integers). The result is the summed
  unfinalized metrics; the measurements, per group key, the secure sums'
  clipping counts and thresholds."""

  def __init__(self, metric_value_ranges=None):
    check_value_ranges(metric_value_ranges, 'SecureSumFactory')
    self._ranges = metric_value_ranges

  def create(self, local_unfinalized_metrics_type):
    who = 'SecureSumFactory.create'
    member = _member(local_unfinalized_metrics_type, who)
    ranges = fill_in_ranges(
        create_default_secure_sum_quantization_ranges(member),
        self._ranges, who)
    specs_flat = tf.nest.flatten(member)
    groups = collections.OrderedDict()  # key -> (range, leaf indices)
    for index, (spec, (lower, upper)) in enumerate(
        zip(specs_flat, _flat_ranges(ranges, member))):
      key = factory_key(lower, upper, spec.dtype)
      groups.setdefault(key, ((lower, upper), []))[1].append(index)
    processes = collections.OrderedDict()
    for key, ((lower, upper), indices) in groups.items():
      processes[key] = aggregators.SecureSumFactory(upper, lower).create(
          [specs_flat[i] for i in indices])

    def by_group(value):
      flat = tf.nest.flatten(value)
      return collections.OrderedDict(
          (key, [flat[i] for i in indices])
          for key, (_, indices) in groups.items())

    grouped_type = collections.OrderedDict(
        (key, [specs_flat[i] for i in indices])
        for key, (_, indices) in groups.items())
    group_tf = specs.tf_computation(by_group, member)

    def ungroup(grouped):
      flat = [None] * len(specs_flat)
      for key, (_, indices) in groups.items():
        for i, value in zip(indices, grouped[key]):
          flat[i] = value
      return tf.nest.pack_sequence_as(member, flat)

    ungroup_tf = specs.tf_computation(ungroup, grouped_type)

    @computations.federated_computation()
    def init_fn():
      return intrinsics.federated_zip(collections.OrderedDict(
          (key, process.initialize()) for key, process in processes.items()))

    @computations.federated_computation(
        measured.result_type(init_fn), ft.clients(member))
    def next_fn(state, unfinalized_metrics):
      grouped = intrinsics.federated_map(group_tf, unfinalized_metrics)
      outputs = collections.OrderedDict(
          (key, process.next(state[key], grouped[key]))
          for key, process in processes.items())
      summed = intrinsics.federated_zip(collections.OrderedDict(
          (key, output.result) for key, output in outputs.items()))
      return measured.MeasuredProcessOutput(
          state=intrinsics.federated_zip(collections.OrderedDict(
              (key, output.state) for key, output in outputs.items())),
          result=intrinsics.federated_map(ungroup_tf, summed),
          measurements=intrinsics.federated_zip(collections.OrderedDict(
              (key, output.measurements) for key, output in outputs.items())))

    return aggregation_process.AggregationProcess(init_fn, next_fn)
