"""A secure sum with client noise (distributed DP): the form names the noise
but draws none; each runtime's secure-sum client adds its own, from its own
secret, before it masks. Checked through the language, the compiled and
saved form, the reference executor, the local loop (masking protocol) and
TFF's DistributeAggregateForm; Beam's is in
`tests/beam_runner/test_distributed_dp_beam.py`."""

import numpy as np
import pytest
import tensorflow as tf

import canonical as cf
from canonical.backends.mapreduce import distribute_aggregate
from canonical.core.intrinsics import (
    federated_secure_modular_sum_with_client_noise as noised_sum)
from canonical.saving import form_file
from canonical.saving import inspection
from canonical import secagg
from canonical.secagg import client_noise
from canonical.secagg import sums as secure_sums

import format_versions

DIM, MODULUS = 400, 2**20
V = cf.TensorType(np.int32, [DIM])
DATA = [np.random.default_rng(i).integers(-50, 50, DIM).astype(np.int32)
        for i in range(4)]
EXACT = np.sum(DATA, axis=0) % MODULUS


@cf.tf_computation(tf.float32)
def _same(stddev):
  return stddev


def _process(mechanism='distributed_skellam'):
  """The state is the local stddev; the round returns the noised sum."""

  @cf.tf_computation
  def init():
    return tf.constant(0.0, tf.float32)

  @cf.federated_computation(cf.type_at_server(tf.float32),
                            cf.type_at_clients(V))
  def next_fn(stddev, values):
    total = noised_sum(values, MODULUS, mechanism,
                       cf.federated_map(_same, stddev))
    return stddev, total

  return cf.IterativeProcess(
      cf.federated_computation(lambda: cf.federated_eval(init, cf.SERVER)),
      next_fn)


def _noise(total):
  """The sum's noise, centred modulo the modulus."""
  half = MODULUS // 2
  return (np.asarray(total, np.int64) - EXACT + half) % MODULUS - half


@pytest.fixture(scope='module')
def form():
  return cf.compile(_process())


def test_the_form_names_the_noise_and_takes_its_stddev_from_the_state(form):
  (entry,) = form.secure_sums
  assert entry == secure_sums.SecureSum(secure_sums.MODULAR, (MODULUS,),
                                        'distributed_skellam')
  assert 'each client adding its own distributed_skellam noise' in (
      form.summary())
  parameters, stddevs = secure_sums.round_parameters(
      form.secure_sums, form.secure_parameters(np.float32(3.5)))
  assert parameters == [[MODULUS]] and stddevs == [3.5]
  # The client's work sends its value as it is: no noise in the pieces.
  update, _ = form.work(DATA[0], form.prepare(np.float32(3.5)))
  np.testing.assert_array_equal(form.split_update(update)[1][0], DATA[0])


@pytest.mark.parametrize('mechanism', client_noise.MECHANISMS)
def test_every_runtime_adds_each_clients_noise_of_the_states_stddev(
    mechanism):
  process = _process(mechanism)
  form = cf.compile(process)
  stddev = np.float32(30.0)
  # Without noise every runtime gives the exact modular sum.
  _, quiet = process.next(np.float32(0.0), DATA)
  np.testing.assert_array_equal(quiet, EXACT)
  _, local_quiet = cf.run_round(form, np.float32(0.0), DATA)
  np.testing.assert_array_equal(local_quiet, EXACT)
  variance = len(DATA) * stddev**2  # 30 is an integer scale.
  totals = {'reference': process.next(stddev, DATA)[1],
            'local loop': cf.run_round(form, stddev, DATA)[1],
            'local loop again': cf.run_round(form, stddev, DATA)[1]}
  noises = {name: _noise(total) for name, total in totals.items()}
  for name, noise in noises.items():
    # 400 coordinates: the sample variance is within ~7% of the true one.
    assert np.var(noise) == pytest.approx(variance, rel=0.3), name
  # Drawn afresh each time (from the OS), not from the form.
  assert abs(np.corrcoef(noises['local loop'],
                         noises['local loop again'])[0, 1]) < 0.25


def test_a_seeded_local_round_repeats_its_noise_and_another_seed_does_not(
    form):
  stddev = np.float32(10.0)
  first, again, other = (cf.run_round(form, stddev, DATA, secure_seed=s)[1]
                         for s in (1, 1, 2))
  np.testing.assert_array_equal(first, again)
  assert not np.array_equal(first, other)


def test_the_distribute_aggregate_form_adds_the_noise_too(form):
  round_fn = distribute_aggregate.get_computation_for_distribute_aggregate_form(
      distribute_aggregate.distribute_aggregate_form_of(form, 'test'))
  _, quiet = round_fn(np.float32(0.0), DATA)
  np.testing.assert_array_equal(quiet, EXACT)
  _, total = round_fn(np.float32(30.0), DATA)
  assert np.var(_noise(total)) == pytest.approx(4 * 900, rel=0.3)


def test_a_saved_form_keeps_the_noise_and_needs_format_version_4(
    form, monkeypatch):
  data = form_file.to_bytes(form)
  assert form_file.from_bytes(data, 'f').secure_sums == form.secure_sums
  assert 'each client adding its own distributed_skellam noise' in (
      inspection.describe(form_file.parse(data, 'f'), 'f', len(data)))
  format_versions.assert_needs_format_version(
      form, 4, 'client noise in a format version 3 form', monkeypatch)


def _traced(fn, *types):
  return cf.federated_computation(*types)(fn).type_signature


def test_bad_noise_is_refused_where_it_is_given(form):
  clients = cf.type_at_clients(V)
  with pytest.raises(cf.FederatedError, match='mechanism must be one of'):
    _traced(lambda v: noised_sum(v, MODULUS, 'laplace', 1.0), clients)
  with pytest.raises(cf.FederatedError, match='must be finite and >= 0'):
    _traced(lambda v: noised_sum(v, MODULUS, 'distributed_dgauss', -1.0),
            clients)
  with pytest.raises(cf.FederatedError, match='float scalar at SERVER'):
    _traced(lambda v, s: noised_sum(v, MODULUS, 'distributed_dgauss', s),
            clients, cf.type_at_server(tf.int32))
  # A state giving a negative or NaN stddev fails the round before any
  # client draws, naming the secure sum.
  for bad in (-1.0, float('nan')):
    with pytest.raises(secure_sums.SecureSumError,
                       match='secure sum 0 .* local noise stddev must be '
                       'finite and >= 0'):
      cf.run_round(form, np.float32(bad), DATA)


def test_a_python_number_stddev_is_placed_at_the_server():
  @cf.federated_computation(cf.type_at_clients(V))
  def total(values):
    return noised_sum(values, MODULUS, 'distributed_dgauss', 0)
  np.testing.assert_array_equal(total(DATA), EXACT)


def test_noise_from_one_secret_is_the_same_each_time_and_independent_of_others():
  entry = (secure_sums.SecureSum(secure_sums.MODULAR, (MODULUS,),
                                 'distributed_dgauss'),)

  def client_input(secret):
    return np.asarray(secure_sums.client_inputs(
        entry, [[MODULUS]], (DATA[0],), 'client', stddevs=[20.0],
        secret=secagg.SeededRandom(secret))[0], np.int64)

  one, again, other = (client_input(s) for s in (b'a', b'a', b'b'))
  np.testing.assert_array_equal(one, again)
  half = MODULUS // 2
  noise = [(x - DATA[0] + half) % MODULUS - half for x in (one, other)]
  assert abs(np.corrcoef(*noise)[0, 1]) < 0.25
  assert np.var(noise[0]) == pytest.approx(400, rel=0.3)


def test_the_older_flat_parameters_refuses_a_noised_sums_stddev(form):
  given = form.secure_parameters(np.float32(2.0))
  with pytest.raises(secure_sums.SecureSumError, match='round_parameters'):
    secure_sums.flat_parameters(given)
  assert secure_sums.flat_parameters(((np.int64(7), np.int64(9)),)) == [
      [7, 9]]
