"""TensorFlow Federated 0.87's `tff.aggregators` (and `tff.learning`'s
recommended aggregators) as a TFF user writes them.

Each factory's process runs from Python (the reference executor) and, inside
an `IterativeProcess` round, compiled to a canonical form (a few on Beam
too); all give the same numbers, and those are TFF 0.87's: every expected
number below was printed by TFF 0.87 (its own venv, the sync test C++
context) for the same factory and the same three clients, two rounds. Type
signatures likewise.
"""

import collections
import math

import numpy as np
import pytest
import tensorflow as tf

from beam_runner import testing as beam_testing
import canonical as tff
import encoders as te
from canonical.learning import model_update_aggregator as mua
from canonical.templates import measured

import aggregator_rounds
from tensor_asserts import assert_same

A = tff.aggregators
F = tff.TensorType(np.float32)
V = collections.OrderedDict(a=tff.TensorType(np.float32, [3]), b=F)


def _od(a, b):
  return collections.OrderedDict(a=np.array(a, np.float32), b=np.float32(b))


# Three clients; norms about 0.55, 3.2 and 51; weights 1, 2, 3.
VALUES = [_od([0.1, -0.2, 0.3], 0.4), _od([1.0, 2.0, -2.0], 1.0),
          _od([30.0, -40.0, 0.0], 10.0)]
WEIGHTS = [np.float32(1), np.float32(2), np.float32(3)]


def _create(factory, value_type=V):
  return aggregator_rounds.create(factory, value_type)


_as_round = aggregator_rounds.as_round


def _rounds(factory, rounds=2, values=VALUES, weights=WEIGHTS, value_type=V):
  """`rounds` outputs by the reference executor, each checked against the
  compiled form's round."""
  return aggregator_rounds.run_rounds(factory, rounds, values, weights,
                                      value_type)


def _close(actual, expected, rtol=1e-6):
  tf.nest.assert_same_structure(actual, expected)
  for x, y in zip(tf.nest.flatten(actual), tf.nest.flatten(expected)):
    np.testing.assert_allclose(np.asarray(x), y, rtol=rtol, atol=1e-6)


def _od_m(**kwargs):
  return collections.OrderedDict(kwargs)


_MEAN = _od_m(mean_value=(), mean_weight=())
_UMEAN = _od_m(mean_value=(), mean_count=())


def _quantile():
  return A.PrivateQuantileEstimationProcess.no_noise(1.0, 0.5, 0.2)


def _secure_m(up, low, upper, lower):
  return _od_m(secure_upper_clipped_count=up, secure_lower_clipped_count=low,
               secure_upper_threshold=upper, secure_lower_threshold=lower)


_ROBUST_R1 = ([0.12207592278718948, 0.1774851679801941, -0.16081850230693817],
              0.17207592725753784)
_ROBUST_R2 = ([0.42704904079437256, -0.21964986622333527,
               -0.16651597619056702], 0.2756327688694)
_ROBUST_U_R1 = ([0.1387425810098648, 0.14415185153484344,
                 -0.11081850528717041], 0.23874258995056152)
_ROBUST_U_R2 = ([0.34300756454467773, -0.11870568990707397,
                 -0.11651597172021866], 0.3087300956249237)
_CLIP_EST_R1 = ([0.4162501096725464, -0.2147470861673355,
                 -0.16081850230693817], 0.27013400197029114)
_DP_R1 = ([0.47728806734085083, -0.12600451707839966, -0.24122776091098785],
          0.35617196559906006)


def _zeroed(inner):
  return _od_m(zeroing=inner, zeroing_norm=42.149384, zeroed_count=0)


def _clipped(inner, norm=1.0270255):
  return _od_m(clipping=inner, clipping_norm=norm, clipped_count=2)


# name: (factory, round 1 result (a, b), round 2 result, round 2
# measurements), all as TFF 0.87 printed them.
TFF_087 = {
    'SumFactory': (A.SumFactory, ([31.1, -38.2, -1.7], 11.4),
                   ([31.1, -38.2, -1.7], 11.4), ()),
    'MeanFactory': (A.MeanFactory,
                    ([15.35, -19.366666793823242, -0.6166666746139526], 5.4),
                    ([15.35, -19.366666793823242, -0.6166666746139526], 5.4),
                    _MEAN),
    'UnweightedMeanFactory': (
        A.UnweightedMeanFactory,
        ([10.366666793823242, -12.733333587646484, -0.5666666626930237],
         3.8),
        ([10.366666793823242, -12.733333587646484, -0.5666666626930237],
         3.8), _UMEAN),
    'gaussian_fixed': (
        lambda: A.DifferentiallyPrivateFactory.gaussian_fixed(0.0, 4, 2.0),
        _DP_R1, _DP_R1, _od_m(dp_query_metrics=_od_m(), dp=())),
    'gaussian_adaptive': (
        lambda: A.DifferentiallyPrivateFactory.gaussian_adaptive(
            0.0, 4, 2.0, 0.5, 0.2), _DP_R1,
        ([0.4887378513813019, -0.12792861461639404, -0.24923311173915863],
         0.36265698075294495),
        _od_m(dp_query_metrics=_od_m(clip=2.1025424), dp=())),
    'SecureSumFactory': (lambda: A.SecureSumFactory(5.0),
                         ([6.1, -3.2, -1.7], 6.4), ([6.1, -3.2, -1.7], 6.4),
                         _secure_m(1, 1, 5.0, -5.0)),
    'SecureSumFactory_two_bounds': (
        lambda: A.SecureSumFactory(2.0, -1.0), ([3.1, 0.8, -0.7], 3.4),
        ([3.1, 0.8, -0.7], 3.4), _secure_m(1, 2, 2.0, -1.0)),
    'SecureSumFactory_estimated': (
        lambda: A.SecureSumFactory(_quantile()), ([2.1, -0.2, -0.7], 2.4),
        ([2.1338951587677, -0.2, -0.7338951230049133], 2.4338951110839844),
        _secure_m(2, 2, 1.0338951, -1.0338951)),
    'clipping_factory': (
        lambda: A.clipping_factory(2.0, A.MeanFactory()),
        ([0.815833568572998, -0.3961608409881592, -0.3716370165348053],
         0.4736013114452362),
        ([0.815833568572998, -0.3961608409881592, -0.3716370165348053],
         0.4736013114452362), _clipped(_MEAN, 2.0)),
    'clipping_factory_estimated': (
        lambda: A.clipping_factory(_quantile(), A.MeanFactory()),
        _CLIP_EST_R1,
        ([0.4297940731048584, -0.2208961397409439, -0.16796422004699707],
         0.2770305573940277), _clipped(_MEAN, 1.0338951)),
    'zeroing_factory': (
        lambda: A.zeroing_factory(10.0, A.MeanFactory()),
        ([0.35, 0.6333333253860474, -0.6166666746139526], 0.4),
        ([0.35, 0.6333333253860474, -0.6166666746139526], 0.4),
        _od_m(zeroing=_MEAN, zeroing_norm=10.0, zeroed_count=1)),
    'zeroing_factory_l1': (
        lambda: A.zeroing_factory(3.0, A.SumFactory(), norm_order=1.0),
        ([0.1, -0.2, 0.3], 0.4), ([0.1, -0.2, 0.3], 0.4),
        _od_m(zeroing=(), zeroing_norm=3.0, zeroed_count=2)),
    'zeroing_factory_l2': (
        lambda: A.zeroing_factory(3.0, A.SumFactory(), norm_order=2.0),
        ([0.1, -0.2, 0.3], 0.4), ([0.1, -0.2, 0.3], 0.4),
        _od_m(zeroing=(), zeroing_norm=3.0, zeroed_count=2)),
    'robust_aggregator': (mua.robust_aggregator, _ROBUST_R1, _ROBUST_R2,
                          _zeroed(_clipped(_MEAN))),
    'robust_aggregator_unweighted': (
        lambda: mua.robust_aggregator(weighted=False), _ROBUST_U_R1,
        _ROBUST_U_R2, _zeroed(_clipped(_UMEAN))),
    'robust_aggregator_no_zeroing': (
        lambda: mua.robust_aggregator(zeroing=False), _CLIP_EST_R1,
        ([0.4553404152393341, -0.23249436914920807, -0.18144237995147705],
         0.29003873467445374), _clipped(_MEAN, 1.0978277)),
    # No tensor has more than 20000 elements: nothing is quantized.
    'compression_aggregator': (mua.compression_aggregator, _ROBUST_R1,
                               _ROBUST_R2, _zeroed(_clipped(_MEAN))),
    'secure_aggregator': (
        mua.secure_aggregator,
        ([0.12207604199647903, 0.17748533189296722, -0.1608186662197113],
         0.17207609117031097),
        ([0.427049458026886, -0.2196500599384308, -0.16651614010334015],
         0.2756330370903015),
        _zeroed(_clipped(_od_m(
            mean_value=_secure_m(0, 0, 95.12294, -95.12294),
            mean_weight=_secure_m(0, 0, 1048575.0, 0.0))))),
    'secure_aggregator_unweighted': (
        lambda: mua.secure_aggregator(weighted=False),
        ([0.1387426108121872, 0.14415185153484344, -0.11081850528717041],
         0.23874260485172272),
        ([0.3430075943470001, -0.11870569735765457, -0.11651596426963806],
         0.3087300658226013),
        _zeroed(_clipped(_od_m(
            mean_value=_secure_m(0, 0, 95.12294, -95.12294),
            mean_count=_secure_m(0, 0, 1, 0))))),
    'dp_aggregator': (
        lambda: mua.dp_aggregator(0.0, 4),
        ([0.012470049783587456, 0.0066826799884438515, -0.002118324860930443],
         0.026163112372159958),
        ([0.027866791933774948, -0.013256234116852283, -0.002171948552131653],
         0.03185245767235756),
        _zeroed(_od_m(dp_query_metrics=_od_m(clip=0.1105171), dp=()))),
}


@pytest.mark.parametrize('name', sorted(TFF_087))
def test_numbers_and_measurements_are_tff_087s(name):
  make, first, second, measurements = TFF_087[name]
  outputs = _rounds(make())
  rtol = 1e-5 if 'secure' in name.lower() else 1e-6
  for output, (a, b) in zip(outputs, (first, second)):
    _close(output.result, _od(a, b), rtol)
  _close(outputs[1].measurements, measurements, rtol)


def test_integer_secure_sums_clip_shift_and_count():
  i3 = tff.TensorType(np.int32, [3])
  clients = [np.array([1, -7, 3], np.int32), np.array([6, 2, 0], np.int32)]
  # TFF 0.87: [6, -3, 3] with one value above 5 and one below -5.
  output, = _rounds(A.SecureSumFactory(5), 1, clients, value_type=i3)
  np.testing.assert_array_equal(output.result, [6, -3, 3])
  assert output.measurements == _secure_m(1, 1, 5, -5)
  output, = _rounds(A.SecureSumFactory(3, 0), 1, clients, value_type=i3)
  np.testing.assert_array_equal(output.result, [4, 2, 3])
  assert output.measurements == _secure_m(1, 1, 3, 0)


@pytest.mark.parametrize('make', [
    mua.compression_aggregator,
    lambda: mua.secure_aggregator(weighted=False),
    lambda: A.DifferentiallyPrivateFactory.gaussian_adaptive(
        0.5, 3, clipped_count_stddev=1.0, seed=3),
], ids=['compression', 'secure_unweighted', 'dp_adaptive'])
def test_rounds_on_beam_match_the_reference(make):
  process = _create(make())
  data = {f'c{i}': (value, weight) if process.is_weighted else value
          for i, (value, weight) in enumerate(zip(VALUES, WEIGHTS))}
  beam_testing.assert_rounds_match(_as_round(process), data, rounds=2,
                                   clients_per_element=1)


# ----------------------------------------------------------------------------
# Type signatures, as TFF 0.87 prints them (value float32[3], weight float32).

V3 = tff.TensorType(np.float32, [3])
_NO_STATE_SUM = ('(<state=<>@SERVER,value={float32[3]}@CLIENTS> -> <state=<>'
                 '@SERVER,result=float32[3]@SERVER,measurements=<>@SERVER>)')
_MEAN_STATE = '<value_sum_process=<>,weight_sum_process=<>>@SERVER'
_Q_STATE = ('<<current_estimate=float32,target_quantile=float32,'
            'learning_rate=float32,below_estimate_state=<>>,<>>')


@pytest.mark.parametrize('make, signature', [
    (A.SumFactory, _NO_STATE_SUM),
    (A.MeanFactory,
     f'(<state={_MEAN_STATE},value={{float32[3]}}@CLIENTS,'
     f'weight={{float32}}@CLIENTS> -> <state={_MEAN_STATE},'
     'result=float32[3]@SERVER,measurements=<mean_value=<>,mean_weight=<>>'
     '@SERVER>)'),
    (A.UnweightedMeanFactory,
     '(<state=<<>,<>>@SERVER,value={float32[3]}@CLIENTS> -> <state=<<>,<>>'
     '@SERVER,result=float32[3]@SERVER,measurements=<mean_value=<>,'
     'mean_count=<>>@SERVER>)'),
    (lambda: A.SecureSumFactory(1.0),
     '(<state=<>@SERVER,value={float32[3]}@CLIENTS> -> <state=<>@SERVER,'
     'result=float32[3]@SERVER,measurements=<secure_upper_clipped_count='
     'int32,secure_lower_clipped_count=int32,secure_upper_threshold=float32,'
     'secure_lower_threshold=float32>@SERVER>)'),
    (lambda: A.zeroing_factory(1.0, A.SumFactory()),
     '(<state=<zeroing_norm=<>,inner_agg=<>,zeroed_count_agg=<>>@SERVER,'
     'value={float32[3]}@CLIENTS> -> <state=<zeroing_norm=<>,inner_agg=<>,'
     'zeroed_count_agg=<>>@SERVER,result=float32[3]@SERVER,measurements='
     '<zeroing=<>,zeroing_norm=float32,zeroed_count=int32>@SERVER>)'),
    (lambda: A.clipping_factory(_quantile(), A.MeanFactory()),
     f'(<state=<clipping_norm={_Q_STATE},inner_agg=<value_sum_process=<>,'
     'weight_sum_process=<>>,clipped_count_agg=<>>@SERVER,value={float32[3]}'
     f'@CLIENTS,weight={{float32}}@CLIENTS> -> <state=<clipping_norm='
     f'{_Q_STATE},inner_agg=<value_sum_process=<>,weight_sum_process=<>>,'
     'clipped_count_agg=<>>@SERVER,result=float32[3]@SERVER,measurements='
     '<clipping=<mean_value=<>,mean_weight=<>>,clipping_norm=float32,'
     'clipped_count=int32>@SERVER>)'),
])
def test_type_signatures_are_tff_087s(make, signature):
  factory = make()
  process = (factory.create(V3, F) if isinstance(
      factory, A.WeightedAggregationFactory) else factory.create(V3))
  assert str(process.next.type_signature) == signature
  assert isinstance(process, tff.templates.AggregationProcess)


@pytest.mark.parametrize('make, measurements', [
    (lambda: A.DifferentiallyPrivateFactory.gaussian_fixed(1.0, 10, 1.0),
     '<dp_query_metrics=<>,dp=<>>@SERVER'),
    (lambda: A.DifferentiallyPrivateFactory.gaussian_adaptive(1.0, 100),
     '<dp_query_metrics=<clip=float32>,dp=<>>@SERVER'),
    (lambda: A.EncodedSumFactory.quantize_above_threshold(8, 2),
     '<>@SERVER'),
])
def test_measurement_types_are_tff_087s_where_the_state_differs(
    make, measurements):
  process = make().create(V3)
  output_type = measured.result_type(process.next)
  assert str(output_type.measurements) == measurements
  assert str(output_type.result) == 'float32[3]@SERVER'


def test_the_quantile_estimator_is_tff_087s():
  process = _quantile()
  assert str(process.next.type_signature) == (
      f'(<state={_Q_STATE}@SERVER,value={{float32}}@CLIENTS> -> '
      f'{_Q_STATE}@SERVER)')
  assert str(process.report.type_signature) == (
      f'({_Q_STATE}@SERVER -> float32@SERVER)')
  state = process.initialize()
  estimates = []
  for _ in range(3):
    state = process.next(state, [0.5, 3.0, 51.0])
    estimates.append(float(process.report(state)))
  # TFF 0.87: one of three norms is below C each round.
  np.testing.assert_allclose(estimates, [1.0338951, 1.0689392, 1.1051711],
                             rtol=1e-6)
  secure = A.PrivateQuantileEstimationProcess.no_noise(
      1.0, 0.5, 0.2, secure_estimation=True)
  state = secure.next(secure.initialize(), [0.5, 3.0, 51.0])
  np.testing.assert_allclose(secure.report(state), 1.0338951, rtol=1e-6)


def test_the_affine_quantile_estimator_reports_r_c_plus_i():
  process = A.PrivateQuantileEstimationProcess.no_noise(
      10.0, 0.98, math.log(10.0), multiplier=2.0, increment=1.0)
  state = process.initialize()
  assert float(process.report(state)) == 21.0  # TFF 0.87: 21.0, 42.149384.
  state = process.next(state, [0.5, 3.0, 51.0])
  np.testing.assert_allclose(process.report(state), 42.149384, rtol=1e-6)
  # An EstimationProcess is an IterativeProcess that compiles.
  form = tff.compile(process)
  new_state, metrics = tff.run_round(form, form.initialize(),
                                     [0.5, 3.0, 51.0])
  assert_same(new_state, state, exact=False)
  assert metrics == ()


# ----------------------------------------------------------------------------
# A custom aggregator, as in TFF's "Implementing Custom Aggregations".


@tff.tf_computation()
def _scale(value, factor):
  return tf.nest.map_structure(lambda x: x * factor, value)


@tff.tf_computation()
def _unscale(value, factor):
  return tf.nest.map_structure(lambda x: x / factor, value)


@tff.tf_computation()
def _add_one(value):
  return value + 1.0


class ExampleTaskFactory(tff.aggregators.UnweightedAggregationFactory):
  """Scales values by the round number before an inner sum, and back."""

  def __init__(self, inner_factory=None):
    if inner_factory is None:
      inner_factory = tff.aggregators.SumFactory()
    self._inner_factory = inner_factory

  def create(self, value_type):
    inner_process = self._inner_factory.create(value_type)

    @tff.federated_computation()
    def initialize_fn():
      my_state = tff.federated_value(0.0, tff.SERVER)
      inner_state = inner_process.initialize()
      return tff.federated_zip((my_state, inner_state))

    @tff.federated_computation(initialize_fn.type_signature.result,
                               tff.type_at_clients(value_type))
    def next_fn(state, value):
      my_state, inner_state = state
      my_new_state = tff.federated_map(_add_one, my_state)
      my_state_at_clients = tff.federated_broadcast(my_new_state)
      scaled_value = tff.federated_map(_scale, (value, my_state_at_clients))
      inner_output = inner_process.next(inner_state, scaled_value)
      unscaled_value = tff.federated_map(_unscale, (inner_output.result,
                                                    my_new_state))
      new_state = tff.federated_zip((my_new_state, inner_output.state))
      measurements = tff.federated_zip(collections.OrderedDict(
          scaled_value=inner_output.result,
          example_task=inner_output.measurements))
      return tff.templates.MeasuredProcessOutput(
          state=new_state, result=unscaled_value, measurements=measurements)

    return tff.templates.AggregationProcess(initialize_fn, next_fn)


def test_a_custom_aggregator_runs_and_composes_as_in_the_tutorial():
  client_data = (1.0, 2.0, 5.0)
  factory = ExampleTaskFactory(ExampleTaskFactory())
  process = factory.create(tff.TensorType(np.float32))
  assert str(process.initialize.type_signature) == (
      '( -> <float32,<float32,<>>>@SERVER)')
  state = process.initialize()
  for round_number in (1, 2):
    output = process.next(state, client_data)
    state = output.state
    assert float(output.result) == 8.0
    # Each level multiplies by its round number: inner sum of 8 r**2.
    assert float(output.measurements['scaled_value']) == 8.0 * round_number
    assert float(output.measurements['example_task']['scaled_value']) == (
        8.0 * round_number**2)
  outputs = _rounds(ExampleTaskFactory(ExampleTaskFactory()), 2,
                    [np.float32(v) for v in client_data], value_type=F)
  assert float(outputs[1].measurements['example_task']['scaled_value']) == 32


def test_a_custom_aggregator_is_an_inner_factory_too():
  outputs = _rounds(A.MeanFactory(value_sum_factory=ExampleTaskFactory()))
  _close(outputs[0].result, _od(*TFF_087['MeanFactory'][1]))
  assert list(outputs[0].measurements['mean_value']) == [
      'scaled_value', 'example_task']


# ----------------------------------------------------------------------------
# Factory by factory


def test_the_mean_divides_by_zero_weight_as_asked():
  zeros = [np.float32(0)] * 3
  nan, = _rounds(A.MeanFactory(), 1, weights=zeros)
  assert np.isnan(nan.result['b'])
  zero, = _rounds(A.MeanFactory(no_nan_division=True), 1, weights=zeros)
  assert float(zero.result['b']) == 0.0
  integer, = _rounds(A.MeanFactory(), 1)
  _close(integer.result, _od(*TFF_087['MeanFactory'][1]))


def test_encoded_sums_quantize_large_tensors_only():
  value_type = collections.OrderedDict(big=tff.TensorType(np.float32, [400]),
                                       small=tff.TensorType(np.float32, [3]))
  rng = np.random.default_rng(1)
  clients = [collections.OrderedDict(
      big=rng.normal(size=400).astype(np.float32),
      small=rng.normal(size=3).astype(np.float32)) for _ in range(4)]
  factory = A.EncodedSumFactory.quantize_above_threshold(
      quantization_bits=6, threshold=100)
  output, = _rounds(factory, 1, clients, value_type=value_type)
  exact = sum(c['small'] for c in clients)
  np.testing.assert_allclose(output.result['small'], exact, rtol=1e-6)
  true_big = sum(c['big'] for c in clients)
  step = sum(np.ptp(c['big']) for c in clients) / 63
  error = np.abs(output.result['big'] - true_big)
  assert error.max() <= step and error.max() > 0  # Lossy, within a level.
  assert output.measurements == ()


def test_an_encoded_sum_inside_a_mean_composes():
  factory = A.MeanFactory(A.EncodedSumFactory(
      lambda spec: te.encoders.as_gather_encoder(te.encoders.identity(),
                                                 spec)))
  outputs = _rounds(factory)
  _close(outputs[1].result, _od(*TFF_087['MeanFactory'][2]))


def test_dp_noise_has_the_calibrated_spread():
  value_type = tff.TensorType(np.float32, [20000])
  clients = [np.zeros(20000, np.float32)] * 3
  factory = A.DifferentiallyPrivateFactory.gaussian_fixed(1.0, 4, 2.0,
                                                          seed=7)
  first, second = _rounds(factory, 2, clients, value_type=value_type)
  # Noise z C on the sum, divided by the 4 expected clients: stddev 0.5.
  for output in (first, second):
    assert abs(np.std(output.result) - 0.5) < 0.015
    assert abs(np.mean(output.result)) < 0.015
  assert not np.allclose(first.result, second.result)  # Fresh each round.
  again = factory.create(value_type)
  assert_same(again.next(again.initialize(), clients).result, first.result,
              exact=True)  # The seed fixes it.


def test_adaptive_dp_splits_the_noise_as_tff():
  # TFF 0.87's adaptive_clip_noise_params: (1.005037815259212, 5.0).
  factory = A.DifferentiallyPrivateFactory.gaussian_adaptive(1.0, 100)
  assert factory.value_noise_multiplier == pytest.approx(1.005037815259212)
  assert factory.clipped_count_stddev == 5.0
  assert factory.noise_multiplier == 1.0
  factory = A.DifferentiallyPrivateFactory.gaussian_adaptive(
      0.5, 20, clipped_count_stddev=1.0)
  assert factory.value_noise_multiplier == pytest.approx(0.5163977794943223)
  with pytest.raises(ValueError, match='clipped_count_stddev = 0.5'):
    A.DifferentiallyPrivateFactory.gaussian_adaptive(1.0, 10)


def test_the_bounds_of_secure_sums_adapt_with_two_estimators():
  upper = A.PrivateQuantileEstimationProcess.no_noise(2.0, 0.5, 0.5)
  lower = A.PrivateQuantileEstimationProcess.no_noise(1.0, 0.5, 0.5)
  first, second = _rounds(A.SecureSumFactory(upper, lower))
  # TFF 0.87: round 1 clips to [1, 2]; then the upper estimator has learnt
  # from the clients' maxima, the lower one from their minima.
  _close(first.result, _od([4.0, 4.0, 3.0], 4.0), rtol=1e-5)
  assert first.measurements == _secure_m(1, 3, 2.0, 1.0)
  _close(second.result, _od([3.618889570236206, 3.397690534591675,
                             2.336402416229248], 3.618889570236206), 1e-5)
  _close(second.measurements, _secure_m(2, 3, 1.8400888, 0.7788008), 1e-5)


# ----------------------------------------------------------------------------
# What is refused, and why


@pytest.mark.parametrize('make, error, message', [
    (lambda: A.MeanFactory(value_sum_factory=A.MeanFactory()),
     tff.Error, 'value_sum_factory must be a UnweightedAggregationFactory'),
    (lambda: A.MeanFactory(no_nan_division=1), tff.Error, 'must be a bool'),
    (lambda: A.clipping_factory('1.0', A.MeanFactory()), tff.Error,
     'clipping_norm must be a float or an EstimationProcess'),
    (lambda: A.clipping_factory(1.0, object()), tff.Error,
     'inner_agg_factory must be'),
    (lambda: A.zeroing_factory(1.0, A.SumFactory(), norm_order=3.0),
     ValueError, 'norm_order must be 1.0, 2.0 or infinity'),
    (lambda: A.SecureSumFactory(1, 0.5), tff.Error, 'of one kind'),
    (lambda: A.SecureSumFactory(-1.0), ValueError, 'must be positive'),
    (lambda: A.SecureSumFactory(1.0, 2.0), ValueError, 'must be larger'),
    (lambda: A.SecureSumFactory(5).create(F), tff.Error,
     'integer bounds sum integer values'),
    (lambda: A.MeanFactory().create(tff.TensorType(np.int32, [2]), F),
     tff.Error, 'floating dtype'),
    (lambda: A.SumFactory().create(tff.type_at_clients(F)), tff.Error,
     'must be unplaced'),
    (lambda: A.EncodedSumFactory.quantize_above_threshold(17), ValueError,
     'quantization_bits must be an int in \\[1, 16\\]'),
    (lambda: A.EncodedSumFactory(lambda spec: None).create(V), tff.Error,
     'as_gather_encoder'),
    (lambda: A.DifferentiallyPrivateFactory.gaussian_fixed(-1.0, 4, 1.0),
     ValueError, 'noise_multiplier must be nonnegative'),
    (lambda: A.DifferentiallyPrivateFactory(object()), tff.Error,
     'tensorflow_privacy queries'),
    (lambda: A.PrivateQuantileEstimationProcess.no_noise(1.0, 1.5, 0.2),
     ValueError, 'target_quantile must be in'),
    (lambda: mua.ddp_secure_aggregator(1.0, 100, bits=23), ValueError,
     'DistributedDpSumFactory: bits must be in \\[1, 22\\]'),
    (lambda: mua.robust_aggregator(
        debug_measurements_fn=lambda f: A.SumFactory()), tff.Error,
     'must return a WeightedAggregationFactory'),
])
def test_misuse_is_refused_by_name(make, error, message):
  with pytest.raises(error, match=message):
    make()


def test_the_recommended_aggregators_take_their_weightedness():
  for make in (mua.robust_aggregator, mua.compression_aggregator,
               mua.secure_aggregator):
    assert isinstance(make(), A.WeightedAggregationFactory)
    assert isinstance(make(weighted=False), A.UnweightedAggregationFactory)
  assert isinstance(mua.dp_aggregator(1.0, 100),
                    A.UnweightedAggregationFactory)
  with pytest.raises(TypeError):
    mua.robust_aggregator(False)  # Keyword-only, as in TFF.


def test_compression_quantizes_a_large_update():
  value_type = tff.TensorType(np.float32, [20001])
  rng = np.random.default_rng(2)
  clients = [rng.normal(size=20001).astype(np.float32) * 0.01
             for _ in range(3)]
  output, = _rounds(mua.compression_aggregator(zeroing=False,
                                               clipping=False), 1,
                    clients, value_type=value_type)
  true = np.average(clients, axis=0, weights=WEIGHTS)
  error = np.abs(output.result - true).max()
  assert 0 < error < 2 * max(np.ptp(c) for c in clients) / 255
