"""What the main job computes for each of its aggregations is what it
computed before the one aggregation stack (issue 37): the form its code
builds today from a set of flags runs two rounds to the results of the form
the code of commit feb7b67 built from the same flags (saved in
tests/data/main_job_forms/ by scripts/record_main_job_forms.py), both run
here, on one CPU. A form saved byte for byte as recorded is the same
computation: nothing to run (most forms carry build-time names or seeds that
differ from build to build, and run).
"""

import numpy as np
import pytest
import tensorflow as tf

import canonical as cf
from canonical import aggregators
from canonical import errors
from canonical.learning import algorithms
from canonical.learning import optimizers
from canonical.saving import form_file
from pipelines import encoder_choice
from pipelines import fedavg
import form_rounds
import main_job_flags


@pytest.mark.slow
@pytest.mark.parametrize('name', sorted(main_job_flags.FLAGS))
def test_the_main_jobs_form_computes_what_it_computed(name):
  form = cf.compile(main_job_flags.process(name))
  with open(main_job_flags.form_path(name), 'rb') as f:
    saved = f.read()
  if form_file.to_bytes(form) == saved:
    return
  recorded = form_rounds.run_rounds(form_file.from_bytes(saved, where=name),
                                    main_job_flags.clients)
  today = form_rounds.run_rounds(form, main_job_flags.clients)
  assert len(today) == len(recorded)
  for i, (a, b) in enumerate(zip(today, recorded)):
    assert a.dtype == b.dtype and a.shape == b.shape, f'leaf {i}'
    np.testing.assert_array_equal(a, b, err_msg=f'leaf {i}')


def test_the_record_differs_between_flags():
  """A record that every flag set matched alike would prove nothing."""
  runs = {name: form_rounds.run_rounds(cf.load(main_job_flags.form_path(
      name)), main_job_flags.clients, rounds=1)
          for name in ('plain', 'uniform8_both_ways', 'dp')}
  weights = {name: np.concatenate([leaf.ravel() for leaf in run[:6]])
             for name, run in runs.items()}
  assert not np.array_equal(weights['plain'], weights['uniform8_both_ways'])
  assert not np.array_equal(weights['plain'], weights['dp'])


def _model(name):
  return fedavg.model_for(main_job_flags.config(name), (8, 8, 1), 10)[1]


def _tff_fed_avg(name):
  """TFF's `build_weighted_fed_avg` with the factory the older builder's mean
  for these flags is, and the main job's client epochs (our `client_epochs`)."""
  cfg = main_job_flags.config(name)
  model = _model(name)
  inner = None
  if not encoder_choice.is_identity(cfg.aggregation_encoder):
    inner = aggregators.EncodedSumFactory(
        encoder_choice.encoder_fn(cfg.aggregation_encoder, 'aggregation',
                                  cfg.threshold, cfg.seed),
        error_feedback=cfg.error_feedback)
  return algorithms.build_weighted_fed_avg(
      model, optimizers.build_sgdm(cfg.client_lr),
      optimizers.build_sgdm(cfg.server_lr),
      model_aggregator=aggregators.MeanFactory(inner, no_nan_division=True),
      client_epochs=cfg.epochs)


@pytest.mark.slow
@pytest.mark.parametrize('name', ['plain', 'drive', 'top_k_error_feedback'])
def test_tffs_fed_avg_learns_the_recorded_models(name):
  """Item 1 of issue 37, where it holds today: for aggregations that draw no
  randomness from the update's sign, TFF's FedAvg with the same factories
  learns the models the main job's recorded forms learn, bit for bit (its
  clients send initial - trained, which a stochastic encoder or DP noise
  would draw differently)."""
  assert main_job_flags.config(name).epochs == 3  # The digits' default.
  recorded = form_rounds.run_rounds(cf.load(main_job_flags.form_path(name)),
                                    main_job_flags.clients)
  today = form_rounds.run_rounds(cf.compile(_tff_fed_avg(name)),
                                 main_job_flags.clients)
  # Each round's results start with the model weights (ServerState's and
  # TFF's LearningAlgorithmState's first field).
  weights = len(tf.nest.flatten(_model(name).weights_spec))
  per_round_old, per_round_new = len(recorded) // 2, len(today) // 2
  for r in range(2):
    old = recorded[r * per_round_old:r * per_round_old + weights]
    new = today[r * per_round_new:r * per_round_new + weights]
    for i, (a, b) in enumerate(zip(new, old)):
      np.testing.assert_array_equal(a, b, err_msg=f'round {r} leaf {i}')


def test_client_epochs_is_checked():
  for bad in (0, 1.5, True):
    with pytest.raises(errors.InvalidValueError, match='client_epochs'):
      algorithms.build_weighted_fed_avg(
          _model('plain'), optimizers.build_sgdm(0.1), client_epochs=bad)
