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

import canonical as cf
import encoders as te
from beam_runner import testing
from canonical import fedavg
from canonical import learning
from canonical.learning import models

F = tf.TensorSpec([], tf.float32)
I = tf.TensorSpec([], tf.int32)
F2 = tf.TensorSpec([2], tf.float32)
I3 = tf.TensorSpec([3], tf.int32)


@cf.tf_computation(I)
def _increment(n):
  return n + 1


def _counting_state():
  return cf.tf_computation(lambda: tf.constant(0, tf.int32))


def _floats(seed, n, shape=(2,)):
  rng = np.random.default_rng(seed)
  return {f'c{i}': rng.normal(size=shape).astype(np.float32)
          for i in range(n)}


# ----------------------------------------------------------------------------
# The processes


def sum_process():

  @cf.federated_computation(cf.server(I), cf.clients(I3))
  def next_fn(state, data):
    return cf.federated_map(_increment, state), cf.federated_sum(data)

  return cf.IterativeProcess(_counting_state(), next_fn)


def weighted_mean_process(step_scale=0.5):

  @cf.tf_computation(F2, F2)
  def step(state, mean):
    return step_scale * state + mean

  @cf.tf_computation((F2, F), F2)
  def shifted(data, center):
    return data[0] - center, data[1]

  @cf.federated_computation(cf.server(F2), cf.clients((F2, F)))
  def next_fn(state, data):
    delta, weight = cf.federated_map(
        shifted, (data, cf.federated_broadcast(state)))
    weighted = cf.federated_mean(delta, weight=weight)
    return cf.federated_map(step, (state, weighted)), {
        'mean': cf.federated_mean(delta), 'weighted': weighted}

  return cf.IterativeProcess(cf.tf_computation(lambda: tf.ones([2])), next_fn)


def _weighted_data(seed, n):
  rng = np.random.default_rng(seed)
  return {f'c{i}': (rng.normal(size=[2]).astype(np.float32),
                    np.float32(rng.uniform(0.5, 3.0))) for i in range(n)}


def max_process():

  @cf.tf_computation(F2, F2)
  def bigger(a, b):
    return tf.maximum(a, b)

  @cf.tf_computation(F2)
  def identity(a):
    return a

  @cf.federated_computation(cf.server(I), cf.clients(F2))
  def next_fn(state, data):
    largest = cf.federated_aggregate(data, np.full([2], -np.inf, np.float32),
                                     bigger, bigger, identity)
    return cf.federated_map(_increment, state), largest

  return cf.IterativeProcess(_counting_state(), next_fn)


def two_broadcasts_process():

  @cf.tf_computation((F2, I))
  def scaled(state):
    return state[0] * 0.5

  @cf.tf_computation((F2, I))
  def step_of(state):
    return state[1]

  @cf.tf_computation(F2, F2, I)
  def client_work(data, weights, step):
    return data * weights + tf.cast(step, tf.float32), tf.reduce_max(data)

  @cf.tf_computation((F2, I), F2, F, F2)
  def server_update(state, half, largest, total):
    return (half + total / 10.0 + largest, state[1] + 1)

  @cf.federated_computation(cf.server((F2, I)), cf.clients(F2))
  def next_fn(state, data):
    half = cf.federated_map(scaled, state)
    outputs = cf.federated_map(client_work, (
        data, cf.federated_broadcast(half),
        cf.federated_broadcast(cf.federated_map(step_of, state))))
    total = cf.federated_sum(outputs[0])
    largest = cf.federated_max(outputs[1])
    new_state = cf.federated_map(server_update, (state, half, largest, total))
    return new_state, (largest, total)

  return cf.IterativeProcess(
      cf.tf_computation(lambda: (tf.ones([2]), tf.constant(0))), next_fn)


def no_broadcast_process():

  @cf.tf_computation(F, F)
  def add(a, b):
    return a + b

  @cf.federated_computation(cf.server(F), cf.clients(F))
  def next_fn(state, data):
    total = cf.federated_sum(data)
    return cf.federated_map(add, (state, total)), total

  return cf.IterativeProcess(cf.tf_computation(lambda: tf.constant(1.0)),
                             next_fn)


def client_state_process(residual_scale=1.0):
  """Error feedback in miniature: each client rounds data + residual to an
  integer, sends it, keeps the (scaled) rest; and counts the rounds it joined."""
  state_spec = (I, F2)

  @cf.tf_computation
  def fresh_client():
    return tf.constant(0), tf.zeros([2])

  @cf.tf_computation(F2, state_spec, F)
  def client_step(data, client_state, scale):
    count, residual = client_state
    value = data * scale + residual
    sent = tf.round(value)
    return tf.cast(sent, tf.int32), (count + 1,
                                     (value - sent) * residual_scale)

  @cf.tf_computation((I3, F))
  def fold(state):
    return state[1]

  @cf.tf_computation((I3, F), tf.TensorSpec([2], tf.int32))
  def server_step(state, total):
    return (state[0] + tf.concat([total, [1]], 0), state[1] * 1.5)

  @cf.federated_computation(cf.server((I3, F)), cf.clients(F2),
                            cf.clients(state_spec))
  def next_fn(state, data, client_state):
    scale = cf.federated_broadcast(cf.federated_map(fold, state))
    sent, new_client_state = cf.federated_map(client_step,
                                              (data, client_state, scale))
    total = cf.federated_sum(sent)
    return cf.federated_map(server_step, (state, total)), total, \
        new_client_state

  return cf.IterativeProcess(
      cf.tf_computation(lambda: (tf.zeros([3], tf.int32), tf.constant(1.0))),
      next_fn, client_state_initializer=fresh_client)


def _client_state_data():
  return {k: v * 3 for k, v in _floats(8, 5).items()}


# ----------------------------------------------------------------------------
# Equivalence, in_memory


def test_sum_of_integers_is_bit_exact():
  rng = np.random.default_rng(0)
  data = {f'c{i}': rng.integers(-100, 100, [3]).astype(np.int32)
          for i in range(9)}
  result = testing.assert_rounds_match(sum_process(), data, rounds=3,
                                       clients_per_round=4, rtol=0, atol=0)
  assert int(result.state) == 3


def test_weighted_mean_with_broadcast():
  testing.assert_rounds_match(weighted_mean_process(), _weighted_data(2, 7),
                              rounds=3, clients_per_round=5)


def test_max_through_federated_aggregate_is_bit_exact():
  testing.assert_rounds_match(max_process(), _floats(3, 11), rounds=2,
                              clients_per_round=6, rtol=0, atol=0)


def test_two_broadcasts_and_two_aggregations():
  testing.assert_rounds_match(two_broadcasts_process(), _floats(7, 6),
                              rounds=3, clients_per_round=4)


def test_no_broadcast_small_integers_are_exact():
  data = {f'c{i}': np.float32(i) for i in range(6)}
  testing.assert_rounds_match(no_broadcast_process(), data, rounds=2,
                              clients_per_round=4, rtol=0, atol=0)


def test_client_state_comes_back_with_the_client_bit_exact():
  result = testing.assert_rounds_match(
      client_state_process(), _client_state_data(), rounds=4,
      clients_per_round=3, rtol=0, atol=0)
  # Four rounds of three of five clients: some client came back.
  assert int(result.state[0][2]) == 4


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
  return learning.FunctionalModel.from_keras(models.small_8x8, seed=0)


@pytest.mark.slow
def test_federated_averaging(model):
  process = fedavg.build_federated_averaging_process(
      model, lambda: learning.sgd(0.1))
  result = testing.assert_rounds_match(process, _digit_clients(), rounds=2,
                                       clients_per_round=3)
  assert int(result.state.round_num) == 2


@pytest.mark.slow
def test_federated_averaging_with_8_bit_encoders(model):
  process = fedavg.build_federated_averaging_process(
      model, lambda: learning.sgd(0.1),
      broadcast_process=fedavg.build_encoded_broadcast_process_from_model(
          model, _eight_bit(te.encoders.as_simple_encoder)),
      aggregation_process=fedavg.build_encoded_mean_process_from_model(
          model, _eight_bit(te.encoders.as_gather_encoder)))
  testing.assert_rounds_match(process, _digit_clients(), rounds=2,
                              clients_per_round=3)


# ----------------------------------------------------------------------------
# Equivalence, multi_processing (two worker processes per round)


@pytest.mark.slow
def test_weighted_mean_on_worker_processes():
  testing.assert_rounds_match(weighted_mean_process(), _weighted_data(4, 6),
                              rounds=2, clients_per_round=4,
                              running_mode='multi_processing')


@pytest.mark.slow
def test_client_state_on_worker_processes_bit_exact():
  testing.assert_rounds_match(client_state_process(), _client_state_data(),
                              rounds=2, clients_per_round=4, rtol=0, atol=0,
                              running_mode='multi_processing')


# ----------------------------------------------------------------------------
# The helper catches forms that are not the process's


def test_a_different_server_step_fails_at_round_one_naming_the_tensor():
  process = weighted_mean_process()
  other = cf.compile(weighted_mean_process(step_scale=0.5001))
  with pytest.raises(AssertionError) as caught:
    testing.assert_rounds_match(process, _weighted_data(2, 7), rounds=2,
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
        client_state_process(), _client_state_data(), rounds=1,
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
