"""What the main job computes for each flag set, against two records of its
forms (tests/support/main_job_flags.py), each run here beside the form
today's code builds from the same flags, two rounds on the same clients.

BEFORE holds the forms of the older FedAvg builder, from before issue 37 moved
the main job onto TFF's FedAvg (`build_weighted_fed_avg` with the factories
its flags name). The state is TFF's now; what it learns:
- with TFF's aggregators (`--tff-aggregator`): every result, bit for bit;
- with none, DRIVE, top-k with error feedback: the models and the training
  loss and accuracy, bit for bit;
- with DP through secure sums: TFF's clients send initial minus trained
  weights, so the recorded noise comes out negated: round 1's two models
  average to the noiseless model, up to the levels' rounding;
- with 8-bit or secure levels, and the DP mean (whose noise seed folds in
  the aggregate): the randomness is drawn afresh, from the same law.

AFTER holds today's forms: every result, bit for bit, so that no later change
moves a user's numbers unseen. A form saved byte for byte as recorded is the
same computation: nothing to run.
"""

import functools

import numpy as np
import pytest
import tensorflow as tf

import canonical as cf
from canonical import aggregators
from canonical import errors
from canonical.learning import algorithms
from canonical.learning import optimizers
from canonical.saving import form_file
from pipelines import fedavg
import form_rounds
import main_job_flags

_TFF_AGGREGATORS = ('tff_compression', 'tff_mean', 'tff_robust', 'tff_secure')
_DETERMINISTIC = ('drive', 'plain', 'top_k_error_feedback')


@functools.lru_cache(maxsize=None)
def _today(name):
  return cf.compile(main_job_flags.process(name))


def _rounds(form, rounds=2):
  return form_rounds.round_outputs(form, main_job_flags.clients, rounds)


def _recorded(name, rounds=2):
  return _rounds(cf.load(main_job_flags.form_path(name,
                                                  main_job_flags.BEFORE)),
                 rounds)


def _weights(output):
  """The model's weights after a round, one vector (the state's first
  field, in the older builder's state and in TFF's)."""
  return np.concatenate([np.asarray(x).ravel()
                         for x in tf.nest.flatten(output[0][0])])


def _training(output):
  """(loss, accuracy) of a round's training, flat in the older builder's
  metrics, under client_work/train in TFF's."""
  metrics = output[1]
  metrics = metrics['client_work']['train'] if 'client_work' in metrics \
      else metrics
  return float(metrics['loss']), float(metrics['accuracy'])


def _assert_same_leaves(today, recorded):
  assert len(today) == len(recorded)
  for i, (a, b) in enumerate(zip(today, recorded)):
    assert a.dtype == b.dtype and a.shape == b.shape, f'leaf {i}'
    np.testing.assert_array_equal(a, b, err_msg=f'leaf {i}')


@pytest.mark.slow
@pytest.mark.parametrize('name', sorted(main_job_flags.FLAGS))
def test_the_main_jobs_form_computes_what_was_recorded(name):
  form = _today(name)
  with open(main_job_flags.form_path(name), 'rb') as f:
    saved = f.read()
  if form_file.to_bytes(form) == saved:
    return
  _assert_same_leaves(
      form_rounds.run_rounds(form, main_job_flags.clients),
      form_rounds.run_rounds(form_file.from_bytes(saved, where=name),
                             main_job_flags.clients))


@pytest.mark.slow
@pytest.mark.parametrize('name', _TFF_AGGREGATORS)
def test_tffs_aggregators_compute_what_they_did_before(name):
  _assert_same_leaves(
      form_rounds.run_rounds(_today(name), main_job_flags.clients),
      form_rounds.run_rounds(cf.load(main_job_flags.form_path(
          name, main_job_flags.BEFORE)), main_job_flags.clients))


@pytest.mark.slow
@pytest.mark.parametrize('name', _DETERMINISTIC)
def test_deterministic_aggregations_learn_what_they_did_before(name):
  assert main_job_flags.config(name).epochs == 3  # The digits' default.
  for r, (today, before) in enumerate(zip(_rounds(_today(name)),
                                          _recorded(name))):
    np.testing.assert_array_equal(_weights(today), _weights(before),
                                  err_msg=f'round {r}')
    assert _training(today) == _training(before), f'round {r}'


def _noiseless(name):
  """Round 1's model with the flags' clip and no noise: the unweighted mean
  of the clipped updates, as the DP means take it with every client in."""
  cfg = main_job_flags.config(name)
  _, model = fedavg.model_for(cfg, (8, 8, 1), 10)
  process = algorithms.build_unweighted_fed_avg(
      model, optimizers.build_sgdm(cfg.client_lr),
      optimizers.build_sgdm(cfg.server_lr),
      model_aggregator=aggregators.clipping_factory(
          cfg.clip, aggregators.UnweightedMeanFactory()),
      client_epochs=cfg.epochs)
  return _weights(_rounds(cf.compile(process), 1)[0])


@pytest.mark.slow
def test_dp_through_secure_sums_draws_the_recorded_noise_negated():
  name = 'dp_through_secure8'
  today = _weights(_rounds(_today(name), 1)[0])
  before = _weights(_recorded(name, 1)[0])
  assert np.max(np.abs(today - before)) > 0.1  # The noise is there...
  # ... and cancels: what is left is the levels' rounding.
  np.testing.assert_allclose((today + before) / 2, _noiseless(name),
                             atol=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize('name', ['dp', 'dp_adaptive_clip'])
def test_dp_means_draw_noise_of_the_recorded_scale(name):
  """Their noise seed folds in the aggregate, which TFF's sign changes: a
  fresh draw, whose norm over the model's 4,538 weights concentrates
  within about 1.5% of the recorded draw's."""
  today = _weights(_rounds(_today(name), 1)[0])
  before = _weights(_recorded(name, 1)[0])
  noiseless = _noiseless(name)
  ratio = (np.linalg.norm(today - noiseless) /
           np.linalg.norm(before - noiseless))
  assert 0.95 < ratio < 1.05, ratio
  assert not np.allclose(today - noiseless, before - noiseless, atol=1e-3)
  assert not np.allclose(today - noiseless, noiseless - before, atol=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize('name', ['secure8', 'uniform8_both_ways'])
def test_stochastic_levels_round_the_recorded_update(name):
  """Stochastic rounding of the negated update: another draw, so the models
  differ by the rounding (about 2% and 4% of round 1's update), never by
  the update itself (a sign or scale slip would be 100% or more)."""
  start = _weights((cf.load(main_job_flags.form_path(name)).initialize(),))
  today = _weights(_rounds(_today(name), 1)[0])
  before = _weights(_recorded(name, 1)[0])
  assert not np.array_equal(today, before)
  assert np.linalg.norm(today - before) < 0.1 * np.linalg.norm(before - start)


def test_the_record_differs_between_flags():
  """A record that every flag set matched alike would prove nothing."""
  weights = {name: _weights(_recorded(name, 1)[0])
             for name in ('plain', 'uniform8_both_ways', 'dp')}
  assert not np.array_equal(weights['plain'], weights['uniform8_both_ways'])
  assert not np.array_equal(weights['plain'], weights['dp'])


def test_client_epochs_is_checked():
  _, model = fedavg.model_for(main_job_flags.config('plain'), (8, 8, 1), 10)
  for bad in (0, 1.5, True):
    with pytest.raises(errors.InvalidValueError, match='client_epochs'):
      algorithms.build_weighted_fed_avg(
          model, optimizers.build_sgdm(0.1), client_epochs=bad)
