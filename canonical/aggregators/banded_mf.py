"""Banded matrix-factorization DP-FTRL (Choquette-Choo et al. 2023), which
TFF never shipped: a mean whose noise is correlated across rounds so that
the noisy prefix sums of the rounds' updates (what FTRL's model is) err
less than independent noise of the same privacy would make them.

Each client clips its value to L2 norm `l2_norm_clip`; the inner factory
sums the clipped records; the server adds w_t, round t's entry of C^-1 z,
for z ~ N(0, (z_mult * clip)^2) per round and C the b-banded Toeplitz
strategy (`canonical.privacy.banded`): w_t = (z_t - sum_k c_k w_(t-k)) / c_0,
so the state keeps the last b - 1 noises. It divides by
`clients_per_round`. That is the release C x + z, decoded.

Privacy: with cyclic sampling (`beam_runner.run(sampling='cyclic')`), a
client comes back every g >= b rounds, C's columns never overlap, and a run
is a Gaussian mechanism of multiplier z_mult / sqrt(rounds per client); the
runtime accounts any sampling from the form's `banded` release
(`canonical.privacy.correlated`). Noise is drawn statelessly from a secret
seed drawn at `create()` (or `noise_seed`) and the round: keep saved forms
as private as the data.
"""

import collections
import math
import numbers
import secrets

import tensorflow as tf

from canonical import errors
from canonical.aggregators import factory
from canonical.aggregators import sum_factory
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import ir
from canonical.core import privacy_releases
from canonical.core import specs
from canonical.core import types as ft
from canonical.privacy import banded
from canonical.templates import aggregation_process
from canonical.templates import measured
from encoders.core import seeds
from encoders.stages import basic
from encoders.stages import clipping

_WHERE = 'BandedMatrixFactorizationFactory'


def _positive(value, name, allow_zero=False):
  if isinstance(value, bool) or not isinstance(value, numbers.Real) or (
      not math.isfinite(value)):
    raise errors.InvalidTypeError(
        f'{_WHERE}: {name} must be a finite number, got {value!r}.')
  if value < 0 or (value == 0 and not allow_zero):
    raise errors.InvalidValueError(
        f'{_WHERE}: {name} must be {"nonnegative" if allow_zero else "positive"}'
        f', got {value!r}.')
  return float(value)


def _count(value, name):
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or (
      value < 1):
    raise errors.InvalidValueError(
        f'{_WHERE}: {name} must be an int >= 1, got {value!r}.')
  return int(value)


class BandedMatrixFactorizationFactory(factory.UnweightedAggregationFactory):
  """`BandedMatrixFactorizationFactory(noise_multiplier, clients_per_round,
  l2_norm_clip, bands, rounds, strategy='optimized', noise_seed=None,
  record_aggregation_factory=None)`: an unweighted mean with banded-MF
  noise. `rounds` is the run's planned length, which the `optimized`
  strategy is fitted to (`sqrt` needs none); `bands=1` is DP-SGD's
  independent noise. The strategy is `coefficients`.

  State `OrderedDict(noise_round=int64, history=<the last bands - 1
  noises, newest first>, agg_state=<inner's>)`; measurements
  `OrderedDict(dp=<inner's>)`.
  """

  def __init__(self, noise_multiplier, clients_per_round, l2_norm_clip, bands,
               rounds, strategy='optimized', noise_seed=None,
               record_aggregation_factory=None):
    self.noise_multiplier = _positive(noise_multiplier, 'noise_multiplier',
                                      allow_zero=True)
    self._denominator = _positive(clients_per_round, 'clients_per_round')
    self._clip = _positive(l2_norm_clip, 'l2_norm_clip')
    self.bands = _count(bands, 'bands')
    self.rounds = _count(rounds, 'rounds')
    if strategy not in banded.STRATEGIES:
      raise errors.InvalidValueError(
          f'{_WHERE}: strategy must be one of {banded.STRATEGIES}, got '
          f'{strategy!r}.')
    if self.bands > self.rounds:
      raise errors.InvalidValueError(
          f'{_WHERE}: bands ({bands}) must be at most rounds ({rounds}).')
    self._seed = seeds.check_seed(_WHERE, noise_seed)
    self.coefficients = tuple(float(c) for c in banded.coefficients(
        strategy, self.bands, self.rounds))
    if record_aggregation_factory is None:
      record_aggregation_factory = sum_factory.SumFactory()
    self._record_factory = factory.check_factory(
        record_aggregation_factory, (factory.UnweightedAggregationFactory,),
        _WHERE, 'record_aggregation_factory')

  def create(self, value_type):
    value_type = factory.float_value_type(value_type, f'{_WHERE}.create')
    noise_seed = secrets.randbits(63) if self._seed is None else self._seed
    c = self.coefficients
    stddev = self.noise_multiplier * self._clip
    clip, denominator = self._clip, self._denominator

    def zeros():
      return tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype),
                                   value_type)

    def initial():
      return collections.OrderedDict(
          noise_round=tf.constant(0, tf.int64),
          history=tuple(zeros() for _ in c[1:]))

    initial_state = specs.tf_computation(initial)
    noise_state_spec = specs.plain(initial_state.result_spec)
    record = specs.tf_computation(
        lambda value: basic.clip_by_global_l2_norm(value, clip)[0],
        value_type)
    record_process = self._record_factory.create(
        specs.plain(record.result_spec))

    def noised(total, state):
      round_seed = seeds.fold_in(seeds.initial_seed(noise_seed),
                                 state['noise_round'])
      flat = tf.nest.flatten(total)
      history = [tf.nest.flatten(h) for h in state['history']]
      noise = []
      for i, x in enumerate(flat):
        z = clipping.add_gaussian_noise(tf.zeros_like(x), stddev,
                                        seeds.fold_in(round_seed, i))
        for k, past in enumerate(history, start=1):
          z -= c[k] * past[i]
        noise.append(z / c[0])
      mean = tf.nest.pack_sequence_as(
          total, [(x + w) / denominator for x, w in zip(flat, noise)])
      newest = tf.nest.pack_sequence_as(total, noise)
      new_state = collections.OrderedDict(
          noise_round=state['noise_round'] + 1,
          history=((newest,) + tuple(state['history']))[:len(c) - 1])
      return mean, new_state

    finish = specs.tf_computation(noised, record_process.result_type,
                                  noise_state_spec)
    release = privacy_releases.Release(
        _WHERE, self.noise_multiplier, 'banded', coefficients=c)

    @computations.federated_computation()
    def init_fn():
      noise_state = intrinsics.federated_eval(initial_state, ft.SERVER)
      return intrinsics.federated_zip(collections.OrderedDict(
          noise_round=noise_state['noise_round'],
          history=noise_state['history'],
          agg_state=record_process.initialize()))

    @computations.federated_computation(init_fn.type_signature.result,
                                        ft.clients(value_type))
    def next_fn(state, value):
      records = intrinsics.federated_map(record, value)
      output = record_process.next(state['agg_state'], records)
      noise_state = intrinsics.federated_zip(collections.OrderedDict(
          noise_round=state['noise_round'], history=state['history']))
      mean, new_noise_state = intrinsics.federated_map(
          finish, (output.result, noise_state))
      ir.note(mean, release)
      new_state = collections.OrderedDict(
          noise_round=new_noise_state['noise_round'],
          history=new_noise_state['history'], agg_state=output.state)
      return measured.MeasuredProcessOutput(
          intrinsics.federated_zip(new_state), mean,
          intrinsics.federated_zip(collections.OrderedDict(
              dp=output.measurements)))

    return aggregation_process.AggregationProcess(init_fn, next_fn)
