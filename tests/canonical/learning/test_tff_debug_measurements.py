"""`tff.learning.add_debug_measurements` and
`add_debug_measurements_with_mixed_dtype`: the measurements TFF 0.87
printed for the same client values and weights (and for one FedAvg round
of tests/support/tff_087_examples.py)."""

import collections

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff
from tff_087_examples import client_data
from tff_087_examples import model_fn

VALUE_TYPE = (tf.TensorSpec([3], tf.float32), tf.TensorSpec([2], tf.float32))
VALUES = [
    (np.array([-1., -3., -5.], np.float32), np.array([2., 0.5], np.float32)),
    (np.array([-1., -3., 1.], np.float32), np.array([0., 1.5], np.float32)),
    (np.array([4., 0., 2.], np.float32), np.array([-2., 1.], np.float32)),
]
WEIGHTS = [1.0, 3.0, 2.0]
# TFF 0.87: (average_client_norm, std_dev_client_norm, server_update_max,
# server_update_norm, server_update_min).
TFF_WEIGHTED = (4.5308576, 1.260734, 1.1666666, 2.4551535, -2.0)
TFF_UNWEIGHTED = (4.9683456, 1.3127507, 1.0, 2.4267035, -2.0)
TFF_MIXED = (7.0456104, 1.1039735, 12.0, 12.3288279, 0.0)
TFF_FED_AVG = (0.2444308, 0.0755249, 0.1150128, 0.2207388, -0.1212616)
NAMES = ('average_client_norm', 'std_dev_client_norm', 'server_update_max',
         'server_update_norm', 'server_update_min')


def _debug(measurements):
  return tuple(float(measurements[name]) for name in NAMES)


def test_weighted_debug_measurements_weigh_the_client_norms():
  process = tff.learning.add_debug_measurements(
      tff.aggregators.MeanFactory()).create(VALUE_TYPE,
                                            tf.TensorSpec([], tf.float32))
  output = process.next(process.initialize(), VALUES, WEIGHTS)
  np.testing.assert_allclose(output.result[0], [2 / 3, -2.0, 1 / 3],
                             rtol=1e-6)
  assert list(output.measurements) == ['mean_value', 'mean_weight',
                                       *NAMES]
  assert _debug(output.measurements) == pytest.approx(TFF_WEIGHTED, rel=1e-6)


def test_unweighted_debug_measurements_count_clients_the_same():
  process = tff.learning.add_debug_measurements(
      tff.aggregators.UnweightedMeanFactory()).create(VALUE_TYPE)
  output = process.next(process.initialize(), VALUES)
  assert list(output.measurements)[:2] == ['mean_value', 'mean_count']
  assert _debug(output.measurements) == pytest.approx(TFF_UNWEIGHTED,
                                                      rel=1e-6)


def test_mixed_dtype_debug_measurements_are_float32():
  mixed_type = (tf.TensorSpec([3], tf.float32), tf.TensorSpec([2], tf.float64))
  process = tff.learning.add_debug_measurements_with_mixed_dtype(
      tff.aggregators.SumFactory()).create(mixed_type)
  output = process.next(process.initialize(), [
      (np.array([1, -3, 5], np.float32), np.array([2., 0.5])),
      (np.array([-1, 3, 7], np.float32), np.array([0., 1.5]))])
  assert str(process.next.type_signature) == (
      '(<state=<>@SERVER,value={<float32[3],float64[2]>}@CLIENTS> -> '
      '<state=<>@SERVER,result=<float32[3],float64[2]>@SERVER,measurements='
      '<average_client_norm=float32,std_dev_client_norm=float32,'
      'server_update_max=float32,server_update_norm=float32,'
      'server_update_min=float32>@SERVER>)')
  assert _debug(output.measurements) == pytest.approx(TFF_MIXED, rel=1e-6)


@pytest.mark.slow
def test_debug_measurements_in_fed_avg_compile():
  process = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn, tff.learning.optimizers.build_sgdm(0.1),
      model_aggregator=tff.learning.add_debug_measurements(
          tff.aggregators.MeanFactory()))
  output = process.next(process.initialize(), client_data())
  assert _debug(output.metrics['aggregator']) == pytest.approx(TFF_FED_AVG,
                                                               rel=1e-5)
  form = tff.compile(process)
  _, metrics = tff.run_round(form, form.initialize(), client_data())
  assert _debug(metrics['aggregator']) == pytest.approx(TFF_FED_AVG,
                                                        rel=1e-5)


def test_debug_measurements_name_a_wrong_factory():
  with pytest.raises(TypeError, match='AggregationFactory'):
    tff.learning.add_debug_measurements(collections.OrderedDict())
