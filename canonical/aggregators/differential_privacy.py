"""TensorFlow Federated's `DifferentiallyPrivateFactory`: DP-FedAvg's Gaussian
mean, with a fixed or an adaptive clip (`gaussian_fixed`, `gaussian_adaptive`),
and DP-FTRL's tree-noised mean (`tree_aggregation`, `tree_adaptive`; the tree
and its query are in `tree_aggregation.py`).

Each client clips its whole value (every tensor together) to L2 norm C; an
inner factory (`SumFactory` by default) sums the clipped records; the server
adds N(0, (z C)^2) to each coordinate of the sum once and divides by the
public expected number of clients E. Adaptive clipping (Andrew et al. 2021)
also has each client report whether its norm was at most C, centred (+-1/2,
sensitivity 1/2); the server noises that sum at stddev `clipped_count_stddev`
(default E / 20), estimates the unclipped fraction f and moves C to
`C * exp(-learning_rate * (clip(f, 0, 1) - target))`. As in TFF, the
`noise_multiplier` given is the round's total: the value's own multiplier is
raised so that, composed with the count's, the round's is the one asked for.
These are the maths of TFF's tensorflow_privacy queries
(`GaussianSumQuery`, `QuantileAdaptiveClipSumQuery`, `NormalizedQuery`),
written here in pure TensorFlow.

Noise is drawn statelessly from a secret seed drawn when a process is created
(or the `seed` / `noise_seed` given, for tests) and the round number kept in
the state (a tree keeps its seed and its round in the state), so the noise
is baked into a compiled form: keep saved forms and states as private as the
data. Research-grade privacy, not audited (see `encoders.stages.clipping`).
"""

import collections
import dataclasses
import math
import numbers
import secrets
import warnings

import tensorflow as tf

from canonical.aggregators import factory
from canonical.aggregators import sum_factory
from canonical.aggregators import tree_aggregation
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import ir
from canonical.core import specs
from canonical.core import types as ft
from canonical import errors
from canonical.core import privacy_releases
from canonical.templates import aggregation_process
from canonical.templates import measured
from encoders.core import seeds
from encoders.stages import basic
from encoders.stages import clipping


def adaptive_clip_noise_params(noise_multiplier, expected_clients_per_round,
                               clipped_count_stddev=None):
  """TFF's rule: `(value_noise_multiplier, clipped_count_stddev)` for an
  adaptive clip whose round has total multiplier `noise_multiplier`.

  The centred count has sensitivity 1/2, so its multiplier is
  2 * clipped_count_stddev; composed with the value's, the round's is
  `(z_value**-2 + (2 stddev)**-2)**-0.5 = noise_multiplier`.
  """
  if noise_multiplier > 0.0:
    if clipped_count_stddev is None:
      clipped_count_stddev = 0.05 * expected_clients_per_round
    if noise_multiplier >= 2 * clipped_count_stddev:
      raise errors.InvalidValueError(
          f'clipped_count_stddev = {clipped_count_stddev} (by default 0.05 * '
          'clients_per_round) is too low for the total noise_multiplier '
          f'{noise_multiplier}: raise clipped_count_stddev or lower '
          'noise_multiplier.')
    value_noise_multiplier = privacy_releases.remaining_noise_multiplier(
        noise_multiplier, 2 * clipped_count_stddev)
    if value_noise_multiplier / noise_multiplier >= 2:
      warnings.warn(
          f'The value noise multiplier is {value_noise_multiplier:.3g}, '
          f'{value_noise_multiplier / noise_multiplier:.2f}x the total '
          f'{noise_multiplier}: raise clipped_count_stddev or the expected '
          'clients per round.')
  else:
    if clipped_count_stddev is None:
      clipped_count_stddev = 0.0
    value_noise_multiplier = 0.0
  return value_noise_multiplier, clipped_count_stddev


@dataclasses.dataclass(frozen=True)
class GaussianQuery:
  """What a DifferentiallyPrivateFactory does (its `gaussian_*` make one):
  clip C, the value's noise multiplier, the denominator E, and for an
  adaptive clip its quantile estimator."""
  initial_clip: float
  value_noise_multiplier: float
  denominator: float
  adaptive: bool = False
  target_unclipped_quantile: float = 0.5
  learning_rate: float = 0.2
  clipped_count_stddev: float = 0.0
  seed: int | None = None

  @property
  def round_noise_multiplier(self):
    """The round's for accounting: the value's, with an adaptive clip's
    count (sensitivity 1/2, so multiplier 2 * its stddev) composed in."""
    if not self.adaptive:
      return self.value_noise_multiplier
    return privacy_releases.combined_noise_multiplier(
        [self.value_noise_multiplier, 2 * self.clipped_count_stddev])

  def releases(self, source):
    return [privacy_releases.Release(source, self.round_noise_multiplier)]

  def initial_state(self, noise_seed=None):
    del noise_seed  # Its noise is keyed by the factory's round instead.
    clip = tf.constant(self.initial_clip, tf.float32)
    stddev = clip * self.value_noise_multiplier
    denominator = tf.constant(self.denominator, tf.float32)
    sum_state = collections.OrderedDict(l2_norm_clip=clip, stddev=stddev)
    if not self.adaptive:
      return collections.OrderedDict(numerator_state=sum_state,
                                     denominator=denominator)
    below_estimate_state = collections.OrderedDict(
        numerator_state=collections.OrderedDict(
            l2_norm_clip=tf.constant(0.5),
            stddev=tf.constant(self.clipped_count_stddev, tf.float32)),
        denominator=denominator)
    return collections.OrderedDict(
        numerator_state=collections.OrderedDict(
            noise_multiplier=tf.constant(self.value_noise_multiplier,
                                         tf.float32),
            sum_state=sum_state,
            quantile_estimator_state=collections.OrderedDict(
                current_estimate=clip,
                target_quantile=tf.constant(self.target_unclipped_quantile,
                                            tf.float32),
                learning_rate=tf.constant(self.learning_rate, tf.float32),
                below_estimate_state=below_estimate_state)),
        denominator=denominator)

  def sum_state(self, state):
    numerator = state['numerator_state']
    return numerator['sum_state'] if self.adaptive else numerator

  def record_params(self, state):
    return self.sum_state(state)['l2_norm_clip']

  def record(self, clip, value):
    """A client's record: its value clipped to L2 norm `clip` (and, when
    adaptive, whether it was at most `clip`, centred)."""
    clipped, norm = basic.clip_by_global_l2_norm(value, clip)
    if not self.adaptive:
      return clipped
    below = tf.cast(norm <= tf.cast(clip, norm.dtype), tf.float32)
    return clipped, below - 0.5

  def noised_result(self, total, state, noise_seed, round_number):
    """(mean, new query state, its metrics) from the summed records."""
    round_seed = seeds.fold_in(seeds.initial_seed(noise_seed), round_number)
    if self.adaptive:
      total, below_sum = total
    sum_state = self.sum_state(state)
    flat = tf.nest.flatten(total)
    noised = [clipping.add_gaussian_noise(x, sum_state['stddev'],
                                          seeds.fold_in(round_seed, i))
              for i, x in enumerate(flat)]
    denominator = state['denominator']
    mean = tf.nest.pack_sequence_as(
        total, [x / tf.cast(denominator, x.dtype) for x in noised])
    if not self.adaptive:
      return mean, state, collections.OrderedDict()
    numerator = state['numerator_state']
    estimator = numerator['quantile_estimator_state']
    below_state = estimator['below_estimate_state']
    noised_below = clipping.add_gaussian_noise(
        below_sum, below_state['numerator_state']['stddev'],
        seeds.fold_in(round_seed, len(flat)))
    below = noised_below / below_state['denominator'] + 0.5
    below = tf.minimum(1.0, tf.maximum(0.0, below))
    new_clip = tf.maximum(clipping.geometric_quantile_step(
        estimator['current_estimate'], below, estimator['target_quantile'],
        estimator['learning_rate']), 0.0)
    new_numerator = collections.OrderedDict(
        noise_multiplier=numerator['noise_multiplier'],
        sum_state=collections.OrderedDict(
            l2_norm_clip=new_clip,
            stddev=new_clip * numerator['noise_multiplier']),
        quantile_estimator_state=collections.OrderedDict(
            estimator, current_estimate=new_clip))
    new_state = collections.OrderedDict(numerator_state=new_numerator,
                                        denominator=denominator)
    return mean, new_state, collections.OrderedDict(clip=new_clip)


def _number(value, name, where, positive):
  if isinstance(value, bool) or not isinstance(value, numbers.Real) or (
      not math.isfinite(value)):
    raise errors.InvalidTypeError(
        f'{where}: {name} must be a float, got {value!r}.')
  value = float(value)
  if value < 0 or (positive and value == 0):
    raise errors.InvalidValueError(
        f'{where}: {name} must be {"positive" if positive else "nonnegative"}'
        f', got {value!r}.')
  return value


def _adaptive_arguments(where, noise_multiplier, clients_per_round,
                        initial_clip, quantile, learning_rate,
                        learning_rate_name, clipped_count_stddev):
  """An adaptive clip's arguments, checked, with the value's noise
  multiplier and the count's stddev that make the round's total."""
  noise_multiplier = _number(noise_multiplier, 'noise_multiplier', where,
                             False)
  clients_per_round = _number(clients_per_round, 'clients_per_round', where,
                              True)
  initial_clip = _number(initial_clip, 'initial_l2_norm_clip', where, True)
  quantile = _number(quantile, 'target_unclipped_quantile', where, False)
  if quantile > 1:
    raise errors.InvalidValueError(
        f'{where}: target_unclipped_quantile must be in [0, 1], got '
        f'{quantile!r}.')
  learning_rate = _number(learning_rate, learning_rate_name, where, False)
  if clipped_count_stddev is not None:
    clipped_count_stddev = _number(clipped_count_stddev,
                                   'clipped_count_stddev', where, False)
  try:
    value_noise, count_stddev = adaptive_clip_noise_params(
        noise_multiplier, clients_per_round, clipped_count_stddev)
  except errors.InvalidValueError as e:
    raise errors.InvalidValueError(f'{where}: {e}') from None
  return (noise_multiplier, clients_per_round, initial_clip, quantile,
          learning_rate, value_noise, count_stddev)


def _whole(value, name, where):
  if isinstance(value, bool) or not isinstance(value, numbers.Integral):
    raise errors.InvalidTypeError(
        f'{where}: {name} must be an int, got {value!r}.')
  return int(value)


def _flag(value, name, where):
  if not isinstance(value, (bool, int)):
    raise errors.InvalidTypeError(
        f'{where}: {name} must be a bool, got {value!r}.')
  return bool(value)


def _record_specs(record_specs, where):
  """A structure of fully defined tf.TensorSpecs (TFF's `record_specs`)."""
  leaves = tf.nest.flatten(record_specs)
  if not leaves or not all(isinstance(s, tf.TensorSpec) and
                           s.shape.is_fully_defined() for s in leaves):
    raise errors.InvalidTypeError(
        f'{where}: record_specs must be a structure of tf.TensorSpecs of '
        f'known shapes (the values\' specs), got {record_specs!r}.')
  return specs.plain(record_specs)


class DifferentiallyPrivateFactory(factory.UnweightedAggregationFactory):
  """TFF's `DifferentiallyPrivateFactory(query, record_aggregation_factory=
  None)`: an unweighted mean with differential privacy; make one with
  `gaussian_fixed`, `gaussian_adaptive`, `tree_aggregation` or
  `tree_adaptive`.

  State `OrderedDict(query_state=<the query's state>, agg_state=<inner's>,
  noise_round=int64)` (a tree keys its noise by its own state and counts
  its restarts by `noise_round`);
  measurements `OrderedDict(dp_query_metrics=..., dp=<inner's>)`, whose
  metrics are TFF's: none (gaussian_fixed), `clip` (gaussian_adaptive, the
  next round's), `tree_agg_dpftrl_clip` (tree_aggregation), `current_clip`
  and `estimate_clip` (tree_adaptive, after the round's restart if any).
  `noise_multiplier` (the round's total), `value_noise_multiplier` and
  `clipped_count_stddev` are attributes.
  """

  @classmethod
  def gaussian_fixed(cls, noise_multiplier, clients_per_round, clip, *,
                     seed=None):
    """Clip to `clip`, noise z = `noise_multiplier`, divide by
    `clients_per_round`. `seed` (not in TFF) fixes the noise, for tests."""
    where = 'DifferentiallyPrivateFactory.gaussian_fixed'
    noise_multiplier = _number(noise_multiplier, 'noise_multiplier', where,
                               False)
    query = GaussianQuery(
        initial_clip=_number(clip, 'clip', where, True),
        value_noise_multiplier=noise_multiplier,
        denominator=_number(clients_per_round, 'clients_per_round', where,
                            True),
        seed=seeds.check_seed(where, seed))
    made = cls(query)
    made.noise_multiplier = noise_multiplier
    return made

  @classmethod
  def gaussian_adaptive(cls, noise_multiplier, clients_per_round,
                        initial_l2_norm_clip=0.1,
                        target_unclipped_quantile=0.5, learning_rate=0.2,
                        clipped_count_stddev=None, *, seed=None):
    """An adaptive clip from `initial_l2_norm_clip` toward the
    `target_unclipped_quantile` of the norms; `noise_multiplier` is the
    round's total (value and count together)."""
    where = 'DifferentiallyPrivateFactory.gaussian_adaptive'
    adaptive = _adaptive_arguments(
        where, noise_multiplier, clients_per_round, initial_l2_norm_clip,
        target_unclipped_quantile, learning_rate, 'learning_rate',
        clipped_count_stddev)
    (noise_multiplier, clients_per_round, initial_clip, quantile,
     learning_rate, value_noise, count_stddev) = adaptive
    query = GaussianQuery(
        initial_clip=initial_clip, value_noise_multiplier=value_noise,
        denominator=clients_per_round, adaptive=True,
        target_unclipped_quantile=quantile, learning_rate=learning_rate,
        clipped_count_stddev=count_stddev,
        seed=seeds.check_seed(where, seed))
    made = cls(query)
    made.noise_multiplier = noise_multiplier
    return made

  @classmethod
  def tree_aggregation(cls, noise_multiplier, clients_per_round,
                       l2_norm_clip, record_specs, noise_seed=None,
                       use_efficient=True, record_aggregation_factory=None):
    """DP-FTRL's mean: clip to `l2_norm_clip`, add the tree's residual noise
    (node stddev `l2_norm_clip * noise_multiplier`, Honaker's estimate if
    `use_efficient`) to the sum, divide by `clients_per_round`. The tree
    never restarts. `record_specs`: the tf.TensorSpecs of the values."""
    where = 'DifferentiallyPrivateFactory.tree_aggregation'
    noise_multiplier = _number(noise_multiplier, 'noise_multiplier', where,
                               False)
    query = tree_aggregation.TreeQuery(
        initial_clip=_number(l2_norm_clip, 'l2_norm_clip', where, True),
        value_noise_multiplier=noise_multiplier,
        denominator=_number(clients_per_round, 'clients_per_round', where,
                            True),
        record_specs=_record_specs(record_specs, where),
        use_efficient=_flag(use_efficient, 'use_efficient', where),
        seed=seeds.check_seed(where, noise_seed))
    return cls(query, record_aggregation_factory)

  @classmethod
  def tree_adaptive(cls, noise_multiplier, clients_per_round, record_specs,
                    initial_l2_norm_clip=0.1, restart_warmup=128,
                    restart_frequency=1024, target_unclipped_quantile=0.5,
                    clip_learning_rate=0.2, clipped_count_stddev=None,
                    noise_seed=None):
    """DP-FTRL with an adaptive clip: the count of records at most the clip
    estimate is tree-noised too (stddev `clipped_count_stddev`, by default
    `clients_per_round / 20` even without value noise, as in TFF), and the
    estimate becomes the clip when both trees restart: after
    `restart_warmup` rounds (None: `restart_frequency`), then every
    `restart_frequency`. `noise_multiplier` is the total, count included."""
    where = 'DifferentiallyPrivateFactory.tree_adaptive'
    if clipped_count_stddev is None:  # TFF's, even without value noise.
      clipped_count_stddev = _number(
          clients_per_round, 'clients_per_round', where, True) / 20
    adaptive = _adaptive_arguments(
        where, noise_multiplier, clients_per_round, initial_l2_norm_clip,
        target_unclipped_quantile, clip_learning_rate, 'clip_learning_rate',
        clipped_count_stddev)
    (noise_multiplier, clients_per_round, initial_clip, quantile,
     learning_rate, value_noise, count_stddev) = adaptive
    frequency = _whole(restart_frequency, 'restart_frequency', where)
    if frequency < 1:
      raise errors.InvalidValueError(
          f'{where}: restart_frequency must be at least 1, got {frequency}.')
    warmup = 0 if restart_warmup is None else _whole(
        restart_warmup, 'restart_warmup', where)
    if restart_warmup is not None and not 0 < warmup < frequency:
      raise errors.InvalidValueError(
          f'{where}: restart_warmup must be None or between 1 and '
          f'restart_frequency - 1 = {frequency - 1}, got {warmup}.')
    query = tree_aggregation.TreeQuery(
        initial_clip=initial_clip, value_noise_multiplier=value_noise,
        denominator=clients_per_round,
        record_specs=_record_specs(record_specs, where), adaptive=True,
        restart_warmup=warmup, restart_frequency=frequency,
        target_unclipped_quantile=quantile, learning_rate=learning_rate,
        clipped_count_stddev=count_stddev,
        seed=seeds.check_seed(where, noise_seed))
    made = cls(query)
    made.noise_multiplier = noise_multiplier
    return made

  def __init__(self, query, record_aggregation_factory=None):
    where = 'DifferentiallyPrivateFactory'
    if not isinstance(query, (GaussianQuery, tree_aggregation.TreeQuery)):
      raise errors.InvalidTypeError(
          f'{where}: query must be what gaussian_fixed, gaussian_adaptive, '
          'tree_aggregation or tree_adaptive makes (tensorflow_privacy '
          f'queries do not lower to pure pieces), got {type(query).__name__}.')
    if record_aggregation_factory is None:
      record_aggregation_factory = sum_factory.SumFactory()
    self._record_factory = factory.check_factory(
        record_aggregation_factory, (factory.UnweightedAggregationFactory,),
        where, 'record_aggregation_factory')
    self._query = query
    self.noise_multiplier = query.round_noise_multiplier
    self.value_noise_multiplier = query.value_noise_multiplier
    self.clipped_count_stddev = query.clipped_count_stddev

  def create(self, value_type):
    value_type = factory.float_value_type(
        value_type, 'DifferentiallyPrivateFactory.create')
    query = self._query
    noise_seed = secrets.randbits(63) if query.seed is None else query.seed
    initial_query_state = specs.tf_computation(
        lambda: query.initial_state(noise_seed))
    query_state_spec = specs.plain(initial_query_state.result_spec)
    clip_of = specs.tf_computation(query.record_params, query_state_spec)
    record = specs.tf_computation(query.record,
                                  specs.plain(clip_of.result_spec),
                                  value_type)
    record_process = self._record_factory.create(
        specs.plain(record.result_spec))

    def noised(total, state, round_number):
      mean, new_state, metrics = query.noised_result(total, state, noise_seed,
                                                     round_number)
      return mean, new_state, metrics, round_number + 1

    finish = specs.tf_computation(noised, record_process.result_type,
                                  query_state_spec,
                                  tf.TensorSpec([], tf.int64))

    @computations.federated_computation()
    def init_fn():
      return intrinsics.federated_zip(collections.OrderedDict(
          query_state=intrinsics.federated_eval(initial_query_state,
                                                ft.SERVER),
          agg_state=record_process.initialize(),
          noise_round=intrinsics.federated_value(
              tf.constant(0, tf.int64), ft.SERVER)))

    @computations.federated_computation(init_fn.type_signature.result,
                                        ft.clients(value_type))
    def next_fn(state, value):
      clip = intrinsics.federated_broadcast(
          intrinsics.federated_map(clip_of, state['query_state']))
      records = intrinsics.federated_map(record, (clip, value))
      output = record_process.next(state['agg_state'], records)
      mean, query_state, metrics, noise_round = intrinsics.federated_map(
          finish, (output.result, state['query_state'], state['noise_round']))
      for release in query.releases('DifferentiallyPrivateFactory'):
        ir.note(mean, release)
      new_state = collections.OrderedDict(
          query_state=query_state, agg_state=output.state,
          noise_round=noise_round)
      measurements = collections.OrderedDict(dp_query_metrics=metrics,
                                             dp=output.measurements)
      return measured.MeasuredProcessOutput(
          intrinsics.federated_zip(new_state), mean,
          intrinsics.federated_zip(measurements))

    return aggregation_process.AggregationProcess(init_fn, next_fn)
