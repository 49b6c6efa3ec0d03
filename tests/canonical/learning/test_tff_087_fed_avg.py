"""TFF 0.87's `build_weighted_fed_avg` / `build_unweighted_fed_avg`, written
as its tutorials write them. The expected weights and metrics were printed
by TensorFlow Federated 0.87 for the same model, data and optimizers."""

import collections

import numpy as np
import pytest

import canonical as tff
from canonical.learning.algorithms import averaging
from canonical.learning.templates import model_delta
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


def test_a_variable_model_lacking_methods_is_refused_naming_them():
  # A complete one trains (tests/canonical/learning/test_variable_model.py).

  class MyModel(tff.learning.models.VariableModel):
    pass

  with pytest.raises(TypeError, match='MyModel.*forward_pass'):
    tff.learning.algorithms.build_weighted_fed_avg(
        MyModel, tff.learning.optimizers.build_sgdm(learning_rate=0.1))


# TFF 0.87 on the same model and data: FedSGD one round (server sgdm 0.1, and
# 0.5), FedProx two rounds (mu 0.5, client sgdm 0.1), and federated
# evaluation of that model on both clients, then on the first only.
TFF_FED_SGD = {0.1: ([-0.0434, 0.0281, 0.0153], [0.0417, -0.0083, -0.0333]),
               0.5: ([-0.2171, 0.1407, 0.0764], [0.2083, -0.0417, -0.1667])}
TFF_FED_PROX = ([-0.2214, 0.1341, 0.0873], [0.23, -0.0647, -0.1653])
TFF_EVAL = [
    dict(current=(0.875, 0.80381656, 8, 5), total=(0.875, 0.80381656, 8, 5)),
    dict(current=(0.8, 0.76584435, 5, 3), total=(0.84615386, 0.78921187, 13,
                                                 8)),
]


@pytest.mark.parametrize('learning_rate', [0.1, 0.5])
def test_fed_sgd_takes_tffs_step(learning_rate):
  kwargs = ({} if learning_rate == 0.1 else dict(
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate)))
  process = tff.learning.algorithms.build_fed_sgd(model_fn, **kwargs)
  state = process.initialize()
  assert state.client_work == ()
  output = process.next(state, client_data())
  row, bias = _first_row_and_bias(process.get_model_weights(output.state))
  np.testing.assert_allclose(row, TFF_FED_SGD[learning_rate][0], atol=1e-4)
  np.testing.assert_allclose(bias, TFF_FED_SGD[learning_rate][1], atol=1e-4)
  train = output.metrics['client_work']['train']
  assert train['loss'] == pytest.approx(np.log(3.0))  # At the zero model.
  assert (train['sparse_categorical_accuracy'], train['num_batches']) == (
      0.75, 5)


def _evaluation(metrics):
  return (pytest.approx(metrics['sparse_categorical_accuracy']),
          pytest.approx(metrics['loss'], rel=1e-5), metrics['num_examples'],
          metrics['num_batches'])


def _two_rounds(process, data):
  state = process.initialize()
  for _ in range(2):
    output = process.next(state, data)
    state = output.state
  return process.get_model_weights(state), output.metrics


def test_fed_prox_pulls_clients_toward_the_broadcast_model():
  data = client_data()
  sgd = tff.learning.optimizers.build_sgdm(0.1)
  avg, _ = _two_rounds(tff.learning.algorithms.build_weighted_fed_avg(
      model_fn, sgd), data)
  same, _ = _two_rounds(tff.learning.algorithms.build_weighted_fed_prox(
      model_fn, 0.0, sgd), data)
  prox, _ = _two_rounds(tff.learning.algorithms.build_weighted_fed_prox(
      model_fn, 0.5, sgd), data)
  np.testing.assert_allclose(same.trainable[0], avg.trainable[0], atol=1e-7)
  for p, a in zip(prox.trainable, avg.trainable):  # From the zero model.
    assert np.linalg.norm(p) < np.linalg.norm(a)


def _tff_fed_prox(data):
  """FedProx with TFF 0.87's proximal term: mu * (initial - current)."""
  away = averaging._build(  # pylint: disable=protected-access
      'test', model_fn, model_delta.training_step(
          tff.learning.optimizers.build_sgdm(0.1), -0.5,
          hparams_in_state=False),
      None, None, weighted=True, by_examples=True)
  return _two_rounds(away, data)


def test_fed_prox_differs_from_tff_only_by_the_sign_of_its_proximal_term():
  # TFF 0.87 pushes clients away from the broadcast model (the FedProx
  # paper's term is mu * (current - initial)); with mu negated ours takes
  # TFF's steps.
  weights, metrics = _tff_fed_prox(client_data())
  row, bias = _first_row_and_bias(weights)
  np.testing.assert_allclose(row, TFF_FED_PROX[0], atol=1e-4)
  np.testing.assert_allclose(bias, TFF_FED_PROX[1], atol=1e-4)
  assert metrics['client_work']['train']['loss'] == pytest.approx(
      0.91206443, rel=1e-5)


def test_fed_eval_gives_tffs_numbers_round_by_round():
  data = client_data()
  weights, _ = _tff_fed_prox(data)  # The model TFF evaluated.
  evaluation = tff.learning.algorithms.build_fed_eval(model_fn)
  state = evaluation.set_model_weights(evaluation.initialize(), weights)
  for clients, expected in zip((data, data[:1]), TFF_EVAL):
    output = evaluation.next(state, clients)
    state = output.state
    metrics = output.metrics['client_work']['eval']
    assert (pytest.approx(expected['current']) ==
            tuple(metrics['current_round_metrics'].values())[:4])
    assert (pytest.approx(expected['total']) ==
            tuple(metrics['total_rounds_metrics'].values())[:4])
  # Evaluation never moves the model.
  np.testing.assert_array_equal(
      evaluation.get_model_weights(state).trainable[1], weights.trainable[1])
