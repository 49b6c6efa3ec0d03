"""Error feedback inside TFF's FedAvg (our extension of TFF's API): with a
model aggregator whose value sum is `EncodedSumFactory(..., error_feedback=
True)`, `build_weighted_fed_avg` / `build_unweighted_fed_avg` give a process
that keeps each client's residual as client state; the Python call and the
compiled form agree, and our older builder composes the same process.
"""

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff
from canonical.executors import compiled
from canonical import learning
from canonical.learning import algorithms
from canonical.learning import framework
import error_feedback_examples as ef
import tff_087_examples as example

SGDM = tff.learning.optimizers.build_sgdm


def _form_rounds(process, rounds):
  form = tff.compile(process)
  state, residuals = form.initialize(), None
  for _ in range(rounds):
    state, _, residuals = tff.run_round(form, state, example.client_data(),
                                        client_states=residuals)
  return state, residuals


def test_fed_avg_keeps_each_clients_residual_as_tff_calls_it():
  process = ef.fed_avg()
  assert process.has_client_state
  # The call TFF's users make runs compiled (batched work), not the
  # reference executor, client state and all.
  assert compiled.compiled_round(process.next) is not None
  assert isinstance(process, tff.learning.templates.LearningProcess)
  state = process.initialize()
  residuals = [process.client_state_initializer()] * 2
  for _ in range(2):
    output = process.next(state, example.client_data(), residuals)
    assert isinstance(
        output, tff.learning.templates.LearningProcessOutputWithClientState)
    state, residuals = output.state, output.client_state
  kernel = [np.asarray(r[0]) for r in residuals]
  assert all(np.count_nonzero(k) for k in kernel)  # Something was kept.
  form_state, form_residuals = _form_rounds(process, 2)
  for a, b in zip(tf.nest.flatten((state, residuals)),
                  tf.nest.flatten((form_state, form_residuals))):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_unweighted_fed_avg_keeps_the_residual_too():
  process = algorithms.build_unweighted_fed_avg(
      example.model_fn, SGDM(0.5), model_aggregator=(
          tff.aggregators.UnweightedMeanFactory(
              tff.aggregators.EncodedSumFactory(ef.top_half,
                                                error_feedback=True))))
  _, residuals = _form_rounds(process, 1)
  assert np.count_nonzero(residuals[0][0])


def test_the_older_builder_is_tffs_fed_avg_bit_for_bit():
  """Our older builder with an error-feedback mean composes TFF's FedAvg
  over that mean's factory: the same models and residuals, bit for bit."""
  model = example.functional_model()
  older = algorithms.build_federated_averaging_process(
      model, client_optimizer_fn=lambda: learning.sgd(0.5),
      aggregation_process=framework.build_encoded_mean_process_from_model(
          model, ef.top_half, error_feedback=True))
  assert older.has_client_state
  ours_state, ours_residuals = _form_rounds(ef.fed_avg(
      model), 3)
  older_state, older_residuals = _form_rounds(older, 3)
  for a, b in zip(tf.nest.flatten((ours_state.global_model_weights,
                                   ours_residuals)),
                  tf.nest.flatten((older_state.global_model_weights,
                                   older_residuals))):
    np.testing.assert_array_equal(a, b)
  assert any(np.count_nonzero(r) for r in tf.nest.flatten(ours_residuals))


def test_a_stateless_aggregator_keeps_tffs_process():
  process = algorithms.build_weighted_fed_avg(example.model_fn, SGDM(0.5))
  assert not process.has_client_state
  with pytest.raises(TypeError):
    process.next(process.initialize(), example.client_data(), [None, None])
