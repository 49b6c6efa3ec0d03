"""The aggregators of issue 36 inside TFF 0.87's learning algorithms, as a TFF
user passes them (`model_aggregator=`): the weights and aggregator metrics
after two rounds are those TFF 0.87 printed for the same model, data and
aggregator (tests/support/tff_087_examples.py)."""

import collections

import numpy as np
import pytest

import canonical as tff
from tff_087_examples import client_data
from tff_087_examples import model_fn

A = tff.aggregators


def _sgd(learning_rate):
  return tff.learning.optimizers.build_sgdm(learning_rate=learning_rate)


def _od(**kwargs):
  return collections.OrderedDict(kwargs)


# FedSGD with an unweighted DP mean (no noise, clip 1, 2 clients a round).
_FED_SGD_DP = [
    ([-0.039344, 0.027829, 0.011514], [0.04, -0.006667, -0.033333]),
    ([-0.076958, 0.054726, 0.022232], [0.07793, -0.012674, -0.065256])]
# Unweighted FedAvg (client sgdm 0.1); a rotation or a secure modular count
# leaves TFF's plain unweighted mean.
_UNWEIGHTED = [
    ([-0.101862, 0.064397, 0.037465], [0.113414, -0.032964, -0.08045]),
    ([-0.190826, 0.122212, 0.068614], [0.211696, -0.059439, -0.152258])]
# Weighted FedAvg (client sgdm 0.1): TFF's plain weighted mean.
_WEIGHTED = [
    ([-0.115013, 0.068547, 0.046466], [0.121262, -0.036886, -0.084376]),
    ([-0.213184, 0.128706, 0.084479], [0.224476, -0.065809, -0.158667])]
# FedSGD (server sgdm 0.1) with a measured weighted mean.
_FED_SGD = [
    ([-0.043413, 0.028139, 0.015274], [0.041667, -0.008333, -0.033333]),
    ([-0.084612, 0.05516, 0.029452], [0.081075, -0.015841, -0.065234])]

# name: (process, [per round: kernel's first row, bias], aggregator metrics),
# as TFF 0.87 printed them.
TFF_087 = {
    'fed_sgd_dp': (
        lambda: tff.learning.algorithms.build_fed_sgd(
            model_fn, model_aggregator=A.as_weighted_aggregator(
                A.DifferentiallyPrivateFactory.gaussian_fixed(0.0, 2, 1.0))),
        _FED_SGD_DP, _od(dp_query_metrics=_od(), dp=())),
    'unweighted_hadamard': (
        lambda: tff.learning.algorithms.build_unweighted_fed_avg(
            model_fn, _sgd(0.1), model_aggregator=A.UnweightedMeanFactory(
                A.HadamardTransformFactory())),
        _UNWEIGHTED, _od(mean_value=_od(hd=()), mean_count=())),
    'weighted_dft': (
        lambda: tff.learning.algorithms.build_weighted_fed_avg(
            model_fn, _sgd(0.1), model_aggregator=A.MeanFactory(
                A.DiscreteFourierTransformFactory(num_repeats=2))),
        _WEIGHTED, _od(mean_value=_od(dft=()), mean_weight=())),
    'weighted_concat': (
        lambda: tff.learning.algorithms.build_weighted_fed_avg(
            model_fn, _sgd(0.1),
            model_aggregator=A.concat_factory(A.MeanFactory())),
        _WEIGHTED, _od(mean_value=(), mean_weight=())),
    'fed_sgd_measured': (
        lambda: tff.learning.algorithms.build_fed_sgd(
            model_fn, model_aggregator=A.add_measurements(
                A.MeanFactory(), client_measurement_fn=lambda v, w: _od(
                    total_weight=tff.federated_sum(w)))),
        _FED_SGD, _od(mean_value=(), mean_weight=(), total_weight=8.0)),
    'unweighted_modular_count': (
        lambda: tff.learning.algorithms.build_unweighted_fed_avg(
            model_fn, _sgd(0.1), model_aggregator=A.UnweightedMeanFactory(
                count_sum_factory=A.SecureModularSumFactory(1000))),
        _UNWEIGHTED, _od(mean_value=(), mean_count=())),
}


@pytest.mark.parametrize('name', sorted(TFF_087))
def test_learning_with_these_aggregators_gives_tff_087s_numbers(name):
  make, weights, aggregator_metrics = TFF_087[name]
  process = make()
  state = process.initialize()
  data = client_data()
  for row, bias in weights:
    output = process.next(state, data)
    state = output.state
    kernel, got_bias = process.get_model_weights(state).trainable
    np.testing.assert_allclose(np.asarray(kernel)[0], row, atol=2e-6)
    np.testing.assert_allclose(got_bias, bias, atol=2e-6)
    assert output.metrics['aggregator'] == aggregator_metrics

