"""TFF 0.87's `build_weighted_fed_avg` / `build_unweighted_fed_avg`, written
as its tutorials write them. The expected weights and metrics were printed
by TensorFlow Federated 0.87 for the same model, data and optimizers."""

import collections

import numpy as np
import pytest

import canonical as tff
from tff_087_examples import client_data
from tff_087_examples import model_fn

# TFF 0.87, two rounds of build_weighted_fed_avg(client sgdm 0.1, server
# sgdm 1.0) from zero weights: the kernel's first row and the bias.
TFF_WEIGHTED = [
    ([-0.115, 0.0685, 0.0465], [0.1213, -0.0369, -0.0844]),
    ([-0.2132, 0.1287, 0.0845], [0.2245, -0.0658, -0.1587]),
]
TFF_WEIGHTED_METRICS = [(0.5, 1.0763588), (0.875, 0.9175571)]
# One round of build_unweighted_fed_avg(model_aggregator=UnweightedMeanFactory()).
TFF_UNWEIGHTED = ([-0.1019, 0.0644, 0.0375], [0.1134, -0.033, -0.0805])


def _first_row_and_bias(weights):
  kernel, bias = weights.trainable
  return np.asarray(kernel)[0], np.asarray(bias)


def test_weighted_fed_avg_takes_tffs_steps_and_reports_tffs_metrics():
  process = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=0.1),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=1.0))
  data = client_data()
  state = process.initialize()
  assert isinstance(state, tff.learning.templates.LearningAlgorithmState)
  for (row, bias), (accuracy, loss) in zip(TFF_WEIGHTED,
                                           TFF_WEIGHTED_METRICS):
    output = process.next(state, data)
    assert isinstance(output, tff.learning.templates.LearningProcessOutput)
    state, metrics = output.state, output.metrics
    got_row, got_bias = _first_row_and_bias(process.get_model_weights(state))
    np.testing.assert_allclose(got_row, row, atol=1e-4)
    np.testing.assert_allclose(got_bias, bias, atol=1e-4)
    assert metrics == collections.OrderedDict(
        distributor=(),
        client_work=collections.OrderedDict(train=collections.OrderedDict(
            sparse_categorical_accuracy=pytest.approx(accuracy),
            loss=pytest.approx(loss, rel=1e-5), num_examples=8,
            num_batches=5)),
        aggregator=collections.OrderedDict(mean_value=(), mean_weight=()),
        finalizer=collections.OrderedDict(update_non_finite=0))
  assert str(process.next.type_signature.parameter['client_data']) == (
      '{<float32[?,4],int32[?]>*}@CLIENTS')


def test_unweighted_fed_avg_counts_every_client_the_same():
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=0.1),
      model_aggregator=tff.aggregators.UnweightedMeanFactory())
  output = process.next(process.initialize(), client_data())
  row, bias = _first_row_and_bias(process.get_model_weights(output.state))
  np.testing.assert_allclose(row, TFF_UNWEIGHTED[0], atol=1e-4)
  np.testing.assert_allclose(bias, TFF_UNWEIGHTED[1], atol=1e-4)
  assert output.metrics['aggregator'] == collections.OrderedDict(
      mean_value=(), mean_count=())


def test_a_learning_process_compiles_and_its_form_runs_the_same_round():
  process = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn, tff.learning.optimizers.build_sgdm(learning_rate=0.1))
  form = tff.compile(process)
  data = client_data()
  state, metrics = tff.run_round(form, form.initialize(), data)
  local = process.next(process.initialize(), data)
  np.testing.assert_allclose(
      state.global_model_weights.trainable[0],
      local.state.global_model_weights.trainable[0], atol=1e-6)
  assert float(metrics['client_work']['train']['loss']) == pytest.approx(
      float(local.metrics['client_work']['train']['loss']))


def test_set_model_weights_replaces_the_model_in_the_state():
  process = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn, tff.learning.optimizers.build_sgdm(learning_rate=0.1))
  state = process.initialize()
  weights = process.get_model_weights(state)
  ones = tff.learning.models.ModelWeights(
      tuple(np.ones_like(w) for w in weights.trainable), ())
  state = process.set_model_weights(state, ones)
  assert np.all(process.get_model_weights(state).trainable[1] == 1.0)


def test_a_client_optimizer_learning_rate_set_in_the_state_is_used():
  process = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn, tff.learning.optimizers.build_sgdm(learning_rate=0.1))
  state = process.initialize()
  assert float(state.client_work['learning_rate']) == pytest.approx(0.1)
  slow = state._replace(client_work=collections.OrderedDict(
      learning_rate=np.float32(0.0)))
  output = process.next(slow, client_data())
  assert np.all(process.get_model_weights(output.state).trainable[1] == 0.0)


def test_an_unweighted_factory_for_a_weighted_average_is_named():
  with pytest.raises(TypeError, match='WeightedAggregationFactory.*'
                     'build_unweighted_fed_avg'):
    tff.learning.algorithms.build_weighted_fed_avg(
        model_fn, tff.learning.optimizers.build_sgdm(learning_rate=0.1),
        model_aggregator=tff.aggregators.UnweightedMeanFactory())


def test_a_variable_model_is_refused_naming_the_functional_way():

  class MyModel(tff.learning.models.VariableModel):
    pass

  with pytest.raises(TypeError, match='MyModel.*VariableModel.*'
                     'from_keras_model'):
    tff.learning.algorithms.build_weighted_fed_avg(
        MyModel, tff.learning.optimizers.build_sgdm(learning_rate=0.1))
