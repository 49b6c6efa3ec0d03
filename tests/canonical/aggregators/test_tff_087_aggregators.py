"""The rest of TensorFlow Federated 0.87's `tff.aggregators`: the rotations,
`SecureModularSumFactory`, `concat_factory`, `add_measurements`,
`as_weighted_aggregator`, reservoir sampling, `federated_sample` and
`secure_quantized_sum`, as a TFF user writes them.

Every expected number and type signature below was printed by TFF 0.87 (its
own venv, the sync test C++ context) for the same program and the same
three clients. The rotations draw their signs and phases as TFF does, from
the seed in the state, so with TFF's state they send the same rotated
vectors (checked through an inner factory that reports its sum). Each
process also runs compiled to a form, with the reference's results.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff
from canonical.aggregators import sampling

import aggregator_rounds
from tensor_asserts import assert_same

A = tff.aggregators
F = tff.TensorType(np.float32)
V = collections.OrderedDict(a=tff.TensorType(np.float32, [3]), b=F)
I3 = tff.TensorType(np.int32, [3])
F3 = tff.TensorType(np.float32, [3])


def _od(a, b):
  return collections.OrderedDict(a=np.array(a, np.float32), b=np.float32(b))


VALUES = [_od([0.1, -0.2, 0.3], 0.4), _od([1.0, 2.0, -2.0], 1.0),
          _od([30.0, -40.0, 0.0], 10.0)]
WEIGHTS = [np.float32(1), np.float32(2), np.float32(3)]
INTS = [np.array([1, -7, 3], np.int32), np.array([6, 2, 0], np.int32),
        np.array([100, 0, -5], np.int32)]
FLOATS = [v['a'] for v in VALUES]


def _rounds(factory, rounds=2, values=VALUES, value_type=V):
  return aggregator_rounds.run_rounds(factory, rounds, values, WEIGHTS,
                                      value_type)


def _arrays(x):
  """`x` with each list of numbers as one array (a tensor's value)."""
  if isinstance(x, dict):
    return collections.OrderedDict((k, _arrays(v)) for k, v in x.items())
  if isinstance(x, (list, tuple)) and x and not isinstance(
      x[0], (list, tuple, dict, np.ndarray)):
    return np.asarray(x)
  if isinstance(x, (list, tuple)):
    return type(x)(_arrays(v) for v in x)
  return x


def _close(actual, expected, rtol=1e-6, atol=1e-6):
  expected = _arrays(expected)
  tf.nest.assert_same_structure(actual, expected, check_types=False)
  for x, y in zip(tf.nest.flatten(actual), tf.nest.flatten(expected)):
    np.testing.assert_allclose(np.asarray(x), y, rtol=rtol, atol=atol)


# ----------------------------------------------------------------------------
# Rotations


def _reporting_sum():
  """A sum that also reports itself: what the rotation's clients sent."""
  return A.add_measurements(
      A.SumFactory(),
      server_measurement_fn=lambda r: collections.OrderedDict(rotated=r))


def _rotated(a, b):
  return collections.OrderedDict(a=np.array(a, np.float32),
                                 b=np.array(b, np.float32))


_SUM = ([31.1, -38.2, -1.7], 11.4)

# name: (factory of an inner factory, seed, [per round: the rotated sum]),
# as TFF 0.87 printed them with the seed (seed, 0) put in its state.
ROTATIONS = {
    'hd': (lambda inner: A.HadamardTransformFactory(inner), 12345, [
        _rotated([-2.7, 35.5, -4.4, 33.8], [11.4]),
        _rotated([-33.8, 4.4, -35.5, 2.7], [-11.4])]),
    'hd_r2': (lambda inner: A.HadamardTransformFactory(inner, 2), 12345, [
        _rotated([-2.7, -4.4, 35.5, -33.8], [-11.4]),
        _rotated([-33.8, 35.5, 4.4, 2.7], [11.4])]),
    'dft': (lambda inner: A.DiscreteFourierTransformFactory(inner), 12345, [
        _rotated([-47.07772445678711, 4.993917942047119, 0.6912201046943665,
                  -13.697113037109375],
                 [-10.621331214904785, -4.140930652618408]),
        _rotated([8.913710594177246, -28.070913314819336, 39.5207405090332,
                  0.14286112785339355],
                 [-8.415335655212402, 7.690391540527344])]),
    'dft_r3': (lambda inner: A.DiscreteFourierTransformFactory(inner, 3), 777,
               [_rotated([31.138113021850586, 35.57227325439453,
                          6.236858367919922, -12.468870162963867],
                         [8.792112350463867, 7.2566375732421875]),
                _rotated([25.303991317749023, 38.37432861328125,
                          15.527670860290527, 8.680405616760254],
                         [6.578116416931152, 9.310659408569336])]),
}


@pytest.mark.parametrize('name', [
    pytest.param(name, marks=pytest.mark.slow) if '_r' in name else name
    for name in sorted(ROTATIONS)])
def test_rotations_send_tff_087s_rotated_values_and_sum_back(name):
  make, seed, rotated = ROTATIONS[name]
  outputs = _rounds(make(_reporting_sum()))
  key = name.split('_')[0]
  process = make(_reporting_sum()).create(V)
  repeats = {'hd': 1, 'hd_r2': 2, 'dft': 1, 'dft_r3': 3}[name]
  state = ((), np.array([seed, 0], np.int64))
  for number in range(2):
    output = process.next(state, VALUES)
    _close(output.measurements[key]['rotated'], rotated[number], 1e-5, 1e-5)
    _close(output.result, _od(*_SUM), 1e-6, 1e-5)
    # TFF 0.87: the seed's second word moves by repeats x tensors a round.
    np.testing.assert_array_equal(output.state[1],
                                  [seed, 2 * repeats * (number + 1)])
    state = output.state
  for output in outputs:  # From the factory's own seed, the same sums.
    _close(output.result, _od(*_SUM), 1e-6, 1e-5)


@pytest.mark.parametrize('make, rotated', [
    (A.HadamardTransformFactory, [-55.0, -50.0, -57.0, -52.0]),
    (A.DiscreteFourierTransformFactory,
     [-34.484405517578125, -27.814546585083008, 70.13926696777344,
      67.79129791259766]),
])
def test_rotations_of_integers_round_back_as_tff_087(make, rotated):
  process = make(_reporting_sum()).create(I3)
  output = process.next(((), np.array([99, 0], np.int64)), INTS)
  _close(list(output.measurements.values())[0]['rotated'], rotated, 1e-5,
         1e-5)
  np.testing.assert_array_equal(output.result, [107, -5, -2])  # TFF 0.87.
  assert output.result.dtype == np.int32
  first, = _rounds(make(), 1, INTS, I3)
  np.testing.assert_array_equal(first.result, [107, -5, -2])


@pytest.mark.parametrize('make', [A.HadamardTransformFactory,
                                  A.DiscreteFourierTransformFactory])
def test_a_rotation_keeps_the_norm_and_inverts_exactly(make):
  # One client: the rotated vector has the value's norm (both maps are
  # orthogonal), and rotating back gives the value to float error.
  rng = np.random.default_rng(0)
  value = rng.normal(size=37).astype(np.float32)
  process = make(_reporting_sum(), num_repeats=2,
                 seed=3).create(tff.TensorType(np.float32, [37]))
  output = process.next(process.initialize(), [value])
  rotated = list(output.measurements.values())[0]['rotated']
  np.testing.assert_allclose(np.linalg.norm(rotated), np.linalg.norm(value),
                             rtol=1e-5)
  np.testing.assert_allclose(output.result, value, atol=2e-6)
  assert not np.allclose(rotated[:37], value)


def test_rotation_seeds_come_from_the_factory_and_travel_in_the_state():
  process = A.HadamardTransformFactory(seed=42).create(V)
  state = process.initialize()
  np.testing.assert_array_equal(state[1], [42, 0])
  again = A.HadamardTransformFactory(seed=42).create(V)
  assert_same(again.next(again.initialize(), VALUES),
              process.next(state, VALUES), exact=True)
  drawn = [A.HadamardTransformFactory().create(V).initialize()[1][0]
           for _ in range(2)]
  assert drawn[0] != drawn[1]  # A secret per create(), as TFF's timestamp.


@pytest.mark.parametrize('make, signature', [
    (A.HadamardTransformFactory,
     '(<state=<<>,int64[2]>@SERVER,value={float32[8192]}@CLIENTS> -> '
     '<state=<<>,int64[2]>@SERVER,result=float32[8192]@SERVER,measurements='
     '<hd=<>>@SERVER>)'),
    (A.DiscreteFourierTransformFactory,
     '(<state=<<>,int64[2]>@SERVER,value={float32[8192]}@CLIENTS> -> '
     '<state=<<>,int64[2]>@SERVER,result=float32[8192]@SERVER,measurements='
     '<dft=<>>@SERVER>)'),
])
def test_rotation_type_signatures_are_tff_087s(make, signature):
  process = make().create(tff.TensorType(np.float32, [8192]))
  assert str(process.next.type_signature) == signature


def test_padding_is_tff_087s():
  # TFF pads to 2**ceil(log2 n) computed in float32: 8192 becomes 16384.
  for size, padded in ((1, 1), (3, 4), (5, 8), (8192, 16384), (8193, 16384)):
    spy = _TypeSpy()
    A.HadamardTransformFactory(spy).create(tff.TensorType(np.float32, [size]))
    assert spy.value_type.shape == [padded], size
  spy = _TypeSpy()
  A.DiscreteFourierTransformFactory(spy).create(
      tff.TensorType(np.float32, [5]))
  assert spy.value_type.shape == [6]


class _TypeSpy(A.UnweightedAggregationFactory):
  """A sum that keeps the value type it was created for."""

  def create(self, value_type):
    self.value_type = value_type
    return A.SumFactory().create(value_type)


def test_rotations_compose_inside_the_means():
  outputs = _rounds(A.MeanFactory(A.HadamardTransformFactory(seed=1)))
  # TFF 0.87's MeanFactory() numbers (test_tff_factories).
  _close(outputs[1].result,
         _od([15.35, -19.366666793823242, -0.6166666746139526], 5.4), 1e-5,
         2e-6)
  assert outputs[1].measurements['mean_value'] == collections.OrderedDict(
      hd=())
  outputs = _rounds(A.UnweightedMeanFactory(
      A.DiscreteFourierTransformFactory(seed=1)))
  _close(outputs[1].result, _od([10.366666793823242, -12.733333587646484,
                                 -0.5666666626930237], 3.8), 1e-5, 2e-6)


@pytest.mark.parametrize('make, error, message', [
    (lambda: A.HadamardTransformFactory(num_repeats=0), ValueError,
     'num_repeats must be a positive int'),
    (lambda: A.DiscreteFourierTransformFactory(A.MeanFactory()), tff.Error,
     'inner_agg_factory must be a UnweightedAggregationFactory'),
    (lambda: A.HadamardTransformFactory().create(collections.OrderedDict(
        a=F, b=tff.TensorType(np.int32))), tff.Error,
     'all floats or all integers'),
])
def test_rotation_misuse_is_refused_by_name(make, error, message):
  with pytest.raises(error, match=message):
    make()


# ----------------------------------------------------------------------------
# SecureModularSumFactory


@pytest.mark.parametrize('modulus, symmetric, expected', [
    # TFF 0.87 (clients [1, -7, 3], [6, 2, 0], [100, 0, -5]).
    (4, False, [3, 3, 2]), (1, False, [0, 0, 0]), (7, False, [2, 2, 5]),
    (4, True, [2, 2, -2]), (1, True, [0, 0, 0]), (7, True, [3, -5, -2]),
])
def test_secure_modular_sums_are_tff_087s(modulus, symmetric, expected):
  output, = _rounds(A.SecureModularSumFactory(modulus, symmetric), 1, INTS,
                    I3)
  np.testing.assert_array_equal(output.result, expected)
  assert output.result.dtype == np.int32
  assert output.state == () and output.measurements == ()


def test_a_secure_modular_sum_of_a_structure_is_tff_087s():
  value_type = collections.OrderedDict(x=I3, y=tff.TensorType(np.int32, [2]))
  clients = [collections.OrderedDict(x=v, y=np.array([2**30 + 1, -3],
                                                      np.int32))
             for v in INTS]
  output, = _rounds(A.SecureModularSumFactory(2**20), 1, clients, value_type)
  _close(output.result, collections.OrderedDict(
      x=[107, 1048571, 1048574], y=[3, 1048567]))  # TFF 0.87.
  process = A.SecureModularSumFactory(4).create(I3)
  assert str(process.next.type_signature) == (
      '(<state=<>@SERVER,value={int32[3]}@CLIENTS> -> <state=<>@SERVER,'
      'result=int32[3]@SERVER,measurements=<>@SERVER>)')


def test_a_secure_modular_sum_counts_clients_inside_a_mean():
  outputs = _rounds(A.UnweightedMeanFactory(
      count_sum_factory=A.SecureModularSumFactory(1000)))
  _close(outputs[0].result, _od([10.366666793823242, -12.733333587646484,
                                 -0.5666666626930237], 3.8))


@pytest.mark.parametrize('make, error, message', [
    (lambda: A.SecureModularSumFactory(0), ValueError, 'must be positive'),
    (lambda: A.SecureModularSumFactory(4.0), TypeError, 'must be an int'),
    (lambda: A.SecureModularSumFactory(4, 1), TypeError, 'must be a bool'),
    (lambda: A.SecureModularSumFactory(2**63, True), ValueError,
     'above its largest modulus'),
    (lambda: A.SecureModularSumFactory(4).create(F3), tff.Error,
     'integer dtype'),
])
def test_secure_modular_sum_misuse_is_refused_by_name(make, error, message):
  with pytest.raises(error, match=message):
    make()


# ----------------------------------------------------------------------------
# concat_factory, add_measurements, as_weighted_aggregator


_MEAN = [15.34999942779541, -19.366666793823242, -0.6166666746139526], 5.4
_UMEAN = [10.366666793823242, -12.733333587646484, -0.5666666626930237], 3.8


def test_concat_factory_is_tff_087s():
  output, = _rounds(A.concat_factory(A.SumFactory()), 1)
  _close(output.result, _od(*_SUM))
  assert output.state == () and output.measurements == ()
  output, = _rounds(A.concat_factory(A.MeanFactory()), 1)
  _close(output.result, _od(*_MEAN))
  assert isinstance(A.concat_factory(A.MeanFactory()),
                    A.WeightedAggregationFactory)
  process = A.concat_factory(A.MeanFactory()).create(V, F)
  assert str(process.next.type_signature) == (
      '(<state=<value_sum_process=<>,weight_sum_process=<>>@SERVER,value='
      '{<a=float32[3],b=float32>}@CLIENTS,weight={float32}@CLIENTS> -> '
      '<state=<value_sum_process=<>,weight_sum_process=<>>@SERVER,result='
      '<a=float32[3],b=float32>@SERVER,measurements=<mean_value=<>,'
      'mean_weight=<>>@SERVER>)')


def test_concat_factory_sees_one_vector():
  spy = _TypeSpy()
  A.concat_factory(spy).create(V)
  assert spy.value_type == tf.TensorSpec([4], tf.float32)
  with pytest.raises(tff.Error, match='one integer or floating dtype'):
    A.concat_factory(A.SumFactory()).create(
        collections.OrderedDict(a=F, b=tff.TensorType(np.int32)))


@tff.tf_computation(V)
def _twice_b(value):
  return value['b'] * 2.0


def test_add_measurements_is_tff_087s():
  factory = A.add_measurements(
      A.SumFactory(),
      client_measurement_fn=lambda v: collections.OrderedDict(
          max_b=tff.federated_max(v['b'])),
      server_measurement_fn=lambda r: collections.OrderedDict(
          sum_b=tff.federated_map(_twice_b, r)))
  output, = _rounds(factory, 1)
  _close(output.result, _od(*_SUM))
  # TFF 0.87: OrderedDict(max_b=10.0, sum_b=22.8).
  assert list(output.measurements) == ['max_b', 'sum_b']
  _close(np.array(list(output.measurements.values())),
         [10.0, 22.799999237060547])
  weighted = A.add_measurements(
      A.MeanFactory(), client_measurement_fn=lambda v, w: (
          collections.OrderedDict(total_weight=tff.federated_sum(w))))
  assert isinstance(weighted, A.WeightedAggregationFactory)
  output, = _rounds(weighted, 1)
  _close(output.result, _od(*_MEAN))
  assert output.measurements == collections.OrderedDict(
      mean_value=(), mean_weight=(), total_weight=6.0)  # TFF 0.87.
  assert str(weighted.create(V, F).next.type_signature).endswith(
      'measurements=<mean_value=<>,mean_weight=<>,total_weight=float32>'
      '@SERVER>)')


@pytest.mark.parametrize('make, error, message', [
    (lambda: A.add_measurements(A.SumFactory()), ValueError,
     'give client_measurement_fn, server_measurement_fn or both'),
    (lambda: A.add_measurements(A.MeanFactory(),
                                client_measurement_fn=lambda v: {}),
     ValueError, 'must take 2 parameter'),
    (lambda: A.add_measurements(A.SumFactory(),
                                server_measurement_fn=lambda a, b: {}),
     ValueError, 'must take 1 parameter'),
    (lambda: A.add_measurements(
        A.SumFactory(), server_measurement_fn=lambda r: r['b']).create(V),
     tff.Error, 'mapping of names'),
    (lambda: A.add_measurements(object(), server_measurement_fn=len),
     tff.Error, 'inner_agg_factory must be'),
])
def test_add_measurements_misuse_is_refused_by_name(make, error, message):
  with pytest.raises(error, match=message):
    make()


def test_as_weighted_aggregator_ignores_the_weights_as_tff_087():
  factory = A.as_weighted_aggregator(A.UnweightedMeanFactory())
  assert isinstance(factory, A.WeightedAggregationFactory)
  output, = _rounds(factory, 1)
  _close(output.result, _od(*_UMEAN))
  assert str(factory.create(V, F).next.type_signature) == (
      '(<state=<<>,<>>@SERVER,value={<a=float32[3],b=float32>}@CLIENTS,'
      'weight={float32}@CLIENTS> -> <state=<<>,<>>@SERVER,result=<a=float32'
      '[3],b=float32>@SERVER,measurements=<mean_value=<>,mean_count=<>>'
      '@SERVER>)')
  dp = A.as_weighted_aggregator(
      A.DifferentiallyPrivateFactory.gaussian_fixed(0.0, 4, 2.0))
  output, = _rounds(dp, 1)
  _close(output.result, _od([0.47728806734085083, -0.12600451707839966,
                             -0.24122776091098785], 0.35617196559906006))
  with pytest.raises(tff.Error, match='unweighted_aggregator must be a '
                     'UnweightedAggregationFactory'):
    A.as_weighted_aggregator(A.MeanFactory())


# ----------------------------------------------------------------------------
# Sampling


def _rows(sample):
  """A sample's clients as sorted tuples: samples are sets of clients."""
  flat = [np.asarray(x).reshape(len(np.asarray(x)), -1)
          for x in tf.nest.flatten(sample)]
  return sorted(tuple(np.concatenate([f[i] for f in flat]).tolist())
                for i in range(len(flat[0])))


def test_reservoir_sampling_keeps_every_client_it_has_room_for():
  output, = _rounds(A.UnweightedReservoirSamplingFactory(5), 1)
  # TFF 0.87: all three clients (in client order; here by priority).
  assert _rows(output.result) == _rows(collections.OrderedDict(
      a=np.stack([v['a'] for v in VALUES]),
      b=np.stack([v['b'] for v in VALUES])))
  assert output.measurements == collections.OrderedDict(a=0, b=0)
  process = A.UnweightedReservoirSamplingFactory(5).create(V)
  assert str(process.next.type_signature) == (
      '(<unused_state=<>@SERVER,value={<a=float32[3],b=float32>}@CLIENTS> '
      '-> <state=<>@SERVER,result=<a=float32[?,3],b=float32[?]>@SERVER,'
      'measurements=<a=int64,b=int64>@SERVER>)')


def test_reservoir_sampling_counts_non_finite_leaves_as_tff_087():
  v2 = collections.OrderedDict(a=tff.TensorType(np.float32, [2]),
                               b=tff.TensorType(np.float32, [2]))
  clients = [
      collections.OrderedDict(a=np.array([1.0, 2.0], np.float32),
                              b=np.array([1.0, np.nan], np.float32)),
      collections.OrderedDict(a=np.array([np.nan, np.inf], np.float32),
                              b=np.array([1.0, 2.0], np.float32)),
      collections.OrderedDict(a=np.array([1.0, 2.0], np.float32),
                              b=np.array([np.inf, np.nan], np.float32))]
  process = A.UnweightedReservoirSamplingFactory(2).create(v2)
  output = process.next(process.initialize(), clients)
  assert output.measurements == collections.OrderedDict(a=1, b=2)
  assert [np.shape(x) for x in tf.nest.flatten(output.result)] == [
      (2, 2), (2, 2)]  # TFF 0.87 the same.


def test_a_reservoir_sample_is_independent_of_order():
  value_type = tff.TensorType(np.float32, [2])
  clients = [np.array([i, -i], np.float32) for i in range(12)]
  process = A.UnweightedReservoirSamplingFactory(3, seed=5).create(value_type)
  sample = process.next(process.initialize(), clients).result
  assert sample.shape == (3, 2)
  for order in (clients[::-1], clients[5:] + clients[:5]):
    np.testing.assert_array_equal(
        process.next(process.initialize(), order).result, sample)


def test_reservoir_priorities_keep_each_client_equally_often():
  clients = [tf.constant([i, -i], tf.float32) for i in range(12)]

  @tf.function
  def priorities(seed):
    return tf.stack([sampling.priority(tf.stack([seed, 0]), c)
                     for c in clients])

  counts = np.zeros(12)
  for seed in range(200):
    kept = np.argsort(priorities(tf.constant(seed, tf.int64)).numpy())[-3:]
    counts[kept] += 1
  # Each client is kept with probability 1/4: 50 of 200, binomial sd 6.1.
  assert counts.min() > 30 and counts.max() < 70, counts


def test_reservoir_metadata_is_tff_087s_structure():
  factory = A.UnweightedReservoirSamplingFactory(
      2, return_sampling_metadata=True, seed=9)
  output, = _rounds(factory, 1)
  result = output.result
  assert list(result) == ['random_seed', 'random_values', 'samples']
  np.testing.assert_array_equal(result['random_seed'], [9, 0])
  assert result['random_values'].dtype == np.int32
  assert len(result['random_values']) == 2
  assert list(result['random_values']) == sorted(result['random_values'],
                                                 reverse=True)
  assert np.shape(result['samples']['a']) == (2, 3)
  assert str(factory.create(V).next.type_signature) == (
      '(<unused_state=<>@SERVER,value={<a=float32[3],b=float32>}@CLIENTS> '
      '-> <state=<>@SERVER,result=<random_seed=int64[2],random_values='
      'int32[?],samples=<a=float32[?,3],b=float32[?]>>@SERVER,measurements='
      '<a=int64,b=int64>@SERVER>)')


def test_federated_sample_is_tff_087s():

  @tff.federated_computation(tff.type_at_clients(V))
  def sample_two(value):
    return A.federated_sample(value, 2)

  @tff.federated_computation(tff.type_at_clients(V))
  def sample_all(value):
    return A.federated_sample(value)

  assert str(sample_two.type_signature) == (
      '({<a=float32[3],b=float32>}@CLIENTS -> <a=float32[?,3],'
      'b=float32[?]>@SERVER)')  # TFF 0.87.
  two = sample_two(VALUES)
  assert [np.shape(x) for x in tf.nest.flatten(two)] == [(2, 3), (2,)]
  assert set(_rows(two)) < set(_rows(sample_all(VALUES)))
  assert len(_rows(sample_all(VALUES))) == 3
  with pytest.raises(tff.Error, match='max_num_samples must be a positive'):
    tff.federated_computation(lambda v: A.federated_sample(v, 0),
                              tff.type_at_clients(F)).type_signature


# ----------------------------------------------------------------------------
# secure_quantized_sum


def _quantized_sum(value_type, clients, lower, upper, placed=False):
  if placed:
    bound_type = tf.nest.map_structure(lambda b: tf.TensorSpec(
        [], tf.as_dtype(np.asarray(b).dtype)), lower)

    @tff.federated_computation(tff.type_at_clients(value_type),
                               tff.type_at_server(bound_type),
                               tff.type_at_server(bound_type))
    def comp(v, lo, hi):
      return A.secure_quantized_sum(v, lo, hi)

    args = (clients, lower, upper)
  else:

    @tff.federated_computation(tff.type_at_clients(value_type))
    def comp(v):  # pylint: disable=function-redefined
      return A.secure_quantized_sum(v, lower, upper)

    args = (clients,)
  return comp, comp(*args)


I64 = tff.TensorType(np.int64, [3])
INT64S = [np.array([1, -7, 3 * 10**12], np.int64),
          np.array([6, 2, 0], np.int64),
          np.array([10**13, 0, -5], np.int64)]
STRUCT = collections.OrderedDict(x=F3, y=I3)
STRUCTS = [collections.OrderedDict(x=f, y=i) for f, i in zip(FLOATS, INTS)]
_STRUCT_SUM = collections.OrderedDict(
    x=[4.099999904632568, -0.20000000298023224, -1.6999999284744263],
    y=[17, -1, 0])


# name: (value type, clients, lower, upper, placed, TFF 0.87's sum)
QUANTIZED = {
    'int32': (I3, INTS, np.int32(-5), np.int32(50), False, [57, -3, -2]),
    'int64_small': (I64, INT64S, np.int64(-5), np.int64(50), False,
                    [57, -3, 45]),
    'int64_large': (I64, INT64S, np.int64(-10**12), np.int64(10**13), False,
                    [9999999995220, -3468, 2999999995626]),
    'float32': (F3, FLOATS, np.float32(-5.0), np.float32(5.0), False,
                [6.099999904632568, -3.200000047683716, -1.6999999284744263]),
    'float32_placed': (F3, FLOATS, np.float32(-1.5), np.float32(2.5), True,
                       [3.5999999046325684, 0.30000001192092896,
                        -1.2000000476837158]),
    'float64': (tff.TensorType(np.float64, [3]),
                [v.astype(np.float64) for v in FLOATS], np.float64(-50.0),
                np.float64(50.0), False,
                [31.09999998265412, -38.20000000721775, -1.699999999650754]),
    'struct': (STRUCT, STRUCTS,
               collections.OrderedDict(x=np.float32(-2.0), y=np.int32(-3)),
               collections.OrderedDict(x=np.float32(3.0), y=np.int32(10)),
               False, _STRUCT_SUM),
    'struct_placed': (STRUCT, STRUCTS,
                      collections.OrderedDict(x=np.float32(-2.0),
                                              y=np.int32(-3)),
                      collections.OrderedDict(x=np.float32(3.0),
                                              y=np.int32(10)),
                      True, _STRUCT_SUM),
    'equal_bounds': (F3, FLOATS, np.float32(2.0), np.float32(2.0), False,
                     [6.0, 6.0, 6.0]),
    'python_bounds': (F3, FLOATS, -5.0, 5.0, False,
                      [6.099999904632568, -3.200000047683716,
                       -1.6999999284744263]),
}


@pytest.mark.parametrize('name', sorted(QUANTIZED))
def test_secure_quantized_sums_are_tff_087s(name):
  value_type, clients, lower, upper, placed, expected = QUANTIZED[name]
  comp, result = _quantized_sum(value_type, clients, lower, upper, placed)
  if name.startswith('int'):
    np.testing.assert_array_equal(result, expected)
  else:
    _close(result, expected, 1e-7, 1e-7)
  if not placed:  # Compiled, in a round: the same sums.
    process = tff.IterativeProcess(
        tff.federated_computation(lambda: tff.federated_value(0, tff.SERVER)),
        tff.federated_computation(
            lambda state, value: (state, comp(value)),
            tff.type_at_server(tf.TensorSpec([], tf.int32)),
            tff.type_at_clients(value_type)))
    form = tff.compile(process)
    _, form_result = tff.run_round(form, form.initialize(), clients)
    assert_same(form_result, result, exact=True)


def test_secure_quantized_sum_type_is_tff_087s():
  comp, _ = _quantized_sum(F3, FLOATS, np.float32(-1.5), np.float32(2.5),
                           placed=True)
  assert str(comp.type_signature) == (
      '(<v={float32[3]}@CLIENTS,lo=float32@SERVER,hi=float32@SERVER> -> '
      'float32[3]@SERVER)')


@pytest.mark.parametrize('lower, upper, value_type, message', [
    (5.0, -5.0, F3, 'above upper_bound'),
    (np.float64(-1.0), np.float64(1.0), F3, 'is float64, the value float32'),
    (-1.5, 1.5, I3, 'must be an integer for int32'),
    (-1.0, 1.0, STRUCT, 'one dtype for every tensor'),
    (-1, 2.0, tff.TensorType(np.int16, [3]), 'int32, int64, float32 or'),
])
def test_secure_quantized_sum_misuse_is_refused_by_name(lower, upper,
                                                        value_type, message):
  with pytest.raises(tff.Error, match=message):
    tff.federated_computation(
        lambda v: A.secure_quantized_sum(v, lower, upper),
        tff.type_at_clients(value_type)).type_signature


# ----------------------------------------------------------------------------
# Clipping: the project's one clip against TFF's two


_CLIP_CLIENTS_RNG = 5  # numpy's default_rng(5): the same values in TFF's venv.
# TFF 0.87's results for the program below (5 clients, 3 of them over the
# clip), printed as float32 values.
_TFF_CLIPPED_SUM = (
    [[-0.7393324375152588, -0.03787890076637268, -0.7806082367897034],
     [-0.19634996354579926, 0.4290119707584381, -0.4055870473384857],
     [-0.25197041034698486, -0.5630556344985962, 0.28016170859336853],
     [0.11706492304801941, 0.5309378504753113, -0.47987648844718933]],
    [-0.7962298393249512, -0.019789278507232666, 0.11266511678695679])
_TFF_DP_MEAN = (
    [[-0.14786648750305176, -0.007575786206871271, -0.1561216413974762],
     [-0.03926999121904373, 0.08580239117145538, -0.0811174064874649],
     [-0.05039408057928085, -0.11261112987995148, 0.056032340973615646],
     [0.023412983864545822, 0.10618756711483002, -0.09597530961036682]],
    [-0.15924596786499023, -0.003957855515182018, 0.02253301814198494])


def _clip_clients():
  rng = np.random.default_rng(_CLIP_CLIENTS_RNG)
  return [[rng.normal(size=(4, 3)).astype(np.float32) * s,
           rng.normal(size=(3,)).astype(np.float32) * s]
          for s in (0.3, 2.0, 7.0, 0.05, 3.3)]


def test_one_clipping_against_tffs_two():
  """TFF clips two ways: `clipping_factory` divides by norm/clip (the
  norm from each tensor's norm), `DifferentiallyPrivateFactory` scales by
  tf.clip_by_global_norm's factor. Our one clip (clip / max(norm, clip))
  gives the DP factory's bits and is within 8 float32 ulps of
  `clipping_factory`'s (no single rule can give both: TFF's own rules
  differ by up to 13 ulps here)."""
  value_type = tff.to_type([(np.float32, [4, 3]), (np.float32, [3])])
  clip = A.clipping_factory(1.0, A.SumFactory()).create(value_type)
  clipped = clip.next(clip.initialize(), _clip_clients()).result
  dp = A.DifferentiallyPrivateFactory.gaussian_fixed(
      noise_multiplier=0.0, clients_per_round=5, clip=1.0).create(value_type)
  mean = dp.next(dp.initialize(), _clip_clients()).result
  for ours, tffs in zip(mean, _TFF_DP_MEAN):
    np.testing.assert_array_equal(ours, np.array(tffs, np.float32))
  for ours, tffs in zip(clipped, _TFF_CLIPPED_SUM):
    tffs = np.array(tffs, np.float32)
    ulps = np.abs(np.asarray(ours) - tffs) / np.spacing(np.abs(tffs))
    assert np.max(ulps) <= 8, np.max(ulps)
