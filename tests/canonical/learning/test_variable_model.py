"""A user-written `tff.learning.models.VariableModel` in TFF 0.87's learning
builders. The model is TFF's tutorial's (tests/support/
variable_model_examples.py); the expected numbers were printed by TFF 0.87
running the same program on the same data."""

import collections

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff
from variable_model_examples import client_data
from variable_model_examples import MnistModel

# TFF 0.87: two rounds of build_weighted_fed_avg(MnistModel, sgdm(0.1)).
TFF_TRAIN_METRICS = [(2.3059325, 0.0), (2.1456997, 1.0)]
TFF_KERNEL_ROW_0 = [0.11946845054626465, -0.015567801892757416,
                    -0.011022958904504776]
TFF_KERNEL_ROW_783 = [0.006379340775310993, -0.007325820624828339,
                      0.0012108269147574902]
TFF_BIAS = [0.07663419842720032, 0.04636356979608536, -0.0207661185413599,
            -0.020547660067677498, -0.032541871070861816,
            -0.0027041903231292963, -0.020813634619116783,
            -0.03257933259010315, 0.03952298313379288, -0.032567963004112244]
# build_fed_eval(MnistModel) at those weights.
TFF_EVAL = (1.9905721, 1.0)
# One round of build_fed_sgd(MnistModel).
TFF_FED_SGD_BIAS = [0.015000000596046448, 0.002500000176951289,
                    -0.003750000149011612, -0.0037500006146728992,
                    -0.003750000149011612, 0.0024999999441206455,
                    -0.0037500006146728992, -0.0037499999161809683,
                    0.0024999999441206455, -0.0037499999161809683]


def _metrics(loss, accuracy):
  return collections.OrderedDict(
      num_examples=16.0, loss=pytest.approx(loss, rel=1e-6),
      accuracy=accuracy)


def test_it_is_tffs_abstract_class():
  assert isinstance(MnistModel(), tff.learning.models.VariableModel)
  with pytest.raises(TypeError, match='abstract'):
    tff.learning.models.VariableModel()


@pytest.mark.slow
def test_fed_avg_trains_it_with_tffs_weights_and_metrics():
  process = tff.learning.algorithms.build_weighted_fed_avg(
      MnistModel,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1))
  assert str(process.next.type_signature.parameter['client_data']) == (
      '{<x=float32[?,784],y=int32[?,1]>*}@CLIENTS')
  state, data = process.initialize(), client_data()
  for loss, accuracy in TFF_TRAIN_METRICS:
    output = process.next(state, data)
    state = output.state
    assert output.metrics['client_work']['train'] == _metrics(loss, accuracy)
  kernel, bias = process.get_model_weights(state).trainable
  np.testing.assert_allclose(kernel[0, :3], TFF_KERNEL_ROW_0, rtol=1e-6)
  np.testing.assert_allclose(kernel[783, :3], TFF_KERNEL_ROW_783, rtol=1e-6)
  np.testing.assert_allclose(bias, TFF_BIAS, rtol=1e-6)

  evaluation = tff.learning.algorithms.build_fed_eval(MnistModel)
  eval_state = evaluation.set_model_weights(
      evaluation.initialize(), process.get_model_weights(state))
  metrics = evaluation.next(eval_state, data).metrics
  assert metrics['client_work']['eval']['current_round_metrics'] == (
      _metrics(*TFF_EVAL))


def test_fed_sgd_takes_its_gradient():
  process = tff.learning.algorithms.build_fed_sgd(MnistModel)
  output = process.next(process.initialize(), client_data())
  np.testing.assert_allclose(
      process.get_model_weights(output.state).trainable[1],
      TFF_FED_SGD_BIAS, rtol=1e-6)
  assert output.metrics['client_work']['train'] == _metrics(2.3025851, 0.25)


def test_a_model_fn_making_another_model_is_refused_by_name():
  made = []

  class Growing(MnistModel):

    def __init__(self):
      super().__init__()
      made.append(self)
      self._extra = [tf.Variable(tf.zeros([1])) for _ in made[1:]]

    @property
    def trainable_variables(self):
      return super().trainable_variables + self._extra

  with pytest.raises(tff.FederatedError, match='Growing: model_fn made a '
                     'model of [0-9]+ trainable variables.*every call must '
                     'make the same model'):
    tff.learning.algorithms.build_weighted_fed_avg(
        Growing, client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1))
