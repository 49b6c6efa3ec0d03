"""TensorFlow Federated's `PrivateQuantileEstimationProcess`: an estimate of a
quantile of the clients' values (update norms), moved once per round.

Each client reports whether its value is at most the estimate C, centred
(+-1/2), with a weight of 1; the server averages the reports to the fraction
f below C and moves C geometrically toward the target quantile q (Andrew et
al. 2021, "Differentially Private Learning with Adaptive Clipping"):

    C <- C * exp(-learning_rate * (clip(f, 0, 1) - q))

`no_noise` adds no noise to the fraction (it is not private): the same
estimator as TFF's `no_noise` (tensorflow_privacy's
`NoPrivacyQuantileEstimatorQuery` with geometric updates), whose `report`
gives `multiplier * C + increment`. `GaussianQuantileQuery` is the private
one (tensorflow_privacy's `QuantileEstimatorQuery`, geometric updates): the
summed reports get N(0, stddev**2) at the server, drawn statelessly from a
secret seed and the round kept in its state, and are divided by the
expected number of clients (distributed DP's adaptive clip).
"""

import collections
import dataclasses
import numbers
from typing import NamedTuple

import tensorflow as tf

from canonical.aggregators import factory
from canonical.aggregators import secure
from canonical.aggregators import sum_factory
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import specs
from canonical.core import types as ft
from canonical import errors
from canonical.templates import estimation_process
from encoders.core import seeds
from encoders.stages import clipping

F32 = tf.TensorSpec([], tf.float32)


class QuantileEstimatorState(NamedTuple):
  """The estimator's state, with tensorflow_privacy's field names."""
  current_estimate: object
  target_quantile: object
  learning_rate: object
  below_estimate_state: object


@dataclasses.dataclass(frozen=True)
class NoNoiseQuantileQuery:
  """What the estimator does, as `PrivateQuantileEstimationProcess` takes it
  (the part of tensorflow_privacy's `NoPrivacyQuantileEstimatorQuery` that is
  used here)."""
  initial_estimate: float
  target_quantile: float
  learning_rate: float
  geometric_update: bool = True

  def initial_state(self):
    return QuantileEstimatorState(
        tf.constant(self.initial_estimate, tf.float32),
        tf.constant(self.target_quantile, tf.float32),
        tf.constant(self.learning_rate, tf.float32), ())

  @staticmethod
  def record(estimate, value):
    """A client's report: (at most the estimate, centred; its weight)."""
    below = tf.cast(value <= estimate, tf.float32) - 0.5
    return below, tf.constant(1.0, tf.float32)

  def update(self, total, state):
    """The state moved by the summed reports."""
    below_sum, weight_sum = total
    below = below_sum / weight_sum + 0.5
    below = tf.minimum(1.0, tf.maximum(0.0, below))
    if self.geometric_update:
      estimate = clipping.geometric_quantile_step(
          state.current_estimate, below, state.target_quantile,
          state.learning_rate)
    else:
      estimate = state.current_estimate - state.learning_rate * (
          below - state.target_quantile)
    return state._replace(current_estimate=estimate)


@dataclasses.dataclass(frozen=True)
class GaussianQuantileQuery:
  """The private estimator: each client reports +-1/2 (no weight), the
  server noises the sum at `below_estimate_stddev` and divides it by
  `expected_num_records`. `seed` keys the noise with the round (kept in
  `below_estimate_state`)."""
  initial_estimate: float
  target_quantile: float
  learning_rate: float
  below_estimate_stddev: float
  expected_num_records: float
  seed: int

  def initial_state(self):
    return QuantileEstimatorState(
        tf.constant(self.initial_estimate, tf.float32),
        tf.constant(self.target_quantile, tf.float32),
        tf.constant(self.learning_rate, tf.float32),
        collections.OrderedDict(
            stddev=tf.constant(self.below_estimate_stddev, tf.float32),
            denominator=tf.constant(self.expected_num_records, tf.float32),
            noise_round=tf.constant(0, tf.int64)))

  @staticmethod
  def record(estimate, value):
    return tf.cast(value <= estimate, tf.float32) - 0.5

  def update(self, total, state):
    count = state.below_estimate_state
    noised = clipping.add_gaussian_noise(
        total, count['stddev'],
        seeds.fold_in(seeds.initial_seed(self.seed), count['noise_round']))
    below = tf.clip_by_value(noised / count['denominator'] + 0.5, 0.0, 1.0)
    estimate = clipping.geometric_quantile_step(
        state.current_estimate, below, state.target_quantile,
        state.learning_rate)
    return state._replace(
        current_estimate=estimate,
        below_estimate_state=collections.OrderedDict(
            count, noise_round=count['noise_round'] + 1))


def _number(value, name, where, low, high, low_open, high_open=True):
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    raise errors.InvalidTypeError(
        f'{where}: {name} must be a float, got {value!r}.')
  value = float(value)
  above = value > low if low_open else value >= low
  below = value < high if high_open else value <= high
  if not (above and below):
    raise errors.InvalidValueError(
        f'{where}: {name} must be in {"(" if low_open else "["}{low}, '
        f'{high}{")" if high_open else "]"}, got {value!r}.')
  return value


class PrivateQuantileEstimationProcess(estimation_process.EstimationProcess):
  """TFF's `PrivateQuantileEstimationProcess(quantile_estimator_query,
  record_aggregation_factory=None)`: `next(state, value@CLIENTS)` takes one
  float32 per client, `report(state)` gives the estimate at SERVER. The
  reports are summed by `record_aggregation_factory` (`SumFactory` by
  default)."""

  @classmethod
  def no_noise(cls, initial_estimate, target_quantile, learning_rate,
               multiplier=1.0, increment=0.0, secure_estimation=False):
    """The estimator of C at quantile `target_quantile`, reporting
    `multiplier * C + increment`; with `secure_estimation` the reports go
    through `SecureSumFactory(1.0)`."""
    where = 'PrivateQuantileEstimationProcess.no_noise'
    inf = float('inf')
    query = NoNoiseQuantileQuery(
        _number(initial_estimate, 'initial_estimate', where, 0.0, inf, True),
        _number(target_quantile, 'target_quantile', where, 0.0, 1.0, False,
                high_open=False),
        _number(learning_rate, 'learning_rate', where, 0.0, inf, True))
    multiplier = _number(multiplier, 'multiplier', where, 0.0, inf, True)
    increment = _number(increment, 'increment', where, 0.0, inf, False)
    if not isinstance(secure_estimation, bool):
      raise errors.InvalidTypeError(
          f'{where}: secure_estimation must be a bool, got '
          f'{secure_estimation!r}.')
    if secure_estimation:
      # Reports are +-1/2 with weight 1: all within [-1, 1].
      record_factory = secure.SecureSumFactory(1.0)
    else:
      record_factory = sum_factory.SumFactory()
    quantile = cls(query, record_factory)
    if multiplier == 1.0 and increment == 0.0:
      return quantile
    return quantile.map(_affine(multiplier, increment))

  def __init__(self, quantile_estimator_query,
               record_aggregation_factory=None):
    where = 'PrivateQuantileEstimationProcess'
    if not isinstance(quantile_estimator_query,
                      (NoNoiseQuantileQuery, GaussianQuantileQuery)):
      raise errors.InvalidTypeError(
          f'{where}: quantile_estimator_query must be what no_noise makes '
          'or a GaussianQuantileQuery (tensorflow_privacy queries do not '
          'lower to pure pieces), got '
          f'{type(quantile_estimator_query).__name__}; use '
          'PrivateQuantileEstimationProcess.no_noise(...).')
    if record_aggregation_factory is None:
      record_aggregation_factory = sum_factory.SumFactory()
    factory.check_factory(record_aggregation_factory,
                          (factory.UnweightedAggregationFactory,), where,
                          'record_aggregation_factory')
    query = quantile_estimator_query
    self.query = query
    initial_state = specs.tf_computation(query.initial_state)
    state_spec = specs.plain(initial_state.result_spec)
    estimate_of = specs.tf_computation(lambda state: state.current_estimate,
                                       state_spec)
    record = specs.tf_computation(query.record, F32, F32)
    record_process = record_aggregation_factory.create(
        specs.plain(record.result_spec))
    update = specs.tf_computation(query.update, record_process.result_type,
                                  state_spec)

    @computations.federated_computation()
    def init_fn():
      return intrinsics.federated_zip((
          intrinsics.federated_eval(initial_state, ft.SERVER),
          record_process.initialize()))

    @computations.federated_computation(init_fn.type_signature.result,
                                        ft.clients(F32))
    def next_fn(state, value):
      query_state, record_state = state
      estimate = intrinsics.federated_broadcast(
          intrinsics.federated_map(estimate_of, query_state))
      reports = intrinsics.federated_map(record, (estimate, value))
      output = record_process.next(record_state, reports)
      new_query_state = intrinsics.federated_map(
          update, (output.result, query_state))
      return intrinsics.federated_zip((new_query_state, output.state))

    report_fn = computations.federated_computation(
        lambda state: state[0].current_estimate,
        init_fn.type_signature.result)
    super().__init__(init_fn, next_fn, report_fn)


def _affine(multiplier, increment):
  """The federated map of C to `multiplier * C + increment` at SERVER."""
  transform = specs.tf_computation(lambda c: multiplier * c + increment, F32)
  return computations.federated_computation(
      lambda estimate: intrinsics.federated_map(transform, estimate),
      ft.server(F32))
