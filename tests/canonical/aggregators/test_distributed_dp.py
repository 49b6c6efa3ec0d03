"""Distributed DP (`DistributedDpSumFactory`,
`tff.learning.ddp_secure_aggregator`): TFF 0.87's argument checks and
measurements, a sum that is the true sum up to rounding without noise and
has the noise's variance with it, noise already in every client's
secure-sum input, the release the form carries, and the aggregator inside
TFF's unweighted FedAvg on the compiled path."""

import collections
import copy
import math

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff
from canonical.aggregators import discretization
from canonical.aggregators import modular_clipping
from canonical.core import privacy_releases
from canonical.core import secure_sum_rules
from canonical.executors import compiled
from canonical import secagg
from canonical.secagg import sums as secure_sums

import aggregator_rounds
from tff_087_examples import client_data
from tff_087_examples import model_fn

Factory = tff.aggregators.DistributedDpSumFactory
F = np.float32


def _od(**kwargs):
  return collections.OrderedDict(kwargs)


def _measurements(factory, value_type, clients, rounds=1):
  process = factory.create(value_type)
  state, outputs = process.initialize(), []
  for _ in range(rounds):
    output = process.next(state, clients)
    state = output.state
    outputs.append(output)
  return outputs


# ----------------------------------------------------------------------------
# TFF 0.87's argument checks, each naming its argument


@pytest.mark.parametrize('kwargs, error, message', [
    (dict(noise_multiplier=-1.0), ValueError,
     'noise_multiplier must be nonnegative'),
    (dict(noise_multiplier=True), TypeError, 'noise_multiplier must be a '
     'scalar'),
    (dict(expected_clients_per_round=0), ValueError,
     'expected_clients_per_round must be positive'),
    (dict(expected_clients_per_round=2.5), TypeError,
     'expected_clients_per_round must be an integer'),
    (dict(bits=23), ValueError, r'bits must be in \[1, 22\]'),
    (dict(bits=8.0), TypeError, 'bits must be an integer'),
    (dict(l2_clip=0.0), ValueError, 'l2_clip must be positive'),
    (dict(modclip_prob=1.0), ValueError, r'modclip_prob must be in \(0, 1\)'),
    (dict(beta=1.0), ValueError, r'beta must be in \[0.0, 1.0\)'),
    (dict(mechanism='gaussian'), ValueError, 'mechanism must be one of'),
    (dict(mechanism=1), TypeError, 'mechanism must be a string'),
    (dict(rotation_type='random'), ValueError, 'rotation_type must be one of'),
    (dict(auto_l2_clip=1), TypeError, 'auto_l2_clip must be a bool'),
    (dict(auto_l2_clip=True, auto_l2_target_quantile=1.5), ValueError,
     r'auto_l2_target_quantile must be in \[0, 1\]'),
    (dict(auto_l2_clip=True, auto_l2_lr=0.0), ValueError,
     'auto_l2_lr must be positive'),
    (dict(auto_l2_clip=True, auto_l2_clip_count_stddev=-1.0), ValueError,
     'auto_l2_clip_count_stddev must be nonnegative'),
    (dict(auto_l2_clip=True, noise_multiplier=1.0,
          expected_clients_per_round=10), ValueError,
     'auto_l2_clip_count_stddev .* is too low'),
    (dict(bits=3, expected_clients_per_round=10), ValueError,
     r'bits must be at least log2\(expected_clients_per_round\)'),
    (dict(bits=3, expected_clients_per_round=8), ValueError,
     'bits=3 is too few for expected_clients_per_round=8'),
])
def test_arguments_are_checked_by_name(kwargs, error, message):
  arguments = dict(noise_multiplier=0.5, expected_clients_per_round=10,
                   bits=16, l2_clip=1.0)
  arguments.update(kwargs)
  with pytest.raises(error, match=f'DistributedDpSumFactory: {message}'):
    Factory(**arguments)


def test_value_types_are_checked_by_name():
  mixed = tff.StructWithPythonType([tff.TensorType(np.float32, [2]),
                                    tff.TensorType(np.int32, [2])], list)
  with pytest.raises(TypeError, match='all integers or all floats'):
    Factory(0.5, 10, 16, 1.0).create(mixed)
  with pytest.raises(TypeError, match='must be unplaced'):
    Factory(0.5, 10, 16, 1.0).create(tff.type_at_clients(np.float32))


# ----------------------------------------------------------------------------
# Measurements: TFF 0.87's numbers. Each was printed by TFF 0.87
# (/work/peers/venv-tff/bin/python, tff.backends.test.
# set_sync_test_cpp_execution_context()) for
#   distributed_dp.DistributedDpSumFactory(<the arguments>).create(<type>)
# and `process.next(state, clients)` on the clients below, printing
# `output.measurements` each round.

V10 = tff.TensorType(np.float32, [10])
C10 = [np.full([10], 0.1 * (i + 1), F) for i in range(3)]
V7 = tff.StructWithPythonType([tff.TensorType(np.float32, [3]),
                               tff.TensorType(np.float32, [2, 2])], list)
C7 = [[np.array([0.01, 0.02, 0.03], F) * (i + 1), np.full([2, 2], 0.01, F)]
      for i in range(3)]
V5 = tff.TensorType(np.float32, [5])
C5 = [np.full([5], v, F) for v in (0.01, 0.02, 0.5, 0.7)]
C5_LOW = [np.full([5], v, F) for v in (0.01, 0.02, 0.03, 0.7)]
V3_INT = tff.TensorType(np.int32, [3])
C3_INT = [np.array([1, 2, 3], np.int32), np.array([-4, 0, 2], np.int32)]

# name: (arguments, value type, clients, per round: (l2_clip, scale_factor,
# scaled_inflated_l2, scaled_local_stddev, actual_num_clients, padded_dim)).
TFF_087 = {
    # DistributedDpSumFactory(1.0, 10, 16, 1.0)
    'skellam_dft': (dict(noise_multiplier=1.0, expected_clients_per_round=10,
                         bits=16, l2_clip=1.0), V10, C10,
                    [(1.0, 2539.439697265625, 2542.62744140625,
                      803.0413818359375, 3, 10)]),
    # DistributedDpSumFactory(0.5, 5, 20, 0.1, beta=math.exp(-0.5),
    #     mechanism='distributed_dgauss', rotation_type='hd')
    'dgauss_hd_beta': (dict(noise_multiplier=0.5,
                            expected_clients_per_round=5, bits=20,
                            l2_clip=0.1, beta=math.exp(-0.5),
                            mechanism='distributed_dgauss',
                            rotation_type='hd'), V7, C7,
                       [(0.10000000149011612, 733529.125, 73360.75,
                         16402.208984375, 3, 8)]),
    # DistributedDpSumFactory(1.0, 100, 20, 0.1,
    #     mechanism='distributed_dgauss', auto_l2_clip=True)
    'dgauss_auto': (dict(noise_multiplier=1.0,
                         expected_clients_per_round=100, bits=20,
                         l2_clip=0.1, mechanism='distributed_dgauss',
                         auto_l2_clip=True), V5, C5,
                    [(0.10000000149011612, 32998.8125, 3302.66064453125,
                      331.6505432128906, 4, 6)]),
    # DistributedDpSumFactory(0.0, 4, 16, 0.1, auto_l2_clip=True), three
    # rounds: 3 of 4 norms below the clip move it by exp(-0.2 * 0.25).
    'auto_clip_moves': (dict(noise_multiplier=0.0,
                             expected_clients_per_round=4, bits=16,
                             l2_clip=0.1, auto_l2_clip=True), V5, C5_LOW,
                        [(0.10000000149011612, 51576.265625,
                          5160.591796875, 0.0, 4, 6),
                         (0.09512294828891754, 54220.63671875,
                          5160.6181640625, 0.0, 4, 6),
                         (0.09048374742269516, 57000.5859375,
                          5160.64599609375, 0.0, 4, 6)]),
    # DistributedDpSumFactory(0.0, 3, 12, 10.0,
    #     mechanism='distributed_dgauss', rotation_type='hd') on int32[3]
    'integers_hd': (dict(noise_multiplier=0.0, expected_clients_per_round=3,
                         bits=12, l2_clip=10.0,
                         mechanism='distributed_dgauss', rotation_type='hd'),
                    V3_INT, C3_INT,
                    [(10.0, 35.09315872192383, 352.93194580078125, 0.0, 2,
                      4)]),
}
KEYS = ('l2_clip', 'scale_factor', 'scaled_inflated_l2',
        'scaled_local_stddev', 'actual_num_clients', 'padded_dim')


@pytest.mark.parametrize('name', sorted(TFF_087))
def test_measurements_are_tff_087s(name):
  arguments, value_type, clients, rounds = TFF_087[name]
  if arguments.get('beta'):
    with pytest.warns(UserWarning, match='makes the rounding conditional'):
      factory = Factory(**arguments, seed=5)
  else:
    factory = Factory(**arguments, seed=5)
  outputs = _measurements(factory, value_type, clients, len(rounds))
  for output, expected in zip(outputs, rounds):
    measurements = output.measurements
    assert list(measurements) == list(KEYS) + ['dp_query_metrics']
    assert measurements['dp_query_metrics'] == collections.OrderedDict()
    got = tuple(np.asarray(measurements[key]).item() for key in KEYS)
    assert got == expected  # float32 for float32, bit for bit.
  if name == 'integers_hd':  # TFF 0.87's sum was [-3, 2, 5] too.
    np.testing.assert_array_equal(outputs[0].result, [-3, 2, 5])
    assert outputs[0].result.dtype == np.int32


# ----------------------------------------------------------------------------
# The sum: true up to rounding without noise, noised as promised with it


@pytest.mark.parametrize('rotation_type', ['dft', 'hd'])
def test_without_noise_the_sum_is_the_true_sum_up_to_rounding(rotation_type):
  output, = _measurements(
      Factory(0.0, 3, 20, 1.0, rotation_type=rotation_type, seed=2), V7, C7)
  scale = float(output.measurements['scale_factor'])
  padded = int(output.measurements['padded_dim'])
  error = np.concatenate([np.ravel(r - sum(c[i] for c in C7))
                          for i, r in enumerate(output.result)])
  # Each client rounds each rotated coordinate by less than 1/scale.
  assert 0 < np.linalg.norm(error) <= 3 * math.sqrt(padded) / scale


def _noise_round(mechanism, n=5, dim=2000):
  rng = np.random.default_rng(7)
  clients = [rng.normal(size=dim).astype(F) * 0.01 for _ in range(n)]
  # A wrap of the modular sum is a 1e-9 chance per coordinate.
  factory = Factory(1.0, n, 20, 1.0, modclip_prob=1e-9, mechanism=mechanism,
                    seed=3)
  output, = _measurements(factory, tff.TensorType(np.float32, [dim]),
                          clients)
  return output, np.sum(clients, axis=0)


def _local_variance(mechanism, stddev):
  """The variance of one client's noise: TFF's discrete Gaussian draws
  at scale ceil(stddev)."""
  stddev = float(stddev)
  return (math.ceil(stddev) if mechanism == 'distributed_dgauss' else
          stddev)**2


@pytest.mark.parametrize('mechanism', ['distributed_skellam',
                                       'distributed_dgauss'])
def test_the_noise_of_the_sum_has_the_clients_variance(mechanism):
  output, true_sum = _noise_round(mechanism)
  m = output.measurements
  scale = float(m['scale_factor'])
  expected = 5 * _local_variance(mechanism, m['scaled_local_stddev']) / (
      scale**2)
  error = output.result - true_sum
  # 2000 coordinates: the sample variance is within ~3% of the true one.
  assert np.var(error) == pytest.approx(expected, rel=0.15)
  assert abs(np.mean(error)) < 4 * math.sqrt(expected / 2000)


def test_the_helpers_wrap_and_bound_as_tffs():
  # TFF's ModularClippingSumFactory docstring example.
  wrapped = modular_clipping.modular_clip_by_value(
      np.array([20, 5, -15, 10], np.int32), -5, 10)
  np.testing.assert_array_equal(wrapped, [5, 5, 0, -5])
  # Rounding to a grid of step 0.5 inflates a norm of 1 in 4 dimensions by
  # at most 0.5 * sqrt(4); conditionally (beta > 0) by less.
  assert float(discretization.inflated_l2_norm_bound(1.0, 0.5, 0.0, 4)) == 2.0
  assert float(discretization.inflated_l2_norm_bound(
      1.0, 0.5, math.exp(-0.5), 4)) < 2.0


# ----------------------------------------------------------------------------
# The form draws no noise: each client's runtime adds its own, from its own
# secret, to its secure-sum input


def _quiet(state):
  """`state` with the clients' noise stddev set to 0: what they would send
  without noise, everything else (scale, seeds, rounding) the same."""
  quiet = copy.deepcopy(state)
  quiet[0]['inner_agg']['inner_agg_process']['query_state'][
      'local_stddev'] = np.float32(0.0)
  return quiet


@pytest.mark.parametrize('mechanism', ['distributed_skellam',
                                       'distributed_dgauss'])
def test_the_form_draws_no_noise_each_clients_runtime_does(mechanism):
  dim, bits = 2000, 20
  # TFF's arguments: the noise no longer depends on the factory's seed.
  process = Factory(1.0, 5, bits, 1.0, mechanism=mechanism).create(
      tff.TensorType(np.float32, [dim]))
  form = tff.compile(aggregator_rounds.as_round(process))
  (modular,) = [i for i, s in enumerate(form.secure_sums)
                if s.kind == secure_sum_rules.MODULAR]
  assert form.secure_sums[modular].noise == mechanism
  state = form.initialize()
  stddev = state[0]['inner_agg']['inner_agg_process']['query_state'][
      'local_stddev']
  assert stddev > 100
  parameters, stddevs = secure_sums.round_parameters(
      form.secure_sums, form.secure_parameters(state))
  assert parameters[modular] == [2**bits] and stddevs[modular] == stddev
  value = np.random.default_rng(8).normal(size=dim).astype(F) * 0.02
  sent = {}
  for name, s in (('noised', state), ('clean', _quiet(state))):
    update, _ = form.work(value, form.prepare(s))
    plain, secure = form.split_update(update)
    # Nothing of the value's size travels in the clear.
    assert all(np.size(x) < dim for x in tf.nest.flatten(plain))
    sent[name] = secure
  # The pieces (which the server holds) send the same value whatever the
  # noise: there is none in them to recompute.
  for noised, clean in zip(tf.nest.flatten(sent['noised']),
                           tf.nest.flatten(sent['clean'])):
    np.testing.assert_array_equal(noised, clean)

  def client_input(secret):
    inputs = secure_sums.client_inputs(
        form.secure_sums, parameters, sent['clean'], 'a client',
        stddevs=stddevs, secret=secagg.SeededRandom(secret))
    return np.asarray(inputs[modular], np.int64)

  clean = np.asarray(sent['clean'][modular], np.int64) % 2**bits
  half = 2**(bits - 1)
  noises = []
  for secret in (b'one client', b'another client'):
    masked_in = client_input(secret)
    assert masked_in.min() >= 0 and masked_in.max() < 2**bits
    noise = (masked_in - clean + half) % 2**bits - half
    assert np.mean(noise == 0) < 0.01  # Every coordinate is noised.
    assert np.var(noise) == pytest.approx(
        _local_variance(mechanism, stddev), rel=0.15)
    noises.append(noise)
  # Two secrets draw independent noises on the same value; one secret
  # draws the same again (a retried step sends the same bytes).
  assert abs(np.corrcoef(noises[0], noises[1])[0, 1]) < 0.1
  np.testing.assert_array_equal(client_input(b'one client'),
                                (clean + noises[0]) % 2**bits)


# ----------------------------------------------------------------------------
# What the form tells the runtime it releases


@pytest.mark.parametrize('mechanism', ['distributed_skellam',
                                       'distributed_dgauss'])
def test_the_form_carries_the_distributed_release(mechanism):
  # TFF 0.87's numbers for these arguments ('dgauss_auto' above).
  factory = Factory(1.0, 100, 20, 0.1, mechanism=mechanism,
                    auto_l2_clip=True, seed=6)
  form = tff.compile(aggregator_rounds.as_round(factory.create(V5)))
  releases = {r.source: r for r in form.privacy_releases}
  assert len(releases) == len(form.privacy_releases) == 2
  assert releases['DistributedDpSumFactory (clip count)'] == (
      privacy_releases.Release('DistributedDpSumFactory (clip count)',
                               10.0))  # 2 * 0.05 * 100.
  value = releases['DistributedDpSumFactory']
  assert value.mechanism == mechanism
  p = value.parameters
  assert p['local_stddev'] == pytest.approx(331.6505432128906, rel=1e-6)
  assert p['l2_sensitivity'] == pytest.approx(3302.66064453125, rel=1e-6)
  assert (p['dimension'], p['clients']) == (6, 100)
  assert value.noise_multiplier == pytest.approx(
      10 * p['local_stddev'] / p['l2_sensitivity'])
  if mechanism == 'distributed_skellam':
    assert p['l1_sensitivity'] == math.ceil(
        p['l2_sensitivity'] * math.sqrt(6))
  else:
    assert 'l1_sensitivity' not in p


# ----------------------------------------------------------------------------
# tff.learning.ddp_secure_aggregator in TFF's unweighted FedAvg


# TFF 0.87 (PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python, the sync test
# C++ context) printed, for build_unweighted_fed_avg(model_fn,
# build_sgdm(learning_rate=0.1), model_aggregator=ddp_secure_aggregator(
# noise_multiplier=0.0, expected_clients_per_round=2, bits=16)) on
# client_data(), per round: the kernel's first row, the bias and the
# aggregator's DDP measurements (l2_clip, scale_factor,
# scaled_inflated_l2) and zeroing_norm. The weights differ from ours by the
# stochastic rounding only (a step of 1/scale ~ 6e-6).
_TFF_DDP_FED_AVG = [
    ([-0.04101280868053436, 0.027683719992637634, 0.013321666046977043],
     [0.04853148013353348, -0.013412201777100563, -0.03512076288461685],
     (0.1, 168447.38, 16850.422), 21.0),
    ([-0.08643656969070435, 0.058653756976127625, 0.027776207774877548],
     [0.10180538892745972, -0.02775520831346512, -0.07405903935432434],
     (0.1105171, 152417.48, 16850.262), 20.099854),
]


def test_ddp_secure_aggregator_in_unweighted_fed_avg_is_tff_087s():
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn, tff.learning.optimizers.build_sgdm(learning_rate=0.1),
      model_aggregator=tff.learning.ddp_secure_aggregator(
          noise_multiplier=0.0, expected_clients_per_round=2, bits=16))
  # TFF's process: its `next` runs the compiled round.
  assert compiled.compiled_round(process.next) is not None
  state, data = process.initialize(), client_data()
  for row, bias, ddp_numbers, zeroing_norm in _TFF_DDP_FED_AVG:
    output = process.next(state, data)
    state = output.state
    kernel, got_bias = process.get_model_weights(state).trainable
    np.testing.assert_allclose(np.asarray(kernel)[0], row, atol=2e-5)
    np.testing.assert_allclose(got_bias, bias, atol=2e-5)
    aggregator = output.metrics['aggregator']
    assert list(aggregator) == ['zeroing', 'zeroing_norm', 'zeroed_count']
    assert aggregator['zeroing_norm'] == pytest.approx(zeroing_norm,
                                                       rel=1e-6)
    assert aggregator['zeroed_count'] == 0
    ddp = aggregator['zeroing']['mean_value']
    assert list(ddp) == list(KEYS) + ['dp_query_metrics']
    got = tuple(float(ddp[k]) for k in KEYS[:3])
    assert got == pytest.approx(ddp_numbers, rel=1e-6)
    assert (ddp['scaled_local_stddev'], ddp['actual_num_clients'],
            ddp['padded_dim']) == (0, 2, 16)
    assert list(aggregator['zeroing']['mean_count']) == [
        'secure_upper_clipped_count', 'secure_lower_clipped_count',
        'secure_upper_threshold', 'secure_lower_threshold']


# Every argument form below is one a real TFF 0.87 accepted: the same calls
# (TFF's DistributedDpSumFactory from tensorflow_federated.python.aggregators.
# distributed_dp) and `create` ran under TFF's sync test context without an
# error (2026-11-30; TFF refuses some forms accepted here, e.g. an int clip).
_F32_3 = tff.TensorType(np.float32, [3])
TFF_ACCEPTS = {
    'an int noise multiplier': lambda: Factory(1, 10, 16, 1.0),
    'numpy clients': lambda: Factory(0.5, np.int64(10), 16, 1.0),
    'a numpy noise multiplier': lambda: Factory(np.float32(0.5), 10, 16, 1.0),
    'an int beta': lambda: Factory(0.5, 10, 16, 1.0, beta=0),
    'every keyword': lambda: Factory(
        noise_multiplier=0.5, expected_clients_per_round=10, bits=16,
        l2_clip=1.0, modclip_prob=1e-3, beta=0.0,
        mechanism='distributed_dgauss', rotation_type='hd',
        auto_l2_clip=True, auto_l2_target_quantile=0.6, auto_l2_lr=0.1,
        auto_l2_clip_count_stddev=1.0),
    'ddp_secure_aggregator, positional': lambda: (
        tff.learning.ddp_secure_aggregator(0.5, 10, 16, False, 'dft')),
    'ddp_secure_aggregator, an int noise multiplier': lambda: (
        tff.learning.ddp_secure_aggregator(1, 100)),
}
TFF_ACCEPTS_TYPES = {
    'a list of tensors': tff.StructWithPythonType(
        [tff.TensorType(np.float32, [2]), tff.TensorType(np.float32, [2, 2])],
        list),
    'an OrderedDict': tff.StructWithPythonType(
        collections.OrderedDict(a=tff.TensorType(np.float32, [2])),
        collections.OrderedDict),
    'int32 values': tff.TensorType(np.int32, [3]),
    'a scalar': tff.TensorType(np.float32),
}


@pytest.mark.parametrize('make', TFF_ACCEPTS.values(), ids=TFF_ACCEPTS)
def test_every_argument_form_tff_087_accepts_is_accepted(make):
  process = make().create(_F32_3)
  assert process.next.type_signature.result.result.member == _F32_3


@pytest.mark.parametrize('value_type', TFF_ACCEPTS_TYPES.values(),
                         ids=TFF_ACCEPTS_TYPES)
def test_every_value_type_tff_087_accepts_is_accepted(value_type):
  process = Factory(0.5, 10, 16, 1.0).create(value_type)
  assert process.next.type_signature.result.result.member == value_type
