"""What a form releases with differential privacy: noted by every DP
aggregator, kept by the compiler when the round uses it, saved with the
form; and what a run of it spends, by its sampling."""

import math

import dp_accounting
from dp_accounting import rdp
import numpy as np
import pytest

import canonical as tff
from canonical import aggregators
from canonical import errors
from canonical import privacy
from canonical.core import privacy_releases as releases
from canonical.privacy import spending
from canonical.saving import canonical_form_pb2
from canonical.saving import envelope
from canonical.saving import form_file
from canonical.saving import inspection

import aggregator_rounds

F = tff.TensorType(np.float32)
VALUE = tff.TensorType(np.float32, [3])


def _form_of(factory, value_type=VALUE):
  return tff.compile(aggregator_rounds.as_round(
      aggregator_rounds.create(factory, value_type)))


FACTORIES = {
    'gaussian_fixed': (
        lambda: tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
            0.7, clients_per_round=5, clip=1.0, seed=1),
        'DifferentiallyPrivateFactory', 0.7),
    'gaussian_adaptive': (
        lambda: tff.aggregators.DifferentiallyPrivateFactory.gaussian_adaptive(
            0.7, clients_per_round=50, seed=1),
        'DifferentiallyPrivateFactory', 0.7),  # TFF's total, count included.
    'dp_mean': (
        lambda: aggregators.DPMeanFactory(0.7, clip=1.0, expected_clients=5,
                                          seed=1),
        'DPMeanFactory', 0.7),
    'dp_mean_adaptive': (
        lambda: aggregators.DPMeanFactory(0.7, clip=1.0, expected_clients=5,
                                          adaptive=True, seed=1),
        'DPMeanFactory', privacy.combined_noise_multiplier([0.7, 0.5])),
    'dp_secure_mean': (
        lambda: aggregators.DPSecureMeanFactory(0.7, clip=1.0,
                                                expected_clients=5, seed=1),
        'DPSecureMeanFactory', 0.7),
}


@pytest.mark.parametrize('name', sorted(FACTORIES))
def test_every_dp_aggregator_notes_its_release_in_the_form(name):
  make, source, z = FACTORIES[name]
  form = _form_of(make())
  assert [r.source for r in form.privacy_releases] == [source]
  assert form.privacy_releases[0].noise_multiplier == pytest.approx(z)
  assert 'differential privacy, each round: ' + source in form.summary(None)


def test_a_form_without_dp_releases_nothing():
  assert _form_of(tff.aggregators.MeanFactory()).privacy_releases == ()
  assert _form_of(tff.aggregators.SumFactory()).privacy_releases == ()


def _dp(z):
  return tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
      z, clients_per_round=5, clip=1.0, seed=2)


def _two_dp_round(use_second):
  """A round noising the clients' values twice (z 1 and 2); the second
  result is returned, or dropped."""
  first, second = _dp(1.0).create(VALUE), _dp(2.0).create(VALUE)

  @tff.federated_computation()
  def init_fn():
    return tff.federated_zip((first.initialize(), second.initialize()))

  @tff.federated_computation(init_fn.type_signature.result,
                             tff.type_at_clients(VALUE))
  def next_fn(state, values):
    one = first.next(state[0], values)
    two = second.next(state[1], values)
    kept = (one.result, two.result) if use_second else (one.result,)
    return tff.federated_zip((one.state, two.state)), kept

  return tff.IterativeProcess(init_fn, next_fn)


def test_two_releases_in_a_round_combine_and_an_unused_one_is_not_kept():
  both = tff.compile(_two_dp_round(use_second=True))
  assert [r.noise_multiplier for r in both.privacy_releases] == [1.0, 2.0]
  assert releases.round_noise_multiplier(both.privacy_releases) == \
      pytest.approx((1.0**-2 + 2.0**-2)**-0.5)
  # The second process's state still goes on, but its noised sum reaches
  # nothing the round returns: released to no one.
  one = tff.compile(_two_dp_round(use_second=False))
  assert [r.noise_multiplier for r in one.privacy_releases] == [1.0]


def test_releases_are_saved_as_format_version_2_and_shown_by_inspect(
    tmp_path):
  make, _, _ = FACTORIES['dp_mean']
  form = _form_of(make())
  path = str(tmp_path / 'dp.pb')
  tff.save(form, path)
  loaded = tff.load(path)
  assert loaded.privacy_releases == form.privacy_releases
  data = open(path, 'rb').read()
  assert form_file.parse(data).format_version == 2
  assert 'differential privacy, each round: DPMeanFactory: Gaussian, noise ' \
      'multiplier 0.7' in inspection.describe_file(path)
  plain = str(tmp_path / 'plain.pb')
  tff.save(_form_of(tff.aggregators.MeanFactory()), plain)
  assert form_file.parse(open(plain, 'rb').read()).format_version == 1


def _resaved(data, change, version=2):
  proto = canonical_form_pb2.Form()
  proto.ParseFromString(data[envelope.HEADER_BYTES:])
  change(proto)
  return envelope.wrap(proto.SerializeToString(), version)


def test_a_file_with_bad_releases_is_refused(tmp_path):
  make, _, _ = FACTORIES['dp_mean']
  data = form_file.to_bytes(_form_of(make()))

  def as_version_1(proto):
    proto.format_version = 1

  with pytest.raises(tff.FormError, match='privacy releases in a format '
                     'version 1 form'):
    form_file.from_bytes(_resaved(data, as_version_1, 1), 'old.pb')

  def nan(proto):
    proto.privacy_releases[0].noise_multiplier = math.nan

  with pytest.raises(tff.FormError, match="nan.pb: privacy release "
                     "'DPMeanFactory': .*noise_multiplier must not be NaN"):
    form_file.from_bytes(_resaved(data, nan), 'nan.pb')


def test_a_version_2_form_is_refused_by_a_version_1_loader(monkeypatch):
  make, _, _ = FACTORIES['dp_mean']
  data = form_file.to_bytes(_form_of(make()))
  monkeypatch.setattr(envelope, 'FORMAT_VERSION', 1)
  with pytest.raises(tff.FormError, match='format version 2 is newer than '
                     'this loader reads'):
    form_file.from_bytes(data, 'dp.pb')


# -- What a run spends --------------------------------------------------------

ONE = (releases.Release('test', 0.8),)


def test_poisson_sampling_spends_the_subsampled_gaussians():
  spent = spending.spent(ONE, sampling='poisson', clients_per_round=10,
                         population=100, rounds=7, delta=1e-5)
  assert spent == {
      'epsilon': pytest.approx(privacy.epsilon(0.8, 0.1, 7, 1e-5)),
      'delta': 1e-5, 'accountant': 'rdp', 'noise_multiplier': 0.8,
      'sampling_probability': 0.1, 'neighbours': 'add or remove one client'}
  pld = spending.spent(ONE, sampling='poisson', clients_per_round=10,
                       population=100, rounds=7, delta=1e-5, accountant='pld')
  assert pld['epsilon'] == pytest.approx(
      privacy.epsilon(0.8, 0.1, 7, 1e-5, 'pld'))
  assert pld['epsilon'] < spent['epsilon']  # PLD is tighter.


def test_fixed_sampling_of_every_client_is_the_gaussian_itself():
  spent = spending.spent(ONE, sampling='fixed', clients_per_round=100,
                         population=100, rounds=3, delta=1e-5)
  assert spent['epsilon'] == pytest.approx(privacy.epsilon(0.8, 1.0, 3, 1e-5))
  assert spent['sampling_probability'] == 1.0


def test_fixed_sampling_of_some_is_without_replacement_at_twice_the_range():
  spent = spending.spent(ONE, sampling='fixed', clients_per_round=10,
                         population=100, rounds=7, delta=1e-5)
  tracker = rdp.RdpAccountant(
      neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
  tracker.compose(dp_accounting.SampledWithoutReplacementDpEvent(
      100, 10, dp_accounting.GaussianDpEvent(0.4)), 7)
  assert spent['epsilon'] == pytest.approx(tracker.get_epsilon(1e-5))
  assert spent['neighbours'] == 'replace one client'
  # Replacing a client moves the sum by twice the clip: more than Poisson.
  assert spent['epsilon'] > privacy.epsilon(0.8, 0.1, 7, 1e-5)


def test_two_releases_spend_as_one_combined_and_none_spend_nothing():
  two = (releases.Release('a', 1.0), releases.Release('b', 1.0))
  spent = spending.spent(two, sampling='poisson', clients_per_round=10,
                         population=100, rounds=5, delta=1e-5)
  assert spent['epsilon'] == pytest.approx(
      privacy.epsilon(2**-0.5, 0.1, 5, 1e-5))
  zero = (releases.Release('a', 1.0), releases.Release('b', 0.0))
  assert spending.spent(zero, sampling='poisson', clients_per_round=10,
                        population=100, rounds=1,
                        delta=1e-5)['epsilon'] == math.inf
  assert spending.spent(ONE, sampling='poisson', clients_per_round=10,
                        population=100, rounds=0,
                        delta=1e-5)['epsilon'] == 0.0


def test_a_run_that_cannot_be_accounted_is_refused():
  with pytest.raises(errors.InvalidValueError, match='pld cannot account '
                     'fixed sampling of 10 of 100 clients'):
    spending.check_run(ONE, 'fixed', 10, 100, 1e-5, 'pld')
  with pytest.raises(errors.InvalidValueError, match='delta must be in'):
    spending.check_run(ONE, 'poisson', 10, 100, 1.5, 'rdp')
  with pytest.raises(errors.InvalidValueError, match='privacy_accountant '
                     'must be one of'):
    spending.check_run(ONE, 'poisson', 10, 100, 1e-5, 'moments')
  with pytest.raises(errors.InvalidValueError, match='noise_multiplier must '
                     'be finite'):
    releases.Release('bad', -1.0)
  assert spending.dp_event(releases.Release('x', 0.5)) == \
      dp_accounting.GaussianDpEvent(0.5)
  assert isinstance(spending.dp_event(releases.Release('x', 0)),
                    dp_accounting.NonPrivateDpEvent)
