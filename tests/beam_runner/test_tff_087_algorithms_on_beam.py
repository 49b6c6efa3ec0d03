"""TFF 0.87's learning algorithms past FedAvg (Mime Lite, scheduled
FedAvg, unweighted FedProx, k-means, Federated Reconstruction; FedAvg with
Adafactor), compiled, saved and run on Beam in
process: the same rounds as their local run (whose numbers are TFF 0.87's,
recorded in tests/canonical/learning/test_tff_087_algorithms.py)."""

import numpy as np
import pytest
import tensorflow as tf

import beam_runner
import canonical as tff
from canonical.learning import optimizers
import tff_087_examples as example
import tff_087_personalization as p13n

algorithms = tff.learning.algorithms


def _points():
  rng = np.random.default_rng(1)
  return [tf.data.Dataset.from_tensor_slices(
      rng.normal(size=(n, 2)).astype(np.float32)) for n in (6, 4)]


BUILDERS = {
    'weighted_mime_lite': lambda: algorithms.build_weighted_mime_lite(
        example.model_fn, optimizers.build_sgdm(0.1, momentum=0.9)),
    'unweighted_mime_lite': lambda: algorithms.build_unweighted_mime_lite(
        example.model_fn, optimizers.build_adam(0.05)),
    'mime_lite_schedule': lambda: (
        algorithms.build_mime_lite_with_optimizer_schedule(
            example.model_fn, lambda r: 0.1 / (1.0 + tf.cast(r, tf.float32)),
            optimizers.build_sgdm(0.1, momentum=0.9))),
    'fed_avg_schedule': lambda: (
        algorithms.build_weighted_fed_avg_with_optimizer_schedule(
            example.model_fn, lambda r: 0.2 / (1.0 + tf.cast(r, tf.float32)),
            optimizers.build_sgdm)),
    'unweighted_fed_prox': lambda: algorithms.build_unweighted_fed_prox(
        example.model_fn, 0.5, optimizers.build_sgdm(0.1)),
    'fed_kmeans': lambda: algorithms.build_fed_kmeans(3, (2,),
                                                      random_seed=(5, 7)),
    'fed_recon': lambda: algorithms.build_fed_recon(
        example.recon_model_fn, loss_fn=example.recon_loss,
        metrics_fn=example.recon_metrics),
    'fed_recon_eval': lambda: algorithms.build_fed_recon_eval(
        example.recon_model_fn, loss_fn=example.recon_loss,
        metrics_fn=example.recon_metrics),
    'fed_avg_debug_measurements': lambda: algorithms.build_weighted_fed_avg(
        example.model_fn, optimizers.build_sgdm(0.1),
        model_aggregator=tff.learning.add_debug_measurements(
            tff.aggregators.MeanFactory())),
    'fed_avg_adafactor': lambda: algorithms.build_weighted_fed_avg(
        example.model_fn, optimizers.build_adafactor(0.1),
        server_optimizer_fn=optimizers.build_adafactor(0.1)),
}


def _flat(metrics, prefix=''):
  flat = {}
  for key, value in metrics.items():
    if isinstance(value, dict):
      flat.update(_flat(value, f'{prefix}{key}/'))
    elif not isinstance(value, tuple):
      flat[f'{prefix}{key}'] = pytest.approx(float(value), rel=1e-5)
  return flat


@pytest.mark.slow
@pytest.mark.parametrize('name', sorted(BUILDERS))
def test_algorithms_on_beam_match_their_local_rounds(name, tmp_path):
  process = BUILDERS[name]()
  data = {'fed_kmeans': _points, 'fed_recon': example.recon_data,
          'fed_recon_eval': example.recon_data}.get(
              name, example.client_data)()[:2]
  tff.save(tff.compile(process), str(tmp_path / 'form.pb'))
  result = beam_runner.run(str(tmp_path / 'form.pb'),
                           {'a': data[0], 'b': data[1]}, rounds=2,
                           clients_per_round=2,
                           output_dir=str(tmp_path / 'run'), seed=0)
  state = process.initialize()
  for _ in range(2):
    output = process.next(state, data)
    state = output.state
  for beam, local in zip(tf.nest.flatten(result.state),
                         tf.nest.flatten(state)):
    np.testing.assert_allclose(beam, local, rtol=1e-5, atol=1e-6)
  assert result.outcomes[-1]['metrics'] == _flat(output.metrics)


@pytest.mark.slow
def test_personalization_eval_as_a_round_on_beam(tmp_path):
  """build_personalization_eval_computation returns metrics only, not the
  round of a form; as the `next` of a process keeping the weights, it
  compiles and runs on Beam with its local results."""
  evaluation = algorithms.build_personalization_eval_computation(
      p13n.LinearModel, p13n.PERSONALIZE_FN_DICT, p13n.evaluate_fn)
  weights_type, input_type = evaluation.type_signature.parameter

  @tff.tensorflow.computation
  def initial_weights():
    return tff.learning.models.ModelWeights(
        tuple(tf.constant(w) for w in p13n.WEIGHTS.trainable), ())

  @tff.federated_computation
  def initialize():
    return tff.federated_eval(initial_weights, tff.SERVER)

  @tff.federated_computation(weights_type, input_type)
  def next_fn(weights, client_input):
    return weights, evaluation(weights, client_input)

  process = tff.templates.IterativeProcess(initialize, next_fn)
  tff.save(tff.compile(process), str(tmp_path / 'form.pb'))
  data = p13n.p13n_data()
  result = beam_runner.run(str(tmp_path / 'form.pb'),
                           {'a': data[0], 'b': data[1], 'c': data[2]},
                           rounds=1, clients_per_round=3,
                           output_dir=str(tmp_path / 'run'), seed=0)
  local = evaluation(p13n.WEIGHTS, data)
  beam = result.outcomes[-1]['metrics']
  for strategy, metrics in local.items():
    for name, values in metrics.items():
      assert sorted(beam[f'{strategy}/{name}']) == pytest.approx(
          sorted(np.asarray(values).tolist()), rel=1e-6)
