"""TensorFlow Federated's `DiscretizationFactory`: float values scaled and
rounded to int32 before an inner aggregation, unscaled after it.

Each client multiplies its value by the scale factor s and rounds it to
the integer grid: to the nearest integer, or stochastically (x rounds up
with probability x - floor(x), so the rounding is unbiased). Conditional
stochastic rounding (`beta` > 0, Kairouz, Liu and Steinke 2021, section
4.1) redraws while the rounded vector's norm exceeds
`inflated_l2_norm_bound` of the prior norm bound (or of the value's own
norm), trading a little bias for a smaller norm. The server divides the
inner sum by s and casts back to the value's dtypes.

The rounding's randomness is pure: a stateless draw seeded by a secret
(drawn at `create()`, or the `seed` given), the round number kept in the
state, and a hash of every bit of the client's value (`client_seed`), so
clients with different values round independently and a round replays.
TFF seeds it from a timestamp. State `OrderedDict(scale_factor,
prior_norm_bound, inner_agg_process, round_number)` (TFF's, and our round
counter); measurements `OrderedDict(discretize=<inner's>)`.
"""

import collections
import numbers
import secrets

import tensorflow as tf

from canonical.aggregators import factory
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import specs
from canonical.core import types as ft
from canonical import errors
from canonical.templates import aggregation_process
from canonical.templates import measured
from encoders.core import seeds

OUTPUT_DTYPE = tf.int32
F32 = tf.TensorSpec([], tf.float32)
ROUND_SPEC = tf.TensorSpec([], tf.int64)
# Redraws of a conditional rounding before the client fails.
MAX_TRIES = 1000


def value_hash(value):
  """An int64 hash of every byte of every tensor of `value` (the encoders'
  `seeds.fingerprint` samples at most 4,096 elements: two clients differing
  elsewhere would round alike)."""
  parts = [tf.io.serialize_tensor(x) for x in tf.nest.flatten(value)]
  return tf.strings.to_hash_bucket_fast(
      tf.strings.reduce_join(tf.stack(parts)), 2**63 - 1)


def client_seed(secret, round_number, value):
  """A client's `[2]` seed: the secret, the round and its value's bits
  (there is no client index to fold in: clients with equal values draw
  equally)."""
  return seeds.fold_in(seeds.fold_in(seeds.initial_seed(secret),
                                     round_number), value_hash(value))


def inflated_l2_norm_bound(l2_norm_bound, gamma, beta, dim):
  """A bound on the L2 norm of a vector of norm at most `l2_norm_bound`
  and `dim` coordinates once each is stochastically rounded to the grid
  of step `gamma` (Theorem 1 of arXiv:2102.06387): `norm + gamma sqrt(dim)`
  always, and with `beta` > 0 (conditional rounding) also
  sqrt(norm^2 + gamma^2 dim / 4 + sqrt(2 log(1/beta)) gamma (norm +
  gamma sqrt(dim) / 2)), whichever is smaller. Computed in float32 (`dim`
  in float64) as TFF does, so the numbers are TFF's; returns float32."""
  norm = tf.cast(l2_norm_bound, tf.float32)
  gamma = tf.cast(gamma, tf.float32)
  spread = tf.cast(tf.sqrt(tf.cast(dim, tf.float64)) *
                   tf.cast(gamma, tf.float64), tf.float32)
  beta = tf.cast(beta, tf.float32)
  always = norm + spread
  with_beta = tf.sqrt(
      tf.square(norm) + 0.25 * tf.square(spread) +
      tf.sqrt(2.0 * tf.math.log(1.0 / beta)) * gamma * (norm + 0.5 * spread))
  with_beta = tf.where(tf.equal(beta, 0.0), always, with_beta)
  return tf.minimum(always, with_beta)


def stochastic_round(x, scaled_bound, scale, beta, seed):
  """`x` (float32, already scaled) rounded up with probability its
  fractional part, from `seed`; with `beta` > 0 (a Python float) redrawn
  until its norm is within the inflated bound of `scaled_bound` (0: of
  x's own norm), failing the client after `MAX_TRIES` draws."""
  floor = tf.floor(x)
  fraction = x - floor

  def draw(attempt):
    uniform = tf.random.stateless_uniform(
        tf.shape(x), seeds.fold_in(seed, attempt), alg=seeds.ALGORITHM)
    return floor + tf.cast(uniform < fraction, x.dtype)

  if not beta:
    return draw(0)
  bound = tf.where(scaled_bound > 0, scaled_bound, tf.norm(x))
  threshold = inflated_l2_norm_bound(bound / scale, 1.0 / scale, beta,
                                     tf.size(x)) * scale
  attempts, rounded = tf.while_loop(
      lambda attempt, rounded: (tf.norm(rounded) > threshold) &
      (attempt < MAX_TRIES),
      lambda attempt, rounded: (attempt + 1, draw(attempt + 1)),
      (tf.constant(0, tf.int64), draw(0)))
  del attempts
  check = tf.debugging.assert_less_equal(
      tf.norm(rounded), threshold,
      message=f'DiscretizationFactory: conditional stochastic rounding '
      f'(beta={beta}) failed {MAX_TRIES} times; set beta to 0.')
  with tf.control_dependencies([check]):
    return tf.identity(rounded)


def _discretize(value, scale, prior_norm_bound, seed, stochastic, beta):
  def tensor(x, index):
    scaled = tf.cast(x, tf.float32) * scale
    if stochastic:
      rounded = stochastic_round(scaled, prior_norm_bound * scale, scale,
                                 beta, seeds.fold_in(seed, index))
    else:
      rounded = tf.round(scaled)
    return tf.cast(rounded, OUTPUT_DTYPE)

  flat = tf.nest.flatten(value)
  return tf.nest.pack_sequence_as(
      value, [tensor(x, i) for i, x in enumerate(flat)])


def _number(value, name, where):
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    raise errors.InvalidValueError(
        f'{where}: {name} must be a number, got {value!r}.')
  return float(value)


class DiscretizationFactory(factory.UnweightedAggregationFactory):
  """TFF's `DiscretizationFactory(inner_agg_factory, scale_factor=1.0,
  stochastic=False, beta=0.0, prior_norm_bound=None)`; `seed` (ours) fixes
  the stochastic rounding's secret."""

  def __init__(self, inner_agg_factory, scale_factor=1.0, stochastic=False,
               beta=0.0, prior_norm_bound=None, *, seed=None):
    where = 'DiscretizationFactory'
    self._inner = factory.check_factory(
        inner_agg_factory, (factory.UnweightedAggregationFactory,), where,
        'inner_agg_factory')
    scale_factor = _number(scale_factor, 'scale_factor', where)
    if not scale_factor > 0:
      raise errors.InvalidValueError(
          f'{where}: scale_factor must be positive, got {scale_factor!r}.')
    if not isinstance(stochastic, bool):
      raise errors.InvalidValueError(
          f'{where}: stochastic must be a bool, got {stochastic!r}.')
    beta = _number(beta, 'beta', where)
    if not 0 <= beta < 1:
      raise errors.InvalidValueError(
          f'{where}: beta must be in [0, 1), got {beta!r}.')
    if prior_norm_bound is not None and not (
        _number(prior_norm_bound, 'prior_norm_bound', where) > 0):
      raise errors.InvalidValueError(
          f'{where}: prior_norm_bound, if given, must be positive, got '
          f'{prior_norm_bound!r}.')
    self._scale_factor = scale_factor
    self._stochastic = stochastic
    self._beta = beta
    self._prior_norm_bound = float(prior_norm_bound or 0.0)  # 0: none.
    self._seed = seeds.check_seed(where, seed)

  def create(self, value_type):
    where = 'DiscretizationFactory.create'
    value_type = factory.float_value_type(value_type, where)
    if self._prior_norm_bound and tf.nest.is_nested(value_type):
      raise errors.InvalidTypeError(
          f'{where}: with a prior_norm_bound, value_type must be one tensor, '
          f'got {ft.describe(value_type)}.')
    secret = secrets.randbits(63) if self._seed is None else self._seed
    stochastic, beta = self._stochastic, self._beta

    def discretize(value, scale, prior_norm_bound, round_number):
      seed = client_seed(secret, round_number, value)
      return _discretize(value, scale, prior_norm_bound, seed, stochastic,
                         beta)

    client_discretize = specs.tf_computation(discretize, value_type, F32, F32,
                                             ROUND_SPEC)
    inner = self._inner.create(specs.plain(client_discretize.result_spec))
    undiscretize = specs.tf_computation(
        lambda total, scale: tf.nest.map_structure(
            lambda x, s: tf.cast(tf.cast(x, tf.float32) / scale, s.dtype),
            total, value_type),
        specs.plain(client_discretize.result_spec), F32)
    constants = specs.tf_computation(lambda: (
        tf.constant(self._scale_factor, tf.float32),
        tf.constant(self._prior_norm_bound, tf.float32),
        tf.constant(0, tf.int64)))
    add_one = specs.tf_computation(lambda n: n + 1, ROUND_SPEC)

    @computations.federated_computation()
    def init_fn():
      scale, prior, round_number = intrinsics.federated_eval(constants,
                                                             ft.SERVER)
      return intrinsics.federated_zip(collections.OrderedDict(
          scale_factor=scale, prior_norm_bound=prior,
          inner_agg_process=inner.initialize(), round_number=round_number))

    @computations.federated_computation(init_fn.type_signature.result,
                                        ft.clients(value_type))
    def next_fn(state, value):
      scale, prior = state['scale_factor'], state['prior_norm_bound']
      round_number = state['round_number']
      discretized = intrinsics.federated_map(client_discretize, (
          value, intrinsics.federated_broadcast(scale),
          intrinsics.federated_broadcast(prior),
          intrinsics.federated_broadcast(round_number)))
      output = inner.next(state['inner_agg_process'], discretized)
      result = intrinsics.federated_map(undiscretize, (output.result, scale))
      new_state = collections.OrderedDict(
          scale_factor=scale, prior_norm_bound=prior,
          inner_agg_process=output.state,
          round_number=intrinsics.federated_map(add_one, round_number))
      return measured.MeasuredProcessOutput(
          intrinsics.federated_zip(new_state), result,
          intrinsics.federated_zip(collections.OrderedDict(
              discretize=output.measurements)))

    return aggregation_process.AggregationProcess(init_fn, next_fn)
