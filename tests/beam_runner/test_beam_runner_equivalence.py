"""Rounds on Beam's DirectRunner equal the reference executor and the local loop.

The processes of the compiler issue run through `beam_runner.testing
.assert_rounds_match`: compiled on Beam (in_memory, and a few in
multi_processing with 2 worker processes), by the reference executor and in
`canonical.run_round`, with the clients the runner sampled and the states
those clients kept. Then the helper itself: it must fail, and say where, when
the form on Beam is not the process's.
"""

import numpy as np
import pytest
import tensorflow as tf

from beam_runner import testing
import canonical as cf
from canonical import learning
from canonical.learning import algorithms
from canonical.learning import framework
from canonical.learning import models
import encoders as te

from example_processes import (
    F,
    I,
    client_state_data,
    client_state_process,
    max_process,
    no_broadcast_process,
    random_floats,
    sum_process,
    two_broadcasts_process,
    weighted_data,
    weighted_mean_process,
)


# ----------------------------------------------------------------------------
# Equivalence, in_memory and on 2 worker processes (each multi_processing
# pipeline starts fresh workers: ~10 s, so those are slow-marked, and their
# rounds run chained in one pipeline). Workers in their own processes are
# checked where crossing processes could change a result: client state
# files and encoders' seeded randomness (integers bit for bit across worker
# processes: test_secure_sums_beam.py's sums; the others run in_memory
# only: ~4 minutes of test time less).

MODES = ['in_memory', pytest.param('multi_processing', marks=pytest.mark.slow)]


def _chained(mode, rounds):
  """rounds_per_pipeline for `mode`: one start of the worker processes."""
  return rounds if mode == 'multi_processing' else None


@pytest.mark.parametrize('mode', ['in_memory'])
def test_sum_of_integers_is_bit_exact(mode):
  rng = np.random.default_rng(0)
  data = {f'c{i}': rng.integers(-100, 100, [3]).astype(np.int32)
          for i in range(9)}
  result = testing.assert_rounds_match(sum_process(), data, rounds=3,
                                       clients_per_round=4, rtol=0, atol=0,
                                       running_mode=mode)
  assert int(result.state) == 3


@pytest.mark.parametrize('mode', ['in_memory'])
def test_weighted_mean_with_broadcast(mode):
  testing.assert_rounds_match(weighted_mean_process(), weighted_data(2, 7),
                              rounds=3, clients_per_round=5,
                              running_mode=mode)


@pytest.mark.parametrize('mode', ['in_memory'])
def test_max_through_federated_aggregate_is_bit_exact(mode):
  testing.assert_rounds_match(max_process(), random_floats(3, 11), rounds=2,
                              clients_per_round=6, rtol=0, atol=0,
                              running_mode=mode)


@pytest.mark.parametrize('mode', ['in_memory'])
def test_two_broadcasts_and_two_aggregations(mode):
  testing.assert_rounds_match(two_broadcasts_process(), random_floats(7, 6),
                              rounds=3, clients_per_round=4,
                              running_mode=mode)


@pytest.mark.parametrize('mode', ['in_memory'])
def test_no_broadcast_small_integers_are_exact(mode):
  data = {f'c{i}': np.float32(i) for i in range(6)}
  testing.assert_rounds_match(no_broadcast_process(), data, rounds=2,
                              clients_per_round=4, rtol=0, atol=0,
                              running_mode=mode)


@pytest.mark.parametrize('mode', MODES)
def test_client_state_comes_back_with_the_client_bit_exact(mode):
  rounds = 4 if mode == 'in_memory' else 2
  result = testing.assert_rounds_match(
      client_state_process(), client_state_data(), rounds=rounds,
      clients_per_round=3, rtol=0, atol=0, running_mode=mode,
      rounds_per_pipeline=_chained(mode, rounds))
  # Two rounds or more of three of five clients: some client came back.
  assert int(result.state[0][2]) == rounds


# ----------------------------------------------------------------------------
# Federated averaging, plain and with 8-bit encoders


def _quadrant_digits(n, seed):
  """8x8 images whose label (0-3) is the quadrant that is bright."""
  rng = np.random.default_rng(seed)
  y = rng.integers(0, 4, n).astype(np.int32)
  x = rng.uniform(0, 0.3, size=(n, 8, 8, 1)).astype(np.float32)
  for i, label in enumerate(y):
    row, col = divmod(int(label), 2)
    x[i, 4 * row:4 * row + 4, 4 * col:4 * col + 4, 0] += 0.7
  return x, y


def _digit_clients(sizes=(8, 12, 16, 8)):
  return {f'c{i}': tf.data.Dataset.from_tensor_slices(
      _quadrant_digits(n, i)).batch(8) for i, n in enumerate(sizes)}


def _eight_bit(wrap):

  def build(spec):
    if spec.shape.num_elements() > 100:  # The two dense kernels.
      return wrap(te.encoders.uniform_quantization(bits=8), spec)
    return wrap(te.encoders.identity(), spec)

  return build


@pytest.fixture(scope='module')
def model():
  return learning.KerasFunctionalModel.from_keras(models.small_8x8, seed=0)


@pytest.mark.slow
@pytest.mark.parametrize('mode', ['in_memory'])
def test_federated_averaging(model, mode):
  process = algorithms.build_federated_averaging_process(
      model, lambda: learning.sgd(0.1))
  result = testing.assert_rounds_match(process, _digit_clients(), rounds=2,
                                       clients_per_round=3,
                                       running_mode=mode)
  initial = process.initialize().global_model_weights.trainable
  moved = result.state.global_model_weights.trainable
  assert all(not np.array_equal(a, b) for a, b in zip(initial, moved))


@pytest.mark.slow
@pytest.mark.parametrize('mode', MODES)
def test_federated_averaging_with_8_bit_encoders(model, mode):
  process = algorithms.build_federated_averaging_process(
      model, lambda: learning.sgd(0.1),
      broadcast_process=framework.build_encoded_broadcast_process_from_model(
          model, _eight_bit(te.encoders.as_simple_encoder)),
      aggregation_process=framework.build_encoded_mean_process_from_model(
          model, _eight_bit(te.encoders.as_gather_encoder)))
  # On worker processes the float sums of round 1 merge in another order, so
  # the model differs in its last bits; round 2's stochastic rounding is seeded
  # by a fingerprint of that model and draws different noise. One round there.
  testing.assert_rounds_match(process, _digit_clients(),
                              rounds=2 if mode == 'in_memory' else 1,
                              clients_per_round=3, running_mode=mode)


# ----------------------------------------------------------------------------
# Equivalence, multi_processing (two worker processes per round)


# ----------------------------------------------------------------------------
# The helper catches forms that are not the process's


def test_a_different_server_step_fails_at_round_one_naming_the_tensor():
  process = weighted_mean_process()
  other = cf.compile(weighted_mean_process(step_scale=0.5001))
  with pytest.raises(AssertionError) as caught:
    testing.assert_rounds_match(process, weighted_data(2, 7), rounds=2,
                                clients_per_round=5, form=other,
                                check_local=False)
  message = str(caught.value)
  assert 'Beam (in_memory), round 1: server state' in message
  assert 'differs from the reference executor' in message


def test_a_difference_from_round_two_on_is_reported_at_round_two():
  """The server's counter is the same; the total drifts once it is >= 1."""

  def process_with(extra):

    @cf.tf_computation({'count': I, 'total': F}, F)
    def add(state, total):
      bump = tf.cast(state['count'] >= 1, tf.float32) * extra
      return {'count': state['count'] + 1, 'total': state['total'] + total +
              bump}

    @cf.federated_computation(cf.server({'count': I, 'total': F}),
                              cf.clients(F))
    def next_fn(state, data):
      total = cf.federated_sum(data)
      return cf.federated_map(add, (state, total)), {'sum': total}

    return cf.IterativeProcess(
        cf.tf_computation(lambda: {'count': tf.constant(0),
                                   'total': tf.constant(0.0)}), next_fn)

  data = {f'c{i}': np.float32(i) for i in range(4)}
  testing.assert_rounds_match(process_with(0.0), data, rounds=3, rtol=0,
                              atol=0)
  with pytest.raises(AssertionError,
                     match=r'round 2: server state, tensor total differs'):
    testing.assert_rounds_match(process_with(0.0), data, rounds=3, rtol=0,
                                atol=0, form=cf.compile(process_with(0.25)))


def test_a_different_client_state_is_caught():
  """Residuals kept at half: the client states differ after their round."""
  with pytest.raises(AssertionError) as caught:
    testing.assert_rounds_match(
        client_state_process(), client_state_data(), rounds=1,
        clients_per_round=3, rtol=0, atol=0,
        form=cf.compile(client_state_process(residual_scale=0.5)),
        check_local=False)
  message = str(caught.value)
  assert "state of client 'c" in message and 'after round 1' in message
  assert 'tensor 1 differs' in message


def test_an_unknown_running_mode_is_refused():
  with pytest.raises(ValueError, match='running_mode'):
    testing.assert_rounds_match(sum_process(), {'a': np.zeros([3], np.int32)},
                                running_mode='in_memroy')


def test_a_client_dropped_on_beam_is_reported():
  """The runner drops a client whose update is not finite; the reference
  executor does not, so the rounds cannot match."""
  data = {'a': np.float32(1), 'b': np.float32(np.nan), 'c': np.float32(2)}
  with pytest.raises(AssertionError,
                     match=r"Round 1: Beam \(in_memory\) dropped 1 of 3 "
                     r"clients \(e\.g\. client 'b'"):
    testing.assert_rounds_match(no_broadcast_process(), data, rounds=1)
