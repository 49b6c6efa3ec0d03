"""TensorFlow Federated's `DistributedDpSumFactory`: a sum with distributed
differential privacy, each client adding its own discrete noise before a
secure sum, so that no party (server or aggregator) sees a client's value
or a sum without noise (Kairouz, Liu and Steinke 2021, arXiv:2102.06387;
Agarwal, Kairouz and Liu 2021, arXiv:2110.04995).

TFF's pipeline, outermost first, from this package's factories:

| step                      | client                         | server         |
| concat_factory            | tensors -> one vector          | split back     |
| Hadamard / DFT rotation   | rotate (spreads the mass)      | rotate back    |
| clipping_factory          | L2 clip to C (adaptive: the    | -              |
|                           | clip count through secure sums)|                |
| DiscretizationFactory     | x s, stochastic rounding       | / s            |
| local_noise               | check norms; the runtime adds  | wrap into      |
|                           | the client's own noise, sums   | [-2**(b-1),    |
|                           | mod 2**b under masks           |  2**(b-1))     |

The scale s is TFF's heuristic (the noisy sum of n clients stays within b
bits with probability 1 - modclip_prob, at most 1e6); the bounds checked
before noising are TFF's inflated L2 bound of the rounded vector and, for
Skellam, its L1 bound, all in integer units. With `auto_l2_clip`, C follows
the clients' norms (Andrew et al. 2021, geometric steps) from a count
summed securely and noised at the server (`quantile_estimation`'s
`GaussianQuantileQuery`), and every parameter above is recomputed from the
new C, as TFF does.

Where we differ from TFF, and why:
- The innermost sum is `federated_secure_modular_sum` mod 2**b, not TFF's
  `SecureSumFactory(2**b - 1, 0)`: that exact sum of values in [0, 2**b)
  tells the server, per coordinate, how many clients' noised values were
  negative; the modular sum reveals only what the DP analysis assumes.
- The noise is not drawn in the client's work (TFF's), where it would be
  a function of the form's seeds and the client's value, which a server
  holding the form could recompute and subtract: the secure sum carries
  the mechanism and the round's stddev, and the runtime's secure-sum client
  draws the noise from its own secret just before it masks
  (`canonical.secagg.client_noise`). Runs with noise are therefore not
  reproducible from `seed`; without noise they are. TFF's two modular
  clippings around its secure sum are one wrap here (the noise is added
  after them, the same modulo 2**b).
- Other randomness is pure (TFF draws from timestamps): the rotation and
  the stochastic rounding are stateless draws seeded by secrets drawn at
  `create()` (or from `seed`), the round number kept in the state and a
  hash of every bit of the client's own value (the runtime has no client
  index to fold in). They need no secrecy: the privacy analysis holds for
  any rounded value within the bounds. Research grade, not audited.
- State: our factories' layout, with round counters (`round_number`,
  `noise_round`) where TFF keeps its DP event; Hadamard padding is our
  rotation's (TFF's own formula under-counts at 8192 elements).

Measurements are TFF's: `OrderedDict(l2_clip, scale_factor,
scaled_inflated_l2, scaled_local_stddev, actual_num_clients, padded_dim,
dp_query_metrics)`. Each round notes a `privacy_releases.Release`
(mechanism 'distributed_dgauss' or 'distributed_skellam', its central noise
multiplier sqrt(n) * local stddev / inflated L2 bound at the initial clip)
and, with `auto_l2_clip`, a Gaussian release for the clip count.
"""

import collections
import math
import numbers
import random
import secrets
import warnings

import numpy as np
import tensorflow as tf

from canonical.aggregators import concat
from canonical.aggregators import differential_privacy
from canonical.aggregators import discretization
from canonical.aggregators import factory
from canonical.aggregators import local_noise
from canonical.aggregators import quantile_estimation
from canonical.aggregators import robust
from canonical.aggregators import rotation
from canonical.aggregators import secure
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import ir
from canonical.core import privacy_releases
from canonical.core import secure_sum_rules
from canonical.core import specs
from canonical.core import types as ft
from canonical import errors
from canonical.templates import aggregation_process
from canonical.templates import measured
from encoders.core import seeds

DP_MECHANISMS = secure_sum_rules.NOISE_MECHANISMS
ROTATION_TYPES = ('hd', 'dft')
# TFF's cap: larger scales overflow int32 norm bounds and gain no accuracy.
MAX_SCALE_FACTOR = 1e6
# Added to the inflated bound so float32 error never fails the norm check.
NORM_LEEWAY = 1e-5
F32 = tf.TensorSpec([], tf.float32)
_WHERE = 'DistributedDpSumFactory'


def clip_prob_to_num_stddevs(clip_prob):
  """k with P(|N(0, 1)| > k) = clip_prob: sqrt(2) erfcinv(p), erfcinv in
  float32 as TFF computes it."""
  with tf.init_scope():
    return math.sqrt(2) * float(
        tf.math.erfcinv(tf.constant(clip_prob, tf.float32)).numpy())


def heuristic_scale_factor(local_stddev, l2_clip, bits, num_clients, dim,
                           k_stddevs, rho=1.0):
  """TFF's scale s (float64): k stddevs of the noisy rounded sum, taken as
  subgaussian, fill the b bits: 2**b = 2k sqrt(rho/d (C n)**2 +
  (1/(4 s**2) + sigma**2) n) s, solved for s. `local_stddev` and `l2_clip`
  enter rounded to float32, as TFF's do; the rest exactly."""
  in_float32 = lambda x: tf.cast(tf.cast(x, tf.float32), tf.float64)
  exact = lambda x: tf.constant(x, tf.float64)
  sigma, clip = in_float32(local_stddev), in_float32(l2_clip)
  n, k = exact(float(num_clients)), exact(float(k_stddevs))
  room = tf.sqrt(2.0**(2.0 * exact(float(bits))) - n * k**2)
  spread = 2.0 * k * tf.sqrt(rho / exact(float(dim)) * clip**2 * n**2 +
                             n * sigma**2)
  return room / spread


def _scaled_l1(scaled_l2, padded_dim):
  """L1 <= sqrt(d) L2, and L1 <= L2**2 for integer vectors."""
  return math.ceil(scaled_l2 * min(math.sqrt(padded_dim), scaled_l2))


# --- TFF's argument checks, by name ---------------------------------------

def _scalar(value, name):
  if isinstance(value, (bool, np.bool_)) or not isinstance(
      value, numbers.Real):
    raise errors.InvalidTypeError(
        f'{_WHERE}: {name} must be a scalar, got {value!r}.')


def _positive(value, name):
  _scalar(value, name)
  if not value > 0:
    raise errors.InvalidValueError(
        f'{_WHERE}: {name} must be positive, got {value!r}.')


def _nonnegative(value, name):
  _scalar(value, name)
  if not value >= 0:
    raise errors.InvalidValueError(
        f'{_WHERE}: {name} must be nonnegative, got {value!r}.')


def _integer(value, name):
  _scalar(value, name)
  if not isinstance(value, numbers.Integral):
    raise errors.InvalidTypeError(
        f'{_WHERE}: {name} must be an integer, got {value!r}.')


def _in_range(value, name, low, high, low_closed, high_closed):
  _scalar(value, name)
  above = value >= low if low_closed else value > low
  below = value <= high if high_closed else value < high
  if not (above and below):
    raise errors.InvalidValueError(
        f'{_WHERE}: {name} must be in {"[" if low_closed else "("}{low}, '
        f'{high}{"]" if high_closed else ")"}, got {value!r}.')


def _one_of(value, name, options):
  if not isinstance(value, str):
    raise errors.InvalidTypeError(
        f'{_WHERE}: {name} must be a string, one of {list(options)}, got '
        f'{value!r}.')
  if value not in options:
    raise errors.InvalidValueError(
        f'{_WHERE}: {name} must be one of {list(options)}, got {value!r}.')


def _bool(value, name):
  if not isinstance(value, bool):
    raise errors.InvalidTypeError(
        f'{_WHERE}: {name} must be a bool, got {value!r}.')


class DistributedDpSumFactory(factory.UnweightedAggregationFactory):
  """TFF's `DistributedDpSumFactory(noise_multiplier,
  expected_clients_per_round, bits, l2_clip, modclip_prob=1e-4, beta=0.0,
  mechanism='distributed_skellam', rotation_type='dft', auto_l2_clip=False,
  auto_l2_target_quantile=0.5, auto_l2_lr=0.2,
  auto_l2_clip_count_stddev=None)`, not exported by TFF 0.87's
  `tff.aggregators` (ours is). `seed` (ours) fixes every secret, for tests.
  Integer or float values, kept in their structure and dtypes."""

  def __init__(self, noise_multiplier, expected_clients_per_round, bits,
               l2_clip, modclip_prob=1e-4, beta=0.0,
               mechanism='distributed_skellam', rotation_type='dft',
               auto_l2_clip=False, auto_l2_target_quantile=0.5,
               auto_l2_lr=0.2, auto_l2_clip_count_stddev=None, *,
               seed=None):
    _nonnegative(noise_multiplier, 'noise_multiplier')
    _positive(expected_clients_per_round, 'expected_clients_per_round')
    _integer(expected_clients_per_round, 'expected_clients_per_round')
    # float32 holds integers up to 2**24 only: at most 22 bits.
    _in_range(bits, 'bits', 1, 22, True, True)
    _integer(bits, 'bits')
    _positive(l2_clip, 'l2_clip')
    _in_range(modclip_prob, 'modclip_prob', 0, 1, False, False)
    _in_range(beta, 'beta', 0.0, 1.0, True, False)
    _one_of(mechanism, 'mechanism', DP_MECHANISMS)
    _one_of(rotation_type, 'rotation_type', ROTATION_TYPES)
    _bool(auto_l2_clip, 'auto_l2_clip')
    if beta > 0:
      warnings.warn(
          f'{_WHERE}: beta {beta} > 0 makes the rounding conditional, which '
          'has been seen to loop forever in low precision (TF Lite); set '
          'beta to 0 to avoid it.')
    if auto_l2_clip:
      _in_range(auto_l2_target_quantile, 'auto_l2_target_quantile', 0, 1,
                True, True)
      _positive(auto_l2_lr, 'auto_l2_lr')
      if auto_l2_clip_count_stddev is not None:
        _nonnegative(auto_l2_clip_count_stddev, 'auto_l2_clip_count_stddev')
    self._seed = seeds.check_seed(_WHERE, seed)
    n, bits = int(expected_clients_per_round), int(bits)
    self._k_stddevs = clip_prob_to_num_stddevs(float(modclip_prob))
    if bits < math.log2(n):
      raise errors.InvalidValueError(
          f'{_WHERE}: bits must be at least log2(expected_clients_per_round)'
          f', got 2**{bits} < {n}.')
    if 2**(2 * bits) < n * self._k_stddevs**2:
      raise errors.InvalidValueError(
          f'{_WHERE}: bits={bits} is too few for expected_clients_per_round='
          f'{n} and modclip_prob={modclip_prob}: raise bits or modclip_prob, '
          'or lower expected_clients_per_round.')
    self._noise_multiplier = float(noise_multiplier)
    self._num_clients, self._bits = n, bits
    self._initial_l2_clip = float(l2_clip)
    self._beta = float(beta)
    self._mechanism, self._rotation_type = mechanism, rotation_type
    self._auto_l2_clip = auto_l2_clip
    self._clip_count_stddev = 0.0
    self._value_noise_mult = self._noise_multiplier
    if auto_l2_clip:
      try:
        self._value_noise_mult, self._clip_count_stddev = (
            differential_privacy.adaptive_clip_noise_params(
                self._noise_multiplier, n, auto_l2_clip_count_stddev))
      except errors.InvalidValueError as e:
        raise errors.InvalidValueError(
            f'{_WHERE}: auto_l2_clip_count_stddev (by default 0.05 * '
            f'expected_clients_per_round) is too low: {e}') from None
      self._target_quantile = float(auto_l2_target_quantile)
      self._learning_rate = float(auto_l2_lr)

  # The parameters, from the clip: at create() in float64 as TFF (Python),
  # then after every round in float32 as TFF (a tf_computation).

  def _parameters(self, padded_dim):
    """`(scale, scaled_inflated_l2, scaled_l1, scaled_local_stddev)`."""
    clip = self._initial_l2_clip
    local_stddev = self._value_noise_mult * clip / math.sqrt(
        self._num_clients)
    with tf.init_scope():
      scale = float(heuristic_scale_factor(
          local_stddev, clip, self._bits, self._num_clients, padded_dim,
          self._k_stddevs).numpy())
      scale = min(scale, MAX_SCALE_FACTOR)
      if scale <= 1:
        warnings.warn(
            f'{_WHERE}: the scale factor {scale} <= 1 may cause large '
            f'rounding errors; raise bits (now {self._bits}) or lower '
            f'expected_clients_per_round (now {self._num_clients}).')
      inflated = float(discretization.inflated_l2_norm_bound(
          clip, 1.0 / scale, self._beta, padded_dim).numpy())
    scaled_l2 = (inflated + NORM_LEEWAY) * scale
    return (scale, scaled_l2, _scaled_l1(scaled_l2, padded_dim),
            local_stddev * scale)

  def _retuned(self, state, new_clip, padded_dim):
    """`state` with the discretization's and the noise's parameters
    recomputed from `new_clip`, in float32 as TFF's autotuning."""
    clip_state, rotation_seed = state
    discrete = clip_state['inner_agg']
    noise = discrete['inner_agg_process']
    local_stddev = new_clip * self._value_noise_mult / math.sqrt(
        self._num_clients)
    scale = tf.cast(tf.minimum(heuristic_scale_factor(
        local_stddev, new_clip, self._bits, self._num_clients, padded_dim,
        self._k_stddevs), tf.constant(MAX_SCALE_FACTOR, tf.float64)),
                    tf.float32)
    inflated = discretization.inflated_l2_norm_bound(
        new_clip, 1.0 / scale, self._beta, padded_dim)
    scaled_l2 = (inflated + NORM_LEEWAY) * scale
    query = collections.OrderedDict(noise['query_state'])
    if 'l1_norm_bound' in query:
      query['l1_norm_bound'] = tf.cast(tf.math.ceil(scaled_l2 * tf.minimum(
          math.sqrt(padded_dim), scaled_l2)), tf.int32)
    query['l2_norm_bound'] = scaled_l2
    query['local_stddev'] = local_stddev * scale
    noise = collections.OrderedDict(noise, query_state=query)
    discrete = collections.OrderedDict(
        discrete, scale_factor=scale, prior_norm_bound=new_clip,
        inner_agg_process=noise)
    return (collections.OrderedDict(clip_state, inner_agg=discrete),
            rotation_seed)

  def _nested_factory(self, scale, scaled_l2, scaled_l1, local_stddev,
                      secret_of):
    """`(TFF's composition, the clip's estimator or None)`, built
    innermost first."""
    bits = self._bits
    nested = local_noise.LocalNoiseFactory(
        self._mechanism, scaled_l1, scaled_l2, local_stddev, bits)
    nested = discretization.DiscretizationFactory(
        nested, scale, stochastic=True, beta=self._beta,
        prior_norm_bound=self._initial_l2_clip, seed=secret_of(0))
    estimator = None
    if self._auto_l2_clip:
      estimator = quantile_estimation.PrivateQuantileEstimationProcess(
          quantile_estimation.GaussianQuantileQuery(
              self._initial_l2_clip, self._target_quantile,
              self._learning_rate, self._clip_count_stddev,
              self._num_clients, secret_of(1)),
          secure.SecureSumFactory(0.5, -0.5))
    norm = self._initial_l2_clip if estimator is None else estimator
    nested = robust.clipping_factory(
        norm, nested, clipped_count_sum_factory=secure.SecureSumFactory(
            upper_bound_threshold=1, lower_bound_threshold=0))
    rotate = (rotation.HadamardTransformFactory
              if self._rotation_type == 'hd' else
              rotation.DiscreteFourierTransformFactory)
    nested = rotate(nested, seed=secret_of(2))
    return concat.concat_factory(nested), estimator

  def _release(self, scaled_l2, scaled_l1, local_stddev, padded_dim):
    n = self._num_clients
    parameters = dict(local_stddev=local_stddev, l2_sensitivity=scaled_l2,
                      dimension=padded_dim, clients=n)
    if self._mechanism == 'distributed_skellam':
      parameters['l1_sensitivity'] = scaled_l1
    return privacy_releases.Release(
        _WHERE, math.sqrt(n) * local_stddev / scaled_l2,
        mechanism=self._mechanism, parameters=parameters)

  def create(self, value_type):
    where = f'{_WHERE}.create'
    value_type = factory.value_type_of(value_type, where)
    dtypes = [s.dtype for s in tf.nest.flatten(value_type)]
    if not (all(d.is_floating for d in dtypes) or
            all(d.is_integer for d in dtypes)):
      raise errors.InvalidTypeError(
          f'{where}: the tensors of value_type must be all integers or all '
          f'floats, got {ft.describe(value_type)}.')
    dim = max(1, sum(s.shape.num_elements()
                     for s in tf.nest.flatten(value_type)))
    padded_dim = (rotation.padded_power_of_two(dim)
                  if self._rotation_type == 'hd' else dim + dim % 2)
    scale, scaled_l2, scaled_l1, local_stddev = self._parameters(padded_dim)
    if self._seed is None:
      secret_of = lambda i: secrets.randbits(62)
    else:
      derived = random.Random(self._seed)
      secret_list = [derived.getrandbits(62) for _ in range(3)]
      secret_of = secret_list.__getitem__
    nested, estimator = self._nested_factory(
        scale, scaled_l2, scaled_l1, local_stddev, secret_of)
    process = nested.create(value_type)
    release = self._release(scaled_l2, scaled_l1, local_stddev, padded_dim)
    state_spec = process.state_type.member
    retune = specs.tf_computation(
        lambda state, clip: self._retuned(state, clip, padded_dim),
        state_spec, F32)
    padded = specs.tf_computation(
        lambda: tf.constant(padded_dim, tf.int32))
    rotation_type, auto = self._rotation_type, self._auto_l2_clip
    count_release = privacy_releases.Release(
        f'{_WHERE} (clip count)', 2 * self._clip_count_stddev)

    @computations.federated_computation(process.initialize.type_signature
                                        .result, ft.clients(value_type))
    def next_fn(state, value):
      output = process.next(state, value)
      clip_state = output.state[0]
      discrete = clip_state['inner_agg']
      query = discrete['inner_agg_process']['query_state']
      clip_measurements = output.measurements[rotation_type]
      measurements = collections.OrderedDict(
          l2_clip=clip_measurements['clipping_norm'],
          scale_factor=discrete['scale_factor'],
          scaled_inflated_l2=query['l2_norm_bound'],
          scaled_local_stddev=query['local_stddev'],
          actual_num_clients=intrinsics.federated_secure_sum_bitwidth(
              intrinsics.federated_value(1, ft.CLIENTS), 1),
          padded_dim=intrinsics.federated_eval(padded, ft.SERVER),
          dp_query_metrics=clip_measurements['clipping']['discretize'][
              'dp_query_metrics'])
      new_state = output.state
      if auto:
        new_clip = estimator.report(clip_state['clipping_norm'])
        new_state = intrinsics.federated_map(retune, (new_state, new_clip))
        ir.note(new_state, count_release)
      ir.note(output.result, release)
      return measured.MeasuredProcessOutput(
          new_state, output.result, intrinsics.federated_zip(measurements))

    return aggregation_process.AggregationProcess(process.initialize,
                                                  next_fn)
