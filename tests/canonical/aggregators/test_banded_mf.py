"""Banded matrix-factorization DP-FTRL's mean: clipped records, noise w =
C^-1 z correlated across rounds through the state, its release on the
form, inside TFF's learning algorithms on the compiled path."""

import numpy as np
import pytest

import canonical as tff
from canonical import errors
from canonical.aggregators.banded_mf import BandedMatrixFactorizationFactory
from canonical.executors import compiled
from canonical.privacy import banded
from tff_087_examples import client_data
from tff_087_examples import model_fn

import aggregator_rounds
import format_versions

Banded = BandedMatrixFactorizationFactory
VALUE = tff.TensorType(np.float32, [3])


def _rounds(process, values, rounds):
  state, results = process.initialize(), []
  for _ in range(rounds):
    output = process.next(state, values)
    state = output.state
    results.append(np.asarray(output.result))
  return results


@pytest.mark.parametrize('make, problem', [
    (lambda: Banded(-1.0, 5, 1.0, 2, 10), 'noise_multiplier must be '
     'nonnegative'),
    (lambda: Banded(1.0, 0, 1.0, 2, 10), 'clients_per_round must be '
     'positive'),
    (lambda: Banded(1.0, 5, 1.0, 0, 10), 'bands must be an int >= 1'),
    (lambda: Banded(1.0, 5, 1.0, 11, 10), r'bands \(11\) must be at most '
     r'rounds \(10\)'),
    (lambda: Banded(1.0, 5, 1.0, 2, 10, strategy='best'), 'strategy must be '
     'one of'),
])
def test_bad_arguments_are_named(make, problem):
  with pytest.raises((errors.InvalidValueError, errors.InvalidTypeError),
                     match=problem):
    make()


def test_without_noise_it_is_the_mean_of_the_clipped_records():
  process = Banded(0.0, 2, 1.0, 3, 10, noise_seed=1).create(VALUE)
  values = [np.array([3., 0, 4], np.float32),
            np.array([.1, .2, .3], np.float32)]
  for result in _rounds(process, values, 3):
    np.testing.assert_allclose(result, [(0.6 + 0.1) / 2, 0.1, 0.55],
                               rtol=1e-6)


def test_each_rounds_noise_has_the_variance_of_the_inverse_strategy():
  factory = Banded(1.0, 1, 2.0, 3, 10, noise_seed=4)
  process = factory.create(tff.TensorType(np.float32, [40000]))
  noises = _rounds(process, [np.zeros(40000, np.float32)], 5)
  r = banded.inverse_coefficients(factory.coefficients, 5)
  expected = 4.0 * np.cumsum(r**2)  # (z clip)^2 sum_k<=t r_k^2.
  np.testing.assert_allclose([np.var(n) for n in noises], expected,
                             rtol=0.03)
  # Neighbouring rounds' noises are correlated (r_1 < 0 undoes some).
  assert abs(np.corrcoef(noises[0], noises[1])[0, 1]) > 0.1
  again = _rounds(Banded(1.0, 1, 2.0, 3, 10, noise_seed=4).create(
      tff.TensorType(np.float32, [40000])), [np.zeros(40000, np.float32)], 2)
  np.testing.assert_array_equal(again[1], noises[1])


def test_the_form_carries_its_banded_release_and_saves_it(tmp_path):
  factory = Banded(0.9, 5, 1.0, 4, 50, noise_seed=2)
  form = tff.compile(aggregator_rounds.as_round(
      aggregator_rounds.create(factory, VALUE)))
  (release,) = form.privacy_releases
  assert release.mechanism == 'banded'
  assert release.noise_multiplier == 0.9
  assert release.coefficients == factory.coefficients
  assert len(release.coefficients) == 4
  path = str(tmp_path / 'banded.pb')
  tff.save(form, path)
  assert tff.load(path).privacy_releases == (release,)


def test_dp_ftrl_with_banded_noise_trains_on_the_compiled_path():
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0,
                                                            momentum=0.9),
      model_aggregator=Banded(0.5, 2, 1.0, 2, 10, noise_seed=3))
  assert compiled.compiled_round(process.next) is not None
  state = process.initialize()
  start = state.global_model_weights.trainable[0].copy()
  for _ in range(2):
    state = process.next(state, client_data()).state
  assert not np.allclose(state.global_model_weights.trainable[0], start)


def test_a_form_with_correlated_noise_is_refused_by_a_loader_from_before(
    monkeypatch):
  """Format 3: a version-2 loader would account a banded release as
  independent Gaussian rounds, so it must refuse the file; and a file that
  says version 2 cannot carry a mechanism."""
  form = tff.compile(aggregator_rounds.as_round(aggregator_rounds.create(
      Banded(0.9, 5, 1.0, 2, 10, noise_seed=2), VALUE)))
  format_versions.assert_needs_format_version(
      form, 3, 'other than Gaussian in a format version 2 form', monkeypatch)
