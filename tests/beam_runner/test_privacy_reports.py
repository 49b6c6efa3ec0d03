"""`beam_runner.run` accounts any form whose aggregation is differentially
private: (epsilon, delta) after each round, in the outcome, the progress
line, metrics.jsonl and TensorBoard, and across a resumed run."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import beam_runner
import canonical as tff
from canonical import aggregators
from canonical import errors
from canonical import privacy

import aggregator_rounds
import example_processes

VALUE = tff.TensorType(np.float32, [3])
SPEC = tf.TensorSpec([3], tf.float32)


def _form(factory):
  return tff.compile(aggregator_rounds.as_round(
      aggregator_rounds.create(factory, VALUE)))


def _dp_form():
  return _form(aggregators.DPMeanFactory(0.9, clip=1.0, expected_clients=5,
                                         seed=3))


def _clients(n=20):
  return {f'c{i:02d}': pair for i, pair in enumerate(
      example_processes.weighted_clients(SPEC, n, 1.0))}


def _tags(run_dir):
  board = os.path.join(run_dir, 'tensorboard')
  tags = {}
  for name in sorted(os.listdir(board)):  # One file per round, in order.
    for event in tf.compat.v1.train.summary_iterator(
        os.path.join(board, name)):
      for value in event.summary.value:
        tags.setdefault(value.tag, []).append(
            float(tf.make_ndarray(value.tensor)))
  return tags


def test_each_round_reports_what_the_run_has_spent_and_a_resume_goes_on(
    tmp_path):
  form, lines = _dp_form(), []
  run_dir = str(tmp_path / 'run')
  options = dict(clients_per_round=5, output_dir=run_dir, seed=1,
                 sampling='poisson', progress=lines.append,
                 privacy_delta=1e-6)
  beam_runner.run(form, _clients(), rounds=2, **options)
  result = beam_runner.run(form, _clients(), rounds=3, **options)
  expected = [privacy.epsilon(0.9, 0.25, r, 1e-6) for r in (1, 2, 3)]
  assert [o['privacy']['epsilon'] for o in result.outcomes] == \
      pytest.approx(expected)
  assert result.outcomes[-1]['privacy'] == {
      'epsilon': pytest.approx(expected[-1]), 'delta': 1e-6,
      'accountant': 'rdp', 'noise_multiplier': 0.9,
      'sampling_probability': 0.25, 'neighbours': 'add or remove one client'}
  assert len(lines) == 3
  for line, spent in zip(lines, expected):
    assert f'epsilon {spent:.4g} at delta 1e-06' in line
  with open(os.path.join(run_dir, 'metrics.jsonl')) as f:
    logged = [json.loads(line)['privacy']['epsilon'] for line in f]
  assert logged == pytest.approx(expected)
  assert _tags(run_dir)['privacy/epsilon'] == pytest.approx(expected,
                                                            rel=1e-6)


def test_a_run_refuses_another_delta_and_an_accountant_it_cannot_use(
    tmp_path):
  form = _dp_form()
  run_dir = str(tmp_path / 'run')
  with pytest.raises(errors.InvalidValueError, match='pld cannot account '
                     'fixed sampling of 5 of 20 clients'):
    beam_runner.run(form, _clients(), rounds=1, clients_per_round=5,
                    output_dir=run_dir, privacy_accountant='pld')
  assert not os.path.exists(run_dir)  # Refused before anything was written.
  result = beam_runner.run(form, _clients(), rounds=1, clients_per_round=5,
                           output_dir=run_dir, progress=lambda line: None)
  assert result.outcomes[0]['privacy']['neighbours'] == 'replace one client'
  with pytest.raises(beam_runner.RunDirError, match='privacy_delta'):
    beam_runner.run(form, _clients(), rounds=2, clients_per_round=5,
                    output_dir=run_dir, privacy_delta=1e-7)


def test_a_form_without_dp_reports_no_privacy(tmp_path):
  result = beam_runner.run(_form(tff.aggregators.MeanFactory()), _clients(),
                           rounds=1, clients_per_round=5,
                           output_dir=str(tmp_path / 'run'),
                           privacy_accountant='pld',  # Means nothing here.
                           progress=lambda line: None)
  assert 'privacy' not in result.outcomes[0]
  assert 'privacy/epsilon' not in _tags(result.output_dir)


def test_a_banded_dp_ftrl_run_with_cyclic_sampling_spends_a_gaussian_per_cycle(
    tmp_path):
  # 20 clients, 5 a round: 4 groups >= 3 bands, so a client's columns never
  # overlap and 6 rounds cost 2 Gaussian rounds of z each.
  factory = aggregators.BandedMatrixFactorizationFactory(
      0.9, 5, 1.0, 3, 6, noise_seed=2)
  result = beam_runner.run(
      _form(aggregators.as_weighted_aggregator(factory)), _clients(),
      rounds=6, clients_per_round=5,
      output_dir=str(tmp_path / 'run'), seed=1, sampling='cyclic',
      privacy_delta=1e-6)
  c = np.square(factory.coefficients)

  def reach(r):  # A client of group g: the rows of its columns released.
    return max(sum(c[:r - t].sum() for t in range(g, r, 4))
               for g in range(min(4, r)))

  spent = [o['privacy']['epsilon'] for o in result.outcomes]
  assert spent == pytest.approx([
      privacy.epsilon(0.9 / reach(r)**0.5, 1.0, 1, 1e-6)
      for r in range(1, 7)])
  # Never more than a Gaussian round per cycle: equal once columns are whole.
  per_cycle = [privacy.epsilon(0.9, 1.0, -(-r // 4), 1e-6)
               for r in range(1, 7)]
  assert all(a <= b + 1e-9 for a, b in zip(spent, per_cycle))
  assert spent[2] == pytest.approx(per_cycle[2])
  assert result.outcomes[-1]['privacy']['rounds_per_client'] == 2
  assert [o['clients_ok'] for o in result.outcomes] == [5] * 6
