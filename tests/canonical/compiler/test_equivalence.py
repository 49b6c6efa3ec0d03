"""Compiled forms compute what their processes mean.

Each process runs round after round twice: by the reference executor (its
plain meaning, clients folded in order) and as its compiled canonical form in
`canonical.run_round`, with clients split into random groups whose
accumulators merge in random trees (several `merge_seed`s). Results match
exactly where no float sum is reordered (integers, min, max, stacks), and to
a tight tolerance otherwise.
"""

import numpy as np
import pytest
import tensorflow as tf

import canonical as cf
from canonical.executors import reference

import example_processes
from tensor_asserts import assert_same

F = tf.TensorSpec([], tf.float32)
I = tf.TensorSpec([], tf.int32)
F2 = tf.TensorSpec([2], tf.float32)
I3 = tf.TensorSpec([3], tf.int32)
SEEDS = (None, 0, 1, 2, 3, 4)


def _check_rounds(process, rounds, exact, seeds=SEEDS, normalize=None):
  """Runs `rounds` (client data per round) both ways; compares every seed."""
  form = cf.compile(process)
  normalize = normalize or (lambda x: x)
  state = process.initialize.invoke()
  assert_same(form.initialize(), state, exact=True, what='initialize')
  for number, data in enumerate(rounds):
    expected = reference.run_round(process, state, data)
    for seed in seeds:
      actual = cf.run_round(form, state, data, merge_seed=seed)
      assert_same(normalize(actual), normalize(expected), exact,
                   f'round {number}, merge_seed {seed}')
    state = expected[0]
  return form


# ----------------------------------------------------------------------------
# Aggregations


def _counting_state():
  return cf.tf_computation(lambda: tf.constant(0, tf.int32))


@cf.tf_computation(I)
def _increment(n):
  return n + 1


def test_sum_of_integers_is_exact():

  @cf.federated_computation(cf.server(I), cf.clients(I3))
  def next_fn(state, data):
    return cf.federated_map(_increment, state), cf.federated_sum(data)

  rng = np.random.default_rng(0)
  rounds = [[rng.integers(-100, 100, [3]).astype(np.int32) for _ in range(n)]
            for n in (1, 5, 8)]
  _check_rounds(cf.IterativeProcess(_counting_state(), next_fn), rounds,
                exact=True)


def test_sum_of_floats():

  @cf.federated_computation(cf.server(I), cf.clients(F2))
  def next_fn(state, data):
    return cf.federated_map(_increment, state), cf.federated_sum(data)

  rng = np.random.default_rng(1)
  rounds = [[rng.normal(size=[2]).astype(np.float32) for _ in range(n)]
            for n in (3, 9)]
  _check_rounds(cf.IterativeProcess(_counting_state(), next_fn), rounds,
                exact=False)


def test_weighted_and_unweighted_mean():

  @cf.tf_computation(F2, F2)
  def take_mean(_, mean):
    return mean

  @cf.federated_computation(cf.server(F2), cf.clients((F2, F)))
  def next_fn(state, data):
    weighted = cf.federated_mean(data[0], weight=data[1])
    plain = cf.federated_mean(data[0])
    return cf.federated_map(take_mean, (state, weighted)), plain

  rng = np.random.default_rng(2)
  rounds = [[(rng.normal(size=[2]).astype(np.float32),
              np.float32(rng.uniform(0.5, 3.0))) for _ in range(n)]
            for n in (2, 7)]
  process = cf.IterativeProcess(
      cf.tf_computation(lambda: tf.zeros([2])), next_fn)
  _check_rounds(process, rounds, exact=False)
  # And the mean is the mean.
  data = rounds[1]
  state, plain = reference.run_round(process, tf.zeros([2]), data)
  values = np.stack([d[0] for d in data])
  weights = np.array([d[1] for d in data])
  np.testing.assert_allclose(state, (values * weights[:, None]).sum(0) /
                             weights.sum(), rtol=1e-5)
  np.testing.assert_allclose(plain, values.mean(0), rtol=1e-5)


def test_max_through_federated_aggregate_is_exact():
  rng = np.random.default_rng(3)
  rounds = [[rng.normal(size=[2]).astype(np.float32) for _ in range(n)]
            for n in (1, 6, 11)]
  _check_rounds(example_processes.max_process(), rounds, exact=True)


def test_builtin_min_and_max_are_exact():

  @cf.federated_computation(cf.server(I), cf.clients((I3, F2)))
  def next_fn(state, data):
    metrics = (cf.federated_min(data[0]), cf.federated_max(data[0]),
               cf.federated_min(data[1]), cf.federated_max(data[1]))
    return cf.federated_map(_increment, state), metrics

  rng = np.random.default_rng(4)
  rounds = [[(rng.integers(-1000, 1000, [3]).astype(np.int32),
              rng.normal(size=[2]).astype(np.float32)) for _ in range(n)]
            for n in (1, 4, 9)]
  _check_rounds(cf.IterativeProcess(_counting_state(), next_fn), rounds,
                exact=True)
  _, (imin, imax, fmin, fmax) = reference.run_round(
      cf.IterativeProcess(_counting_state(), next_fn), 0, rounds[2])
  ints = np.stack([d[0] for d in rounds[2]])
  np.testing.assert_array_equal(imin, ints.min(0))
  np.testing.assert_array_equal(imax, ints.max(0))
  floats = np.stack([d[1] for d in rounds[2]])
  np.testing.assert_array_equal(fmin, floats.min(0))
  np.testing.assert_array_equal(fmax, floats.max(0))


def test_stack_aggregation_with_unknown_leading_dimension():
  """An accumulator that grows by one row per client: shape [None, 2]."""
  rows = tf.TensorSpec([None, 2], tf.int32)
  row = tf.TensorSpec([2], tf.int32)

  @cf.tf_computation
  def empty():
    return tf.zeros([0, 2], tf.int32)

  @cf.tf_computation(rows, row)
  def push(stack, value):
    return tf.concat([stack, value[tf.newaxis]], axis=0)

  @cf.tf_computation(rows, rows)
  def join(a, b):
    return tf.concat([a, b], axis=0)

  @cf.tf_computation(rows)
  def count_rows(stack):
    return stack, tf.shape(stack)[0]

  @cf.federated_computation(cf.server(I), cf.clients(row))
  def next_fn(state, data):
    stacked = cf.federated_aggregate(data, empty, push, join, count_rows)
    return cf.federated_map(_increment, state), stacked

  def sort_rows(result):
    state, (stack, count) = result
    stack = np.asarray(stack)
    return state, (stack[np.lexsort(stack.T[::-1])], count)

  rng = np.random.default_rng(5)
  rounds = [[rng.integers(0, 50, [2]).astype(np.int32) for _ in range(n)]
            for n in (0, 1, 5, 12)]
  form = _check_rounds(cf.IterativeProcess(_counting_state(), next_fn),
                       rounds, exact=True, normalize=sort_rows)
  assert form.accumulator_spec[0].shape.as_list() == [None, 2]
  assert form.zero()[0].shape == (0, 2)
  _, (stack, count) = cf.run_round(form, 0, rounds[3], merge_seed=9)
  assert stack.shape == (12, 2) and int(count) == 12


def test_stack_of_scalars_with_constant_zero():
  """Declared accumulator tf.TensorSpec([None]); the zero is a constant [0]."""
  stack_spec = tf.TensorSpec([None], tf.float32)

  @cf.tf_computation(stack_spec, F)
  def push(stack, value):
    return tf.concat([stack, [value]], axis=0)

  @cf.tf_computation(stack_spec, stack_spec)
  def join(a, b):
    return tf.concat([a, b], axis=0)

  @cf.tf_computation(stack_spec)
  def sort(stack):
    return tf.sort(stack)

  @cf.federated_computation(cf.server(I), cf.clients(F))
  def next_fn(state, data):
    return cf.federated_map(_increment, state), cf.federated_aggregate(
        data, np.zeros([0], np.float32), push, join, sort)

  rounds = [[np.float32(v) for v in np.random.default_rng(6).normal(size=n)]
            for n in (3, 8)]
  _check_rounds(cf.IterativeProcess(_counting_state(), next_fn), rounds,
                exact=True)


# ----------------------------------------------------------------------------
# Round shapes


def test_two_broadcasts_and_two_aggregations_with_server_logic():
  """prepare and update both need the server's scaled weights."""
  process = example_processes.two_broadcasts_process()
  rng = np.random.default_rng(7)
  rounds = [[rng.normal(size=[2]).astype(np.float32) for _ in range(n)]
            for n in (2, 5, 3)]
  form = _check_rounds(process, rounds, exact=False)
  assert len(form.broadcast_spec) == 2
  assert len(form.client_update_spec) == 2


def test_no_broadcast():
  process = example_processes.no_broadcast_process()
  rounds = [[np.float32(v) for v in range(n)] for n in (4, 2, 6)]
  form = _check_rounds(process, rounds, exact=True)  # Small integers: exact.
  assert form.broadcast_spec == ()


def test_no_aggregation_server_only():

  @cf.federated_computation(cf.server(I), cf.clients(F))
  def next_fn(state, data):
    del data
    return cf.federated_map(_increment, state), ()

  process = cf.IterativeProcess(_counting_state(), next_fn)
  form = _check_rounds(process, [[np.float32(1)] * 3, []], exact=True)
  assert form.client_update_spec == () and form.accumulator_spec == ()
  state = form.initialize()
  for _ in range(3):
    state, metrics = cf.run_round(form, state, [1.0, 2.0], merge_seed=1)
  assert int(state) == 3 and metrics == ()


def _run_with_client_state(process, schedule, data_of, exact):
  """Runs rounds where `schedule` names the sampled clients of each round;
  client states persist per client id across rounds, both ways."""
  form = cf.compile(process)
  server = {'ref': process.initialize.invoke()}
  server['form'] = server['ref']
  kept = {'ref': {}, 'form': {}}
  for number, ids in enumerate(schedule):
    data = [data_of(number, i) for i in ids]
    ref_state, ref_metrics, ref_clients = reference.run_round(
        process, server['ref'], data, [kept['ref'].get(i) for i in ids])
    seed = number  # A different merge tree every round.
    state, metrics, clients = cf.run_round(
        form, server['form'], data, [kept['form'].get(i) for i in ids],
        merge_seed=seed)
    assert_same((state, metrics), (ref_state, ref_metrics), exact,
                 f'round {number}')
    for i, ref_client, client in zip(ids, ref_clients, clients):
      assert_same(client, ref_client, exact, f'client {i}, round {number}')
      kept['ref'][i], kept['form'][i] = ref_client, client
    server['ref'], server['form'] = ref_state, state
  return form, kept['ref']


SCHEDULE = ([0, 1, 2], [2, 3], [0, 3, 4, 1], [4], [1, 2, 3, 0, 4])


def test_client_state_counter_and_residual():
  """Error feedback in miniature: each client rounds data + residual to an
  integer, sends it, keeps the rest; and counts the rounds it joined."""
  process = example_processes.client_state_process()
  rng = np.random.default_rng(8)
  table = rng.normal(size=[len(SCHEDULE), 5, 2]).astype(np.float32) * 3
  form, kept = _run_with_client_state(
      process, SCHEDULE, lambda r, i: table[r, i], exact=True)
  counts = {i: int(state[0]) for i, state in kept.items()}
  assert counts == {0: 3, 1: 3, 2: 3, 3: 3, 4: 3}
  assert form.has_client_state
  assert form.client_state_spec == (I, F2)


def test_no_aggregation_client_state_only():

  @cf.tf_computation(F, F)
  def add(a, b):
    return a + b

  @cf.federated_computation(cf.server(I), cf.clients(F), cf.clients(F))
  def next_fn(state, data, client_state):
    return state, (), cf.federated_map(add, (data, client_state))

  process = cf.IterativeProcess(
      _counting_state(), next_fn,
      client_state_initializer=cf.tf_computation(lambda: tf.constant(10.0)))
  form, kept = _run_with_client_state(
      process, SCHEDULE, lambda r, i: np.float32(r + i), exact=True)
  # Client 3 joined rounds 1, 2 and 4: 10 + 4 + 5 + 7.
  assert float(kept[3]) == 26.0
  assert form.aggregated_bits == 0


# ----------------------------------------------------------------------------
# Datasets


BATCH = tf.TensorSpec([None, 2], tf.float32)


def _batches(rng, num_examples, batch_size=3):
  values = rng.normal(size=[num_examples, 2]).astype(np.float32)
  return tf.data.Dataset.from_tensor_slices(values).batch(batch_size)


def test_dataset_client_data_reduced_by_a_loop():

  @cf.tf_computation(tf.data.DatasetSpec(BATCH), F2)
  def local_sums(dataset, shift):
    total, count = tf.zeros([2]), tf.constant(0.0)
    for batch in dataset:  # AutoGraph turns this into a dataset reduction.
      total += tf.reduce_sum(batch + shift, axis=0)
      count += tf.cast(tf.shape(batch)[0], tf.float32)
    return total, count

  @cf.tf_computation(F2, F2, F)
  def mean_of(state, total, count):
    del state
    return total / count

  @cf.federated_computation(cf.server(F2), cf.clients(
      tf.data.DatasetSpec(BATCH)))
  def next_fn(state, data):
    total, count = cf.federated_map(local_sums,
                                    (data, cf.federated_broadcast(state)))
    sums = cf.federated_sum(total)
    counts = cf.federated_sum(count)
    return cf.federated_map(mean_of, (state, sums, counts)), counts

  rng = np.random.default_rng(9)
  rounds = [[_batches(rng, n) for n in sizes] for sizes in ([4, 7], [1, 9, 3])]
  process = cf.IterativeProcess(cf.tf_computation(lambda: tf.zeros([2])),
                                next_fn)
  form = _check_rounds(process, rounds, exact=False)
  assert isinstance(form.client_data_spec, tf.data.DatasetSpec)
  _, counts = cf.run_round(form, tf.zeros([2]), rounds[1], merge_seed=2)
  assert float(counts) == 13.0


def test_dataset_client_data_with_explicit_reduce_and_client_state():

  @cf.tf_computation(tf.data.DatasetSpec(BATCH), F)
  def count_and_remember(dataset, seen):
    count = dataset.reduce(0.0, lambda n, b: n + tf.cast(tf.shape(b)[0],
                                                          tf.float32))
    return count, seen + count

  @cf.federated_computation(cf.server(I), cf.clients(
      tf.data.DatasetSpec(BATCH)), cf.clients(F))
  def next_fn(state, data, seen):
    count, new_seen = cf.federated_map(count_and_remember, (data, seen))
    return cf.federated_map(_increment, state), cf.federated_sum(count), \
        new_seen

  process = cf.IterativeProcess(
      _counting_state(), next_fn,
      client_state_initializer=cf.tf_computation(lambda: tf.constant(0.0)))
  rng = np.random.default_rng(10)
  sizes = rng.integers(1, 8, [len(SCHEDULE), 5])
  _, kept = _run_with_client_state(
      process, SCHEDULE, lambda r, i: _batches(rng, int(sizes[r, i])),
      exact=True)
  joined = {i: [r for r, ids in enumerate(SCHEDULE) if i in ids]
            for i in range(5)}
  for i, rounds in joined.items():
    assert float(kept[i]) == sum(int(sizes[r, i]) for r in rounds)


# ----------------------------------------------------------------------------
# Federated averaging on a small Keras model


@pytest.mark.slow
def test_federated_averaging_small_model():
  from canonical import learning  # pylint: disable=g-import-not-at-top
  model = learning.KerasFunctionalModel.from_keras(learning.models.small_8x8)
  weights_spec = model.weights_spec
  data_spec = tf.data.DatasetSpec(model.batch_spec)
  initial = model.initial_model_weights
  client_optimizer = learning.sgd(0.1)

  @cf.tf_computation
  def initialize():
    return tf.nest.map_structure(tf.constant, initial)

  @cf.tf_computation(weights_spec, data_spec)
  def train(weights, dataset):
    output = learning.client_update(model, client_optimizer, weights, dataset)
    return output.weights_delta, output.num_examples, output.metrics

  @cf.tf_computation(weights_spec, weights_spec.trainable)
  def apply_delta(weights, delta):
    _, new_weights = learning.server_update(learning.sgd(1.0), (), weights,
                                            delta)
    return new_weights

  @cf.federated_computation(cf.server(weights_spec), cf.clients(data_spec))
  def next_fn(state, data):
    delta, num_examples, metrics = cf.federated_map(
        train, (cf.federated_broadcast(state), data))
    mean_delta = cf.federated_mean(delta, weight=num_examples)
    return (cf.federated_map(apply_delta, (state, mean_delta)),
            cf.federated_sum(metrics))

  rng = np.random.default_rng(11)

  def client(n):
    x = rng.normal(size=[n, 8, 8, 1]).astype(np.float32)
    y = rng.integers(0, 10, [n]).astype(np.int32)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(4)

  rounds = [[client(n) for n in (5, 9, 3)], [client(n) for n in (8, 2)]]
  _check_rounds(cf.IterativeProcess(initialize, next_fn), rounds,
                exact=False, seeds=(None, 0, 1))
