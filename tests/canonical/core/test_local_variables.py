"""Call-local variables lowered into values (canonical/core/local_variables.py).

Each computation below makes `tf.Variable`s as TFF 0.87 users write them;
its result must be bit for bit that of running the same function eagerly on
fresh variables, and its traced graph must hold no variable op.
"""

import numpy as np
import pytest
import tensorflow as tf
import keras

import canonical as tff
from canonical.core import computations
from canonical.core import local_variables
from canonical import form as form_lib
from canonical import saving

import marked_lines

F = tf.TensorSpec([], tf.float32)
_where = marked_lines.finder(__file__)


def _eager(value):
  return tf.nest.map_structure(
      lambda v: np.asarray(v.numpy() if hasattr(v, 'numpy') else v), value)


def _check(fn, specs, *args):
  """`fn` as a computation of `specs` on `args`: bit for bit what `fn` gives
  eagerly on fresh variables, from a graph with no variable op."""
  computation = tff.tensorflow.computation(fn, *specs)
  got = computation(*args)
  want = _eager(fn(*[tf.nest.map_structure(tf.constant, a) for a in args]))
  tf.nest.assert_same_structure(got, want, check_types=False)
  for g, w in zip(tf.nest.flatten(got), tf.nest.flatten(want)):
    np.testing.assert_array_equal(g, w)
  assert not computations.impure_ops(computation.concrete_function())
  return got


def test_reads_and_writes_with_an_initial_value_from_the_parameters():

  def fn(x):
    v = tf.Variable(x * 2.0)
    first = v.read_value()
    v.assign(x + 1.0)
    as_tensor = v * 3.0
    v.assign_add(x)
    v.assign_sub(0.25)
    return first, as_tensor, tf.raw_ops.ReadVariableOp(
        resource=v.handle, dtype=tf.float32), v

  assert [float(r) for r in _check(fn, [F], 1.5)] == [3.0, 7.5, 3.75, 3.75]


def test_several_variables_and_the_order_of_their_reads_and_writes():

  def fn(x):
    a = tf.Variable(x)
    b = tf.Variable(tf.zeros([3]) + x)
    before = a + tf.reduce_sum(b)
    b.assign(b * a)
    a.assign_add(tf.reduce_sum(b))
    b.assign_sub(tf.fill([3], a.read_value()))
    return before, a, b, a.read_value() * b

  _check(fn, [F], 2.0)


def test_nested_tf_functions_read_write_and_make_variables():

  @tf.function
  def scale(variable, factor):  # Takes a variable as its argument.
    variable.assign(variable * factor)
    return variable.read_value()

  def fn(x):
    v = tf.Variable(x)
    made = []

    @tf.function
    def step(y):
      if not made:  # Made inside, on the first call: lifted, as TFF does.
        made.append(tf.Variable(10.0))
      counter = made[0]
      counter.assign_add(y)
      v.assign_add(counter)
      return scale(v, y) + counter

    first = step(x)
    return first, step(x + 1.0), v

  _check(fn, [F], 0.5)


def test_while_loops_autograph_loops_and_conditions():

  def fn(x):
    v = tf.Variable(x)
    w = tf.Variable(0.0)
    for i in tf.range(4):
      v.assign_add(tf.cast(i, tf.float32))
      if v > 5.0:
        w.assign_add(v)
      else:
        w.assign_sub(1.0)
    while v < 20.0:  # The condition reads the variable.
      v.assign(v * 2.0)
    _, total = tf.while_loop(lambda i, _: i < 3,
                             lambda i, t: (i + 1, t + w.assign_add(1.0)),
                             [0, 0.0])
    tf.cond(x > 0.0, lambda: v.assign_add(100.0), lambda: v.assign_sub(100.0))
    return v, w, total

  _check(fn, [F], 1.0)
  _check(fn, [F], -1.0)


def test_dataset_reductions_and_for_loops_over_datasets():
  data = tf.TensorSpec([None], tf.float32)

  def fn(values):
    dataset = tf.data.Dataset.from_tensor_slices(values)
    total = tf.Variable(0.0)
    count = tf.Variable(0)
    scale = tf.Variable(2.0)
    reduced = dataset.reduce(0.0, lambda acc, x: acc + total.assign_add(x))
    for x in dataset.map(lambda x: x * scale):  # A map reading a variable.
      total.assign_add(x)
      count.assign_add(1)
    for x in dataset:
      if x > 2.5:
        break
      count.assign_add(10)
    return reduced, total, count

  _check(fn, [data], np.array([1.0, 2.0, 3.0, 4.0], np.float32))
  _check(fn, [data], np.zeros([0], np.float32))


def test_a_nested_tf_function_looping_over_a_dataset_keeps_its_order():
  # The loop's iterator is made by an op the loop waits for only by a
  # control edge: the pass keeps the edges it did not make redundant (once
  # it dropped every one, and the loop read an iterator not yet made).
  @tf.function
  def add_all(total, dataset):
    for x in iter(dataset):
      total.assign_add(tf.reduce_sum(x))
    return total.read_value()

  def fn(values):
    total = tf.Variable(1.0)
    return add_all(total, tf.data.Dataset.from_tensor_slices(values))

  got = _check(fn, [tf.TensorSpec([None], tf.float32)],
               np.array([1.0, 2.0, 3.0], np.float32))
  assert got == 7.0


BATCH = (tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None],
                                                              tf.int32))


def _batches(seed=0, sizes=(3, 5, 2)):
  rng = np.random.default_rng(seed)
  return [(rng.normal(size=(n, 4)).astype(np.float32),
           rng.integers(0, 4, size=n).astype(np.int32)) for n in sizes]


def test_keras_metrics_updated_batch_by_batch_over_a_dataset():

  def fn(xs, ys):
    metrics = [keras.metrics.SparseCategoricalAccuracy(),
               keras.metrics.SparseTopKCategoricalAccuracy(k=2),
               keras.metrics.AUC(num_thresholds=20),
               keras.metrics.Mean()]
    dataset = tf.data.Dataset.from_tensor_slices((xs, ys)).batch(3)
    for x, y in dataset:
      metrics[0].update_state(y, x)
      metrics[1].update_state(y, x)
      metrics[2].update_state(tf.one_hot(y, 4), tf.nn.softmax(x))
      metrics[3].update_state(tf.reduce_sum(x, axis=1))
    return ([m.result() for m in metrics],
            [[tf.convert_to_tensor(v) for v in m.variables] for m in metrics])

  xs = np.concatenate([b[0] for b in _batches()])
  ys = np.concatenate([b[1] for b in _batches()])
  results, _ = _check(fn, BATCH, xs, ys)
  assert 0.0 < float(results[0]) < float(results[1]) <= 1.0


@pytest.mark.parametrize('make_optimizer', [
    lambda: tf.keras.optimizers.SGD(0.1, momentum=0.9),
    lambda: tf.keras.optimizers.Adam(0.01),
], ids=['sgd_momentum', 'adam'])
def test_a_keras_optimizer_on_call_local_variables(make_optimizer):

  def fn(xs, ys):
    model = keras.Sequential([keras.Input([4]), keras.layers.Dense(4)])
    optimizer = make_optimizer()
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    for _ in tf.range(3):
      with tf.GradientTape() as tape:
        loss = loss_fn(ys, model(xs))
      grads = tape.gradient(loss, model.trainable_variables)
      optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return [tf.convert_to_tensor(v) for v in model.trainable_variables]

  keras.utils.set_random_seed(1)
  computation = tff.tensorflow.computation(fn, *BATCH)
  x, y = _batches()[1]
  keras.utils.set_random_seed(1)
  computation.concrete_function()  # Its initial weights: drawn now.
  got = computation(x, y)
  keras.utils.set_random_seed(1)
  want = _eager(fn(tf.constant(x), tf.constant(y)))
  for g, w in zip(got, want):
    np.testing.assert_array_equal(g, w)
  assert not computations.impure_ops(computation.concrete_function())


def test_sparse_reads_and_writes():
  ids = tf.TensorSpec([None], tf.int32)

  def fn(indices):
    table = tf.Variable(tf.reshape(tf.range(12, dtype=tf.float32), [4, 3]))
    looked_up = tf.gather(table, indices)  # ResourceGather
    table.scatter_add(tf.IndexedSlices(tf.ones([2, 3]), indices[:2]))
    table.scatter_sub(tf.IndexedSlices(tf.ones([1, 3]) * 0.5, indices[:1]))
    table.scatter_update(tf.IndexedSlices(tf.fill([1, 3], 7.0),
                                          indices[-1:]))
    table[1:3, 0].assign([-1.0, -2.0])  # ResourceStridedSliceAssign
    table.scatter_nd_add([[0, 0]], [100.0])
    return looked_up, table, tf.shape(table)

  _check(fn, [ids], np.array([1, 3, 3], np.int32))


def test_an_embedding_trained_by_a_keras_optimizer():

  def fn(ids):
    embedding = tf.Variable(tf.reshape(tf.range(8, dtype=tf.float32),
                                       [4, 2]))
    optimizer = tf.keras.optimizers.SGD(0.5)
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(tf.gather(embedding, ids) ** 2)
    grads = tape.gradient(loss, [embedding])  # IndexedSlices
    optimizer.apply_gradients(zip(grads, [embedding]))
    return embedding

  _check(fn, [tf.TensorSpec([None], tf.int32)], np.array([0, 2, 2], np.int32))


def test_a_variable_captured_from_outside_is_refused_naming_the_line():
  outside = tf.Variable(1.0)

  @tff.tensorflow.computation(F)
  def reads_outside(x):
    inside = tf.Variable(x)
    return inside + outside  # line:outside

  with pytest.raises(tff.FederatedError) as error:
    reads_outside.check_pure()
  message = str(error.value)
  assert 'made outside the computation' in message
  assert _where('outside') in message


def test_an_op_the_pass_does_not_lower_is_refused_by_name_and_line():

  @tff.tensorflow.computation(F)
  def multiplies_rows(x):
    v = tf.Variable(tf.ones([3]))
    v.scatter_mul(tf.IndexedSlices(tf.stack([x]), [1]))  # line:scatter_mul
    return v

  with pytest.raises(local_variables.Unsupported) as error:
    multiplies_rows.concrete_function()
  message = str(error.value)
  assert 'ResourceScatterMul' in message and "'multiplies_rows'" in message
  assert _where('scatter_mul') in message


def test_a_write_in_a_dataset_map_is_refused():

  @tff.tensorflow.computation(tf.TensorSpec([None], tf.float32))
  def writes_in_map(values):
    v = tf.Variable(0.0)
    dataset = tf.data.Dataset.from_tensor_slices(values)
    return dataset.map(v.assign_add).reduce(0.0, lambda a, x: a + x)

  with pytest.raises(local_variables.Unsupported, match='MapDataset.*only '
                     'dataset.reduce and a for loop'):
    writes_in_map.concrete_function()


def _counting_process():
  """A process whose client work and server update keep their running sums
  in call-local variables."""

  @tff.tensorflow.computation(tf.TensorSpec([None], tf.float32), F)
  def client_work(values, scale):
    total = tf.Variable(0.0)
    for x in tf.data.Dataset.from_tensor_slices(values):
      total.assign_add(x * scale)
    return total

  @tff.tensorflow.computation(F, F)
  def server_update(state, total):
    v = tf.Variable(state)
    v.assign_add(total)
    return v

  @tff.federated_computation(tff.type_at_server(F), tff.type_at_clients(
      tf.TensorSpec([None], tf.float32)))
  def next_fn(state, data):
    scale = tff.federated_broadcast(state)
    totals = tff.federated_map(client_work, (data, scale))
    total = tff.federated_sum(totals)
    return tff.federated_map(server_update, (state, total)), total

  initialize = tff.tensorflow.computation(lambda: tf.constant(1.0))
  return tff.templates.IterativeProcess(initialize, next_fn)


CLIENTS = [np.array([1.0, 2.0], np.float32), np.array([3.0], np.float32)]


def test_a_process_of_such_computations_compiles_saves_and_loads(tmp_path):
  process = _counting_process()
  form = tff.compile(process)
  for piece in form_lib.PIECES:
    assert not computations.impure_ops(getattr(form, piece).concrete_function)
  path = str(tmp_path / 'form.pb')
  tff.save(form, path)
  loaded = saving.load(path)
  state = loaded.initialize()
  for _ in range(2):
    state, total = tff.run_round(loaded, state, CLIENTS)
  local = process.initialize()
  for _ in range(2):
    local, local_total = process.next(local, CLIENTS)
  assert float(state) == float(local) == 1.0 + 6.0 + 7.0 * 6.0
  assert float(total) == float(local_total) == 42.0


def test_a_gradient_through_a_loop_that_carries_a_variable():
  # A Keras 3 GRU's shape: the loop passes the variable's handle on, and
  # the loop's gradient reads the shape of the handle it passed on.

  def fn(x):
    v = tf.Variable(tf.fill([3], 1.5))
    with tf.GradientTape() as tape:
      _, y = tf.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * v),
                           [tf.constant(0), x])
      loss = tf.reduce_sum(y)
    return tape.gradient(loss, v)

  got = _check(fn, [tf.TensorSpec([3], tf.float32)],
               np.array([1.0, 2.0, -1.0], np.float32))
  np.testing.assert_allclose(got, [6.75, 13.5, -6.75])  # 3 x v^2.


@pytest.mark.parametrize('state', [
    [1, 0, 12345],
    [-1, 0, 7],  # The counter's low word wraps: carried into the high one.
    [2**62, -1, 3],
])
def test_a_random_generator_made_inside_draws_as_eagerly(state):

  def fn(s):
    g = tf.random.Generator.from_state(s, 'philox')
    return (g.normal([]), g.uniform([2, 3], maxval=10, dtype=tf.int32),
            g.truncated_normal([4]), g.state.read_value())

  got = _check(fn, [tf.TensorSpec([3], tf.int64)], np.array(state, np.int64))
  assert not np.array_equal(got[3], state)  # The draws moved the counter.


def test_a_generator_from_a_seed_parameter_gives_tffs_numbers():
  computation = tff.tensorflow.computation(
      lambda i: tf.random.Generator.from_seed(i).normal([]), tf.int32)
  # TFF 0.87's (and TensorFlow's eager) draws for the seeds 1 and 2.
  np.testing.assert_allclose([computation(1), computation(2)],
                             [0.3052047, -0.38260335], rtol=1e-6)


def test_a_generator_of_another_algorithm_is_refused_by_name():

  def fn(s):
    return tf.random.Generator.from_state(s, 'threefry').normal([])

  with pytest.raises(local_variables.Unsupported,
                     match='algorithm other than Philox'):
    tff.tensorflow.computation(fn, tf.TensorSpec([2], tf.int64))(
        np.array([1, 2], np.int64))
