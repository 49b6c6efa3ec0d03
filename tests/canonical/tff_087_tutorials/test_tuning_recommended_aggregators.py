"""TFF 0.87's "Tuning recommended aggregations for learning", its programs
written as a TFF user writes them, with only the import line changed. The
tutorial builds aggregators without running them; here each one runs three
rounds on the same four weighted client values, and the results, measurements
and adapted norms are the ones TFF 0.87 gives for the same program and data
(its secure sums run by `tff.backends.test.set_sync_test_cpp_execution_context`
there). Then each recommended aggregator parameterizes federated averaging,
as the tutorial says it does, with TFF's numbers again.

Two differences in state, by design: a DP factory's state holds a round
counter (`noise_round`) where TFF's holds the `dp_event` and
`is_init_state`, and an `EncodedSumFactory`'s state holds one too where
TFF's is empty: here a piece draws its noise and its rounding from
stateless random ops seeded by its inputs (TFF's draw from stateful ones).
Randomized rounding therefore rounds differently from TFF's, within its
quantization step. The tests below do not assert on those state types.
"""

import collections
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

import canonical as tff

VALUE_TYPE = tff.TensorType(np.float32, [3])
WEIGHT_TYPE = tff.TensorType(np.float32)
VALUES = [np.array([1.0, 2.0, 2.0], np.float32),
          np.array([0.5, -0.5, 0.0], np.float32),
          np.array([30.0, 40.0, 0.0], np.float32),  # Corrupt: far too large.
          np.array([-1.0, 0.0, 1.0], np.float32)]
WEIGHTS = [1.0, 2.0, 1.0, 4.0]
MEAN = [3.5, 5.125, 0.75]  # The weighted mean, nothing zeroed or clipped.
MEAN_WITHOUT_CORRUPT = [-0.25, 0.125, 0.75]
NO_MEASUREMENTS = collections.OrderedDict(mean_value=(), mean_weight=())


def _run(factory, rounds=3, weighted=True):
  """(results, measurements, final state) of `rounds` rounds."""
  if weighted:
    process = factory.create(VALUE_TYPE, WEIGHT_TYPE)
  else:
    process = factory.create(VALUE_TYPE)
  state = process.initialize()
  results, measurements = [], []
  for _ in range(rounds):
    if weighted:
      output = process.next(state, VALUES, WEIGHTS)
    else:
      output = process.next(state, VALUES)
    state = output.state
    results.append(output.result)
    measurements.append(output.measurements)
  return results, measurements, state


def _close(got, want, atol=1e-4):
  np.testing.assert_allclose(np.array(got, np.float64), want, atol=atol)


def test_hello_world():
  assert tff.federated_computation(lambda: 'Hello, World!')() == (
      b'Hello, World!')


def test_the_baseline_mean():
  mean = tff.aggregators.MeanFactory()
  assert isinstance(mean, tff.aggregators.WeightedAggregationFactory)
  results, measurements, state = _run(mean)
  _close(results, [MEAN] * 3)
  assert measurements == [NO_MEASUREMENTS] * 3
  assert state == collections.OrderedDict(value_sum_process=(),
                                          weight_sum_process=())


def test_quantile_matching_adapts_to_the_median():
  median_estimate = tff.aggregators.PrivateQuantileEstimationProcess.no_noise(
      initial_estimate=1.0, target_quantile=0.5, learning_rate=0.2)
  assert str(median_estimate.report.type_signature) == (
      '(<<current_estimate=float32,target_quantile=float32,learning_rate='
      'float32,below_estimate_state=<>>,<>>@SERVER -> float32@SERVER)')
  state = median_estimate.initialize()
  estimates = [median_estimate.report(state)]
  for _ in range(3):
    state = median_estimate.next(state, [0.5, 2.0, 3.0, 5.0])
    estimates.append(median_estimate.report(state))
  _close(estimates, [1.0, 1.0513, 1.1052, 1.1618])  # Geometric steps up.


def test_zeroing_with_a_constant_norm():
  zeroing_mean = tff.aggregators.zeroing_factory(
      zeroing_norm=10.0, inner_agg_factory=tff.aggregators.MeanFactory())
  results, measurements, _ = _run(zeroing_mean)
  _close(results, [MEAN_WITHOUT_CORRUPT] * 3)
  assert measurements[0] == collections.OrderedDict(
      zeroing=NO_MEASUREMENTS, zeroing_norm=10.0, zeroed_count=1)


def test_adaptive_zeroing_is_robust_aggregator_without_clipping():
  zeroing_norm = tff.aggregators.PrivateQuantileEstimationProcess.no_noise(
      initial_estimate=10.0,
      target_quantile=0.98,
      learning_rate=math.log(10),
      multiplier=2.0,
      increment=1.0)
  zeroing_mean = tff.aggregators.zeroing_factory(
      zeroing_norm=zeroing_norm,
      inner_agg_factory=tff.aggregators.MeanFactory())
  for factory in (zeroing_mean, tff.learning.robust_aggregator(clipping=False)):
    results, measurements, state = _run(factory)
    # The norm adapts above the largest value: the corrupt one passes in
    # round 3 (threshold Q * multiplier + increment).
    _close(results, [MEAN_WITHOUT_CORRUPT, MEAN_WITHOUT_CORRUPT, MEAN])
    _close([m['zeroing_norm'] for m in measurements],
           [21.0, 34.9649, 58.6806])
    assert [m['zeroed_count'] for m in measurements] == [1, 1, 0]
    _close(state['zeroing_norm'][0].current_estimate, 48.9779)


def test_adaptive_clipping_is_robust_aggregator_without_zeroing():
  clipping_norm = tff.aggregators.PrivateQuantileEstimationProcess.no_noise(
      initial_estimate=1.0, target_quantile=0.8, learning_rate=0.2)
  clipping_mean = tff.aggregators.clipping_factory(
      clipping_norm=clipping_norm,
      inner_agg_factory=tff.aggregators.MeanFactory())
  for factory in (clipping_mean,
                  tff.learning.robust_aggregator(zeroing=False)):
    results, measurements, state = _run(factory)
    _close(results, [[-0.1119, 0.0583, 0.4369], [-0.1394, 0.0797, 0.4877],
                     [-0.1702, 0.1034, 0.5444]])
    _close([m['clipping_norm'] for m in measurements],
           [1.0, 1.1163, 1.2461])
    assert [m['clipped_count'] for m in measurements] == [3, 3, 3]
    assert list(measurements[0]) == ['clipping', 'clipping_norm',
                                     'clipped_count']
    _close(state['clipping_norm'][0].current_estimate, 1.391)


def test_robust_aggregator_zeroes_then_clips():
  robust_results = [[-0.1869, -0.0417, 0.4369], [-0.2062, -0.0365, 0.4639],
                    [-0.1421, 0.0817, 0.4926]]
  results, measurements, _ = _run(tff.learning.robust_aggregator())
  _close(results, robust_results)
  assert measurements[2] == collections.OrderedDict(
      zeroing=collections.OrderedDict(
          clipping=NO_MEASUREMENTS,
          clipping_norm=pytest.approx(1.127497),
          clipped_count=3),
      zeroing_norm=pytest.approx(58.680634),
      zeroed_count=0)

  results, measurements, _ = _run(
      tff.learning.robust_aggregator(weighted=False), weighted=False)
  _close(results, [[0.0316, 0.0417, 0.3434], [0.0258, 0.052, 0.3647],
                   [0.1888, 0.2884, 0.3872]])
  assert measurements[0]['zeroing']['clipping'] == collections.OrderedDict(
      mean_value=(), mean_count=())


def test_differential_privacy():
  dp_mean = tff.aggregators.DifferentiallyPrivateFactory.gaussian_adaptive(
      noise_multiplier=0.1, clients_per_round=100)
  assert isinstance(dp_mean, tff.aggregators.UnweightedAggregationFactory)
  same = tff.learning.dp_aggregator(
      noise_multiplier=0.1, clients_per_round=100, zeroing=False)
  for factory in (dp_mean, same):
    process = factory.create(VALUE_TYPE)
    assert str(process.next.type_signature.result.measurements) == (
        '<dp_query_metrics=<clip=float32>,dp=<>>@SERVER')
    assert str(process.next.type_signature.parameter['value']) == (
        '{float32[3]}@CLIENTS')

  # Without noise the adaptive clip is TFF's, round by round.
  results, measurements, _ = _run(
      tff.aggregators.DifferentiallyPrivateFactory.gaussian_adaptive(
          noise_multiplier=0.0, clients_per_round=4), weighted=False)
  _close(results, [[0.0233, 0.019, 0.0343], [0.0258, 0.021, 0.038],
                   [0.0285, 0.0232, 0.0419]])
  _close([m['dp_query_metrics']['clip'] for m in measurements],
         [0.1105, 0.1221, 0.135])


def test_lossy_compression():
  compressed_mean = tff.aggregators.MeanFactory(
      tff.aggregators.EncodedSumFactory.quantize_above_threshold(
          quantization_bits=8, threshold=20000))
  for factory in (compressed_mean, tff.learning.compression_aggregator(
      zeroing=False, clipping=False)):
    results, measurements, _ = _run(factory)
    _close(results, [MEAN] * 3)  # Three values: below the threshold.
    assert measurements == [NO_MEASUREMENTS] * 3

  # Above the threshold: rounded randomly to 8 bits, close to the mean (TFF
  # gives e.g. [3.4951, 5.123, 0.7495]).
  quantized_mean = tff.aggregators.MeanFactory(
      tff.aggregators.EncodedSumFactory.quantize_above_threshold(
          quantization_bits=8, threshold=2))
  results, _, _ = _run(quantized_mean)
  step = (40.0 - -1.0) / 255  # One quantization level of the widest value.
  _close(results, [MEAN] * 3, atol=step)
  assert not np.allclose(results[0], MEAN, atol=1e-4)


def _secure_measurements(upper, lower):
  return collections.OrderedDict(
      secure_upper_clipped_count=0, secure_lower_clipped_count=0,
      secure_upper_threshold=pytest.approx(upper),
      secure_lower_threshold=pytest.approx(lower))


def test_secure_aggregation():
  my_secagg_bound = 50.0
  secure_mean = tff.aggregators.MeanFactory(
      tff.aggregators.SecureSumFactory(my_secagg_bound))
  results, measurements, _ = _run(secure_mean)
  _close(results, [MEAN] * 3)
  assert measurements[0] == collections.OrderedDict(
      mean_value=_secure_measurements(50.0, -50.0), mean_weight=())

  secagg_bound = tff.aggregators.PrivateQuantileEstimationProcess.no_noise(
      initial_estimate=50.0,
      target_quantile=0.95,
      learning_rate=1.0,
      multiplier=2.0)
  secure_mean = tff.aggregators.MeanFactory(
      tff.aggregators.SecureSumFactory(secagg_bound))
  results, measurements, state = _run(secure_mean)
  _close(results, [MEAN] * 3)
  assert [m['mean_value']['secure_upper_threshold'] for m in measurements] == (
      [pytest.approx(100.0), pytest.approx(95.12294),
       pytest.approx(90.483734)])
  _close(state['value_sum_process'][0].current_estimate, 43.0354)

  max_weight = 10.0
  secure_mean = tff.aggregators.MeanFactory(
      value_sum_factory=tff.aggregators.SecureSumFactory(secagg_bound),
      weight_sum_factory=tff.aggregators.SecureSumFactory(
          upper_bound_threshold=max_weight, lower_bound_threshold=0.0))
  results, measurements, _ = _run(secure_mean)
  _close(results, [MEAN] * 3)
  assert measurements[0]['mean_weight'] == _secure_measurements(10.0, 0.0)

  results, measurements, _ = _run(
      tff.learning.secure_aggregator(zeroing=False, clipping=False))
  _close(results, [MEAN] * 3)
  assert measurements[0]['mean_weight'] == _secure_measurements(1048575.0,
                                                                0.0)


def test_composing_zeroing_clipping_and_compression():
  my_clipping_constant = 5.0
  my_zeroing_constant = 20.0
  # Compression is innermost because its pre-aggregation effects are last.
  compressed_mean = tff.aggregators.MeanFactory(
      tff.aggregators.EncodedSumFactory.quantize_above_threshold(
          quantization_bits=8, threshold=20000))
  # Compressed mean is inner aggregator to clipping...
  clipped_compressed_mean = tff.aggregators.clipping_factory(
      clipping_norm=my_clipping_constant,
      inner_agg_factory=compressed_mean)
  # ...which is inner aggregator to zeroing, since zeroing happens first.
  final_aggregator = tff.aggregators.zeroing_factory(
      zeroing_norm=my_zeroing_constant,
      inner_agg_factory=clipped_compressed_mean)
  process = final_aggregator.create(VALUE_TYPE, WEIGHT_TYPE)
  assert str(process.next.type_signature.result.measurements) == (
      '<zeroing=<clipping=<mean_value=<>,mean_weight=<>>,clipping_norm='
      'float32,clipped_count=int32>,zeroing_norm=float32,zeroed_count='
      'int32>@SERVER')
  results, measurements, _ = _run(final_aggregator)
  _close(results, [MEAN_WITHOUT_CORRUPT] * 3)
  assert measurements[0] == collections.OrderedDict(
      zeroing=collections.OrderedDict(clipping=NO_MEASUREMENTS,
                                      clipping_norm=5.0, clipped_count=0),
      zeroing_norm=20.0, zeroed_count=1)


def _client_datasets():
  rng = np.random.default_rng(0)
  datasets = []
  for _ in range(3):
    x = rng.normal(size=(6, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32).reshape(-1, 1)
    datasets.append(tf.data.Dataset.from_tensor_slices(
        collections.OrderedDict(x=x, y=y)).batch(3))
  return datasets


WEIGHTS_AFTER_TWO_ROUNDS = [
    [[-0.4899, 0.4899], [0.1105, -0.1105], [-0.0916, 0.0916],
     [0.0491, -0.0491]], [0.0933, -0.0933]]


@pytest.mark.parametrize('aggregator', ['robust', 'compression', 'secure'])
def test_the_aggregators_parameterize_federated_averaging(aggregator):
  data = _client_datasets()

  def model_fn():
    keras_model = keras.models.Sequential([
        keras.layers.InputLayer(input_shape=(4,)),
        keras.layers.Dense(2, kernel_initializer='zeros')])
    return tff.learning.models.from_keras_model(
        keras_model, input_spec=data[0].element_spec,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy()])

  model_aggregator = {
      'robust': tff.learning.robust_aggregator,
      'compression': tff.learning.compression_aggregator,
      'secure': tff.learning.secure_aggregator,
  }[aggregator]()
  iterative_process = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=0.5),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=1.0),
      model_aggregator=model_aggregator)
  state = iterative_process.initialize()
  for _ in range(2):
    result = iterative_process.next(state, data)
    state = result.state
  train = result.metrics['client_work']['train']
  assert train['num_examples'] == 18
  _close([train['sparse_categorical_accuracy'], train['loss']],
         [0.8333, 0.5056])
  weights = iterative_process.get_model_weights(state).trainable
  for got, want in zip(weights, WEIGHTS_AFTER_TWO_ROUNDS):
    _close(got, want)
  measurements = result.metrics['aggregator']
  # Update norms are small here: nothing zeroed or clipped, so the weights
  # are those of the plain weighted mean.
  assert measurements['zeroing_norm'] == pytest.approx(20.0999, abs=1e-4)
  assert measurements['zeroing']['clipping_norm'] == pytest.approx(
      0.9608, abs=1e-4)
  assert measurements['zeroing']['clipped_count'] == 0
  if aggregator == 'secure':
    assert measurements['zeroing']['clipping']['mean_value'][
        'secure_upper_threshold'] == pytest.approx(95.12294)
  # The round compiles; its form runs the first round as next() does.
  form = tff.compile(iterative_process)
  state, metrics = tff.run_round(form, form.initialize(), data)
  assert float(metrics['client_work']['train']['num_examples']) == 18
