"""Small processes shared by the equivalence tests of the compiler and the runner.

Each exercises one shape of round: a sum, a weighted mean with a broadcast, a max
through federated_aggregate, two broadcasts and two aggregations, no broadcast,
and client state kept between rounds; `summed_process` wraps one client function
for tests about what a piece does; `secure_sums_process` runs the three
secure sums and a plain mean (the secure-sum tests of canonical/secagg and of
the Beam runner).
"""

import numpy as np
import tensorflow as tf

import canonical as cf

F = tf.TensorSpec([], tf.float32)
I = tf.TensorSpec([], tf.int32)
F2 = tf.TensorSpec([2], tf.float32)
I3 = tf.TensorSpec([3], tf.int32)


@cf.tf_computation(I)
def increment(n):
  return n + 1


def counting_state():
  return cf.tf_computation(lambda: tf.constant(0, tf.int32))


def random_floats(seed, n, shape=(2,)):
  rng = np.random.default_rng(seed)
  return {f'c{i}': rng.normal(size=shape).astype(np.float32)
          for i in range(n)}


# ----------------------------------------------------------------------------
# The processes


def summed_process(work, client_spec=F):
  """The smallest process around one client function: the server state (a
  float32) kept as is, the clients' float32 `work(data)` summed as X."""
  work = cf.tf_computation(work, client_spec)

  @cf.federated_computation(cf.server(F), cf.clients(client_spec))
  def next_fn(state, data):
    return state, cf.federated_sum(cf.federated_map(work, data))

  return cf.IterativeProcess(cf.tf_computation(lambda: tf.constant(0.0)),
                             next_fn)


def sum_process():

  @cf.federated_computation(cf.server(I), cf.clients(I3))
  def next_fn(state, data):
    return cf.federated_map(increment, state), cf.federated_sum(data)

  return cf.IterativeProcess(counting_state(), next_fn)


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


def weighted_data(seed, n):
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
    return cf.federated_map(increment, state), largest

  return cf.IterativeProcess(counting_state(), next_fn)


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


def client_state_data():
  return {k: v * 3 for k, v in random_floats(8, 5).items()}


def mean_process(mean, value_spec):
  """An IterativeProcess running the mean process `mean` alone: each client
  holds a (value, weight) pair; the metrics are the mean."""

  @cf.federated_computation(cf.server(mean.state_spec),
                            cf.clients((value_spec, F)))
  def next_fn(state, data):
    return mean.next(state, data[0], data[1])

  return cf.IterativeProcess(mean.initialize, next_fn)


def weighted_clients(value_spec, n, scale, seed=0):
  """`n` clients' (value, weight) pairs: normal values of stddev `scale`
  shaped like `value_spec`, integer weights 1..49 as float32."""
  rng = np.random.default_rng(seed)
  return [(tf.nest.map_structure(
      lambda s: rng.normal(0, scale, s.shape).astype(np.float32), value_spec),
           np.float32(rng.integers(1, 50))) for _ in range(n)]


SECURE_STATE = {'w': F, 'bits': tf.TensorSpec([], tf.int32)}


secure_state_init = cf.tf_computation(lambda: {'w': tf.constant(0.0),
                                               'bits': tf.constant(4)})


@cf.tf_computation(I3)
def total_as_float(x):
  return tf.cast(tf.reduce_sum(x), tf.float32)


@cf.tf_computation(SECURE_STATE)
def state_bits(state):
  return state['bits']


@cf.tf_computation(SECURE_STATE, I3, I3, I3, F)
def _secure_update(state, by_bits, by_max, modular, mean):
  new = {'w': state['w'] + mean, 'bits': state['bits'] + 1}
  return new, {'bitwidth': by_bits, 'max_input': by_max, 'modular': modular}


def secure_sums_process():
  """All three secure sums and a plain mean in one round; the bitwidth comes
  from the server state (and grows each round)."""

  @cf.federated_computation(cf.server(SECURE_STATE), cf.clients(I3))
  def next_fn(state, data):
    by_bits = cf.federated_secure_sum_bitwidth(
        data, cf.federated_map(state_bits, state))
    by_max = cf.federated_secure_sum(data, 20)
    modular = cf.federated_secure_modular_sum(data, 7)
    mean = cf.federated_mean(cf.federated_map(total_as_float, data))
    new_state, metrics = cf.federated_map(
        _secure_update, (state, by_bits, by_max, modular, mean))
    return new_state, metrics

  return cf.IterativeProcess(secure_state_init, next_fn)


# ----------------------------------------------------------------------------
# Per-client outputs: a last CLIENTS value `next` returns (the form's Y)


@cf.tf_computation(F2, F)
def _squared_distance(data, center):
  return tf.reduce_sum(tf.square(data - center))


@cf.tf_computation(F2)
def _size(data):
  return tf.size(data)


@cf.tf_computation(F2)
def _mean_of(data):
  return tf.reduce_mean(data)


def client_outputs_process():
  """Per-client outputs without client state: each client's squared
  distance to the broadcast state and its size; the state moves to the
  mean of the clients' means."""

  @cf.federated_computation(cf.server(F), cf.clients(F2))
  def next_fn(state, data):
    losses = cf.federated_map(_squared_distance,
                              (data, cf.federated_broadcast(state)))
    per_client = {'loss': losses, 'size': cf.federated_map(_size, data)}
    return (cf.federated_mean(cf.federated_map(_mean_of, data)),
            cf.federated_mean(losses), per_client)

  return cf.IterativeProcess(cf.tf_computation(lambda: tf.constant(0.0)),
                             next_fn)


def client_outputs_with_state_process():
  """Per-client outputs and client state: each client keeps (rounds joined,
  a running total of its data scaled by the broadcast state) and outputs
  both, the total doubled; the server state counts rounds from 1."""
  client_spec = (I, F)

  @cf.tf_computation(F2, client_spec, F)
  def step(data, client_state, scale):
    count, total = client_state
    return count + 1, total + scale * tf.reduce_sum(data)

  @cf.tf_computation(client_spec)
  def report(client_state):
    return {'joined': client_state[0], 'doubled': 2.0 * client_state[1]}

  @cf.tf_computation(client_spec)
  def total_of(client_state):
    return client_state[1]

  @cf.tf_computation(F)
  def next_scale(state):
    return state + 1.0

  @cf.federated_computation(cf.server(F), cf.clients(F2),
                            cf.clients(client_spec))
  def next_fn(state, data, client_state):
    new_client_state = cf.federated_map(
        step, (data, client_state, cf.federated_broadcast(state)))
    return (cf.federated_map(next_scale, state),
            cf.federated_sum(cf.federated_map(total_of, new_client_state)),
            new_client_state, cf.federated_map(report, new_client_state))

  return cf.IterativeProcess(
      cf.tf_computation(lambda: tf.constant(1.0)), next_fn,
      client_state_initializer=cf.tf_computation(
          lambda: (tf.constant(0), tf.constant(0.0))))


@cf.tf_computation(SECURE_STATE, I3, F)
def _secure_outputs_update(state, by_bits, mean):
  return {'w': state['w'] + mean, 'bits': state['bits'] + 1}, by_bits


def secure_sum_with_outputs_process():
  """A secure sum and a plain mean, and each client's total as its
  per-client output."""

  @cf.federated_computation(cf.server(SECURE_STATE), cf.clients(I3))
  def next_fn(state, data):
    by_bits = cf.federated_secure_sum_bitwidth(
        data, cf.federated_map(state_bits, state))
    totals = cf.federated_map(total_as_float, data)
    new_state, metrics = cf.federated_map(
        _secure_outputs_update, (state, by_bits, cf.federated_mean(totals)))
    return new_state, metrics, totals

  return cf.IterativeProcess(secure_state_init, next_fn)
