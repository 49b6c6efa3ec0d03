"""The pure learning blocks: functional model, optimizers, client and server updates."""

import random

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import op_def_registry

from canonical import learning
from canonical.learning import models

# Ops that mean a trace touches variables or draws stateful randomness.
_IMPURE_OPS = {
    'VarHandleOp', 'ReadVariableOp', 'AssignVariableOp', 'AssignAddVariableOp',
    'AssignSubVariableOp', 'VariableV2', 'VarIsInitializedOp',
    'ResourceGather', 'RandomUniform', 'RandomUniformInt',
    'RandomStandardNormal', 'TruncatedNormal', 'RandomShuffle', 'Multinomial',
    'RandomGamma', 'RandomPoisson', 'RandomPoissonV2',
    'StatefulUniform', 'StatefulStandardNormalV2', 'StatefulPartitionedCall',
    'AnonymousIteratorV3', 'IteratorGetNext',
}
# The one stateful op a client update may hold: the reduction over its data.
_ALLOWED_STATEFUL_OPS = {'ReduceDataset'}


def _op_types(concrete_fn):
  """Every op type in the function's graph and in the functions it calls."""
  graph_def = concrete_fn.graph.as_graph_def()
  types = {node.op for node in graph_def.node}
  for function in graph_def.library.function:
    types |= {node.op for node in function.node_def}
  return types


def _assert_pure(concrete_fn):
  types = _op_types(concrete_fn)
  assert not types & _IMPURE_OPS, types & _IMPURE_OPS
  stateful = {t for t in types if op_def_registry.get(t).is_stateful}
  assert stateful <= _ALLOWED_STATEFUL_OPS, stateful
  assert not concrete_fn.captured_inputs
  assert all(t.dtype != tf.resource for t in concrete_fn.graph.inputs)


def _tiny_mlp():
  return keras.Sequential([
      keras.Input(shape=(4,)),
      keras.layers.Dense(8, activation='relu'),
      keras.layers.Dense(2),
  ])


def _mlp_with_dropout_and_batch_norm():
  return keras.Sequential([
      keras.Input(shape=(4,)),
      keras.layers.Dense(8, kernel_regularizer=keras.regularizers.L2(0.01)),
      keras.layers.BatchNormalization(),
      keras.layers.Dropout(0.3),
      keras.layers.Dense(2),
  ])


def _separable(n, seed):
  """Points in R^4 labelled by the sign of their first coordinate, with a margin."""
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, 4)).astype(np.float32)
  y = (x[:, 0] > 0).astype(np.int32)
  x[:, 0] += np.where(y == 1, 1.0, -1.0)
  return x, y


def _batches(x, y, batch_size):
  return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)


def _quadrant_digits(n, seed):
  """8x8 images whose label (0-3) is the quadrant that is bright."""
  rng = np.random.default_rng(seed)
  y = rng.integers(0, 4, n).astype(np.int32)
  x = rng.uniform(0, 0.3, size=(n, 8, 8, 1)).astype(np.float32)
  for i, label in enumerate(y):
    row, col = divmod(int(label), 2)
    x[i, 4 * row:4 * row + 4, 4 * col:4 * col + 4, 0] += 0.7
  return x, y


def _traced_client_update(functional_model, optimizer, epochs=1):
  return tf.function(
      lambda weights, dataset: learning.client_update(
          functional_model, optimizer, weights, dataset, epochs=epochs),
      input_signature=[functional_model.weights_spec,
                       tf.data.DatasetSpec(functional_model.batch_spec)])


@pytest.fixture(scope='module')
def mlp():
  return learning.KerasFunctionalModel.from_keras(_tiny_mlp, seed=1)


@pytest.fixture(scope='module')
def digits_model():
  return learning.KerasFunctionalModel.from_keras(models.small_8x8, seed=0)


# ---------------------------------------------------------------------------
# Model builders and FunctionalModel.


def test_cnn_28x28_has_the_tutorial_parameter_count():
  model = models.cnn_28x28()
  assert model.count_params() == 1_663_370
  assert tuple(model.inputs[0].shape) == (None, 28, 28, 1)
  assert tuple(model.outputs[0].shape) == (None, 10)


def test_small_8x8_is_small():
  model = models.small_8x8()
  assert 1_000 <= model.count_params() <= 10_000
  assert tuple(model.inputs[0].shape) == (None, 8, 8, 1)
  assert tuple(model.outputs[0].shape) == (None, 10)


def test_initial_weights_are_a_function_of_the_seed(mlp):
  python_state, numpy_state = random.getstate(), np.random.get_state()
  again = learning.KerasFunctionalModel.from_keras(_tiny_mlp, seed=1)
  other = mlp.initial_weights_for_seed(2)
  assert random.getstate() == python_state
  assert np.array_equal(np.random.get_state()[1], numpy_state[1])
  for a, b in zip(mlp.initial_model_weights.trainable,
                  again.initial_model_weights.trainable):
    np.testing.assert_array_equal(a, b)
  for a, b in zip(mlp.initial_weights_for_seed(1).trainable,
                  mlp.initial_weights_for_seed(2).trainable):
    assert a.shape == b.shape
  assert not np.array_equal(mlp.initial_model_weights.trainable[0],
                            other.trainable[0])
  np.testing.assert_array_equal(other.trainable[0],
                                mlp.initial_weights_for_seed(2).trainable[0])


def test_initial_weights_are_copies(mlp):
  mlp.initial_model_weights.trainable[0][...] = 7.0
  assert not np.all(mlp.initial_model_weights.trainable[0] == 7.0)


def test_weights_spec_matches_the_initial_weights(mlp):
  spec, weights = mlp.weights_spec, mlp.initial_model_weights
  assert [s.shape for s in spec.trainable] == [(4, 8), (8,), (8, 2), (2,)]
  for leaf_spec, value in zip(tf.nest.flatten(spec), tf.nest.flatten(weights)):
    assert leaf_spec.is_compatible_with(tf.constant(value))
  assert mlp.batch_spec == (tf.TensorSpec([None, 4], tf.float32),
                            tf.TensorSpec([None], tf.int32))


def test_forward_matches_the_keras_model(digits_model):
  x, _ = _quadrant_digits(5, seed=0)
  logits, non_trainable = digits_model.forward(
      digits_model.initial_model_weights, x, training=False)
  expected = digits_model.keras_model(x, training=False)
  np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-6)
  assert non_trainable == ()


def test_forward_traces_without_variables(digits_model):
  forward = tf.function(
      lambda weights, x: digits_model.forward(weights, x, training=True),
      input_signature=[digits_model.weights_spec, digits_model.x_spec])
  _assert_pure(forward.get_concrete_function())


def test_loss_and_metrics_of_a_batch(mlp):
  x, y = _separable(16, seed=3)
  weights = mlp.initial_model_weights
  output = mlp.loss_and_metrics(weights, (x, y))
  as_dict = mlp.loss_and_metrics(weights, {'x': x, 'y': y[:, None]})
  logits, _ = mlp.forward(weights, x)
  expected_loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(
      y, logits)
  np.testing.assert_allclose(output.loss, expected_loss, rtol=1e-5)
  np.testing.assert_allclose(output.metrics['loss_sum'], 16 * expected_loss,
                             rtol=1e-5)
  assert output.metrics['num_examples'] == 16.0
  assert output.metrics['correct'] == np.sum(np.argmax(logits, -1) == y)
  for name in mlp.metric_sum_names:
    np.testing.assert_allclose(as_dict.metrics[name], output.metrics[name])


def test_empty_batch_has_zero_loss(mlp):
  x, y = np.zeros((0, 4), np.float32), np.zeros((0,), np.int32)
  output = mlp.loss_and_metrics(mlp.initial_model_weights, (x, y))
  assert output.loss == 0.0
  assert output.metrics['num_examples'] == 0.0


def test_regularization_counts_in_the_loss_not_in_loss_sum():
  model = learning.KerasFunctionalModel.from_keras(
      _mlp_with_dropout_and_batch_norm)
  x, y = _separable(8, seed=0)
  weights = model.initial_model_weights
  output = model.loss_and_metrics(weights, (x, y), training=False)
  kernel = weights.trainable[0]
  l2 = 0.01 * np.sum(np.square(kernel))
  np.testing.assert_allclose(
      output.loss - output.metrics['loss_sum'] / 8, l2, rtol=1e-4)


def test_mean_metrics(mlp):
  means = mlp.mean_metrics({'loss_sum': tf.constant(6.0),
                            'num_examples': tf.constant(4.0),
                            'correct': tf.constant(3.0)})
  assert means['loss'] == 1.5 and means['accuracy'] == 0.75


def test_bad_inputs_get_clear_errors(mlp):
  with pytest.raises(TypeError, match='batch must be'):
    mlp.loss_and_metrics(mlp.initial_model_weights, np.zeros((2, 4), np.float32))
  with pytest.raises(ValueError, match='Unknown loss'):
    learning.KerasFunctionalModel.from_keras(_tiny_mlp, loss='hinge')
  with pytest.raises(ValueError, match='class labels'):
    learning.KerasFunctionalModel.from_keras(_tiny_mlp,
                                             loss='mean_squared_error')
  with pytest.raises(ValueError, match='explicit input shape'):
    learning.KerasFunctionalModel.from_keras(
        lambda: keras.Sequential([keras.layers.Dense(2)]))
  with pytest.raises(TypeError, match='moved: call canonical.learning.'
                     'KerasFunctionalModel.from_keras'):
    learning.FunctionalModel.from_keras(_tiny_mlp)
  with pytest.raises(ValueError, match='positive Python int'):
    learning.client_update(mlp, learning.sgd(0.1), mlp.initial_model_weights,
                           _batches(*_separable(4, 0), 2), epochs=0)


def test_mean_squared_error_regression():
  model = learning.KerasFunctionalModel.from_keras(
      _tiny_mlp, loss='mean_squared_error', metrics=())
  x = np.ones((3, 4), np.float32)
  target = np.zeros((3, 2), np.float32)
  output = model.loss_and_metrics(model.initial_model_weights, (x, target))
  logits, _ = model.forward(model.initial_model_weights, x)
  np.testing.assert_allclose(output.loss, np.mean(np.square(logits)),
                             rtol=1e-5)
  assert set(output.metrics) == {'loss_sum', 'num_examples'}


# ---------------------------------------------------------------------------
# Optimizers.


def _quadratic_problem():
  rng = np.random.default_rng(7)
  weights = (rng.normal(size=(3, 2)).astype(np.float32),
             rng.normal(size=(2,)).astype(np.float32))
  targets = (rng.normal(size=(3, 2)).astype(np.float32),
             rng.normal(size=(2,)).astype(np.float32))

  def gradients(current):
    # Gradient of sum((w - t)^4 / 4): not proportional to w, so Adam's
    # normalisation matters from the first step on.
    return tuple((tf.convert_to_tensor(w) - t) ** 3
                 for w, t in zip(current, targets))

  return weights, gradients


@pytest.mark.parametrize('kwargs', [
    dict(learning_rate=0.01),
    dict(learning_rate=0.1, beta_1=0.5, beta_2=0.9, epsilon=1e-3),
])
def test_adam_matches_keras(kwargs):
  weights, gradients = _quadratic_problem()
  optimizer = learning.adam(**kwargs)
  state = optimizer.init(weights)
  ours = weights
  variables = [keras.Variable(w) for w in weights]
  reference = keras.optimizers.Adam(**kwargs)
  for _ in range(6):
    state, ours = optimizer.apply(state, ours, gradients(ours))
    reference.apply_gradients(zip(
        gradients([v.numpy() for v in variables]), variables))
  assert state['step'] == 6
  for mine, theirs, start in zip(ours, variables, weights):
    assert not np.allclose(mine, start)
    np.testing.assert_allclose(mine, theirs.numpy(), atol=1e-5, rtol=0)


def test_sgd_is_the_formula():
  weights, gradients = _quadratic_problem()
  optimizer = learning.sgd(0.1)
  state = optimizer.init(weights)
  grads = gradients(weights)
  state, updated = optimizer.apply(state, weights, grads)
  assert state == {}
  for new, old, g in zip(updated, weights, grads):
    np.testing.assert_allclose(new, old - 0.1 * g.numpy(), rtol=1e-6)


def test_sgd_momentum_matches_keras_and_the_formula():
  weights, gradients = _quadratic_problem()
  optimizer = learning.sgd(0.05, momentum=0.9)
  state = optimizer.init(weights)
  ours = weights
  by_hand = [w.copy() for w in weights]
  velocity = [np.zeros_like(w) for w in weights]
  variables = [keras.Variable(w) for w in weights]
  reference = keras.optimizers.SGD(0.05, momentum=0.9)
  for _ in range(4):
    grads = [g.numpy() for g in gradients(by_hand)]
    velocity = [0.9 * v - 0.05 * g for v, g in zip(velocity, grads)]
    by_hand = [w + v for w, v in zip(by_hand, velocity)]
    state, ours = optimizer.apply(state, ours, gradients(ours))
    reference.apply_gradients(zip(
        gradients([v.numpy() for v in variables]), variables))
  for mine, hand, theirs in zip(ours, by_hand, variables):
    np.testing.assert_allclose(mine, hand, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mine, theirs.numpy(), rtol=1e-5, atol=1e-6)


def test_optimizers_refuse_bad_arguments():
  weights, _ = _quadratic_problem()
  optimizer = learning.sgd(0.1)
  with pytest.raises(ValueError, match='structure of the weights'):
    optimizer.apply(optimizer.init(weights), weights, (weights[0],))
  with pytest.raises(ValueError, match='momentum'):
    learning.sgd(0.1, momentum=1.5)
  with pytest.raises(ValueError, match='epsilon'):
    learning.adam(0.1, epsilon=0.0)


# ---------------------------------------------------------------------------
# Client update.


def test_client_update_traces_to_a_pure_graph_with_the_dataset_as_argument(
    digits_model):
  work = _traced_client_update(digits_model, learning.adam(0.01), epochs=2)
  concrete = work.get_concrete_function()
  _assert_pure(concrete)
  assert 'ReduceDataset' in _op_types(concrete)
  assert any(t.dtype == tf.variant for t in concrete.inputs)
  # The dataset is an argument: different data, different update.
  weights = digits_model.initial_model_weights
  first = work(weights, _batches(*_quadrant_digits(8, seed=0), 4))
  second = work(weights, _batches(*_quadrant_digits(12, seed=1), 4))
  assert first.num_examples == 8.0 and second.num_examples == 12.0
  assert not np.array_equal(first.weights_delta[0], second.weights_delta[0])


def test_dropout_and_batch_norm_stay_pure():
  model = learning.KerasFunctionalModel.from_keras(
      _mlp_with_dropout_and_batch_norm)
  work = _traced_client_update(model, learning.sgd(0.1))
  concrete = work.get_concrete_function()
  _assert_pure(concrete)
  assert 'StatelessRandomUniformV2' in _op_types(concrete)
  output = work(model.initial_model_weights, _batches(*_separable(8, seed=0), 4))
  assert all(np.all(np.isfinite(d)) for d in output.weights_delta)


def test_client_update_reduces_the_loss(mlp):
  x, y = _separable(64, seed=0)
  data = _batches(x, y, 8)
  weights = mlp.initial_model_weights
  before = mlp.mean_metrics(learning.evaluate(mlp, weights, data))
  output = _traced_client_update(mlp, learning.sgd(0.2), epochs=5)(
      weights, data)
  trained = learning.ModelWeights(
      tuple(w + d for w, d in zip(weights.trainable, output.weights_delta)),
      weights.non_trainable)
  after = mlp.mean_metrics(learning.evaluate(mlp, trained, data))
  assert after['loss'] < 0.5 * before['loss']
  assert after['accuracy'] >= 0.95
  assert output.metrics['non_finite_updates'] == 0.0


def test_client_update_learns_the_digits_model(digits_model):
  data = _batches(*_quadrant_digits(64, seed=0), 16)
  weights = digits_model.initial_model_weights
  output = learning.client_update(digits_model, learning.adam(0.01), weights,
                                  data, epochs=4)
  # Metrics are summed as the model trains: the last epoch's loss is lower.
  first_epoch = learning.client_update(digits_model, learning.adam(0.01),
                                       weights, data, epochs=1)
  mean_loss_4 = output.metrics['loss_sum'] / output.metrics['num_examples']
  mean_loss_1 = (first_epoch.metrics['loss_sum']
                 / first_epoch.metrics['num_examples'])
  assert mean_loss_4 < mean_loss_1
  trained = learning.ModelWeights(
      tuple(w + d for w, d in zip(weights.trainable, output.weights_delta)), ())
  accuracy = digits_model.mean_metrics(
      learning.evaluate(digits_model, trained, data))['accuracy']
  assert accuracy >= 0.9


def test_client_update_is_deterministic(digits_model):
  data = _batches(*_quadrant_digits(24, seed=2), 8)
  weights = digits_model.initial_model_weights
  runs = [_traced_client_update(digits_model, learning.adam(0.01))]
  runs.append(runs[0])  # the same trace, called again
  runs.append(_traced_client_update(digits_model, learning.adam(0.01)))
  outputs = [run(weights, data) for run in runs]
  reference = tf.nest.flatten(outputs[0])
  for output in outputs[1:]:
    for a, b in zip(reference, tf.nest.flatten(output)):
      np.testing.assert_array_equal(a, b)


def test_client_output_structure(mlp):
  output = _traced_client_update(mlp, learning.sgd(0.1), epochs=3)(
      mlp.initial_model_weights, _batches(*_separable(10, seed=0), 4))
  tf.nest.assert_same_structure(output.weights_delta, mlp.weights_spec.trainable)
  for delta, spec in zip(output.weights_delta, mlp.weights_spec.trainable):
    assert delta.shape == spec.shape and delta.dtype == spec.dtype
  assert output.num_examples.dtype == tf.float32
  assert output.num_examples == 10.0  # one pass: the client's weight
  assert output.metrics['num_examples'] == 30.0  # examples trained on
  assert set(output.metrics) == {'loss_sum', 'num_examples', 'correct',
                                 'non_finite_updates'}


def test_client_update_starts_its_optimizer_fresh(mlp):
  work = _traced_client_update(mlp, learning.adam(0.05))
  data = _batches(*_separable(8, seed=0), 8)
  a = work(mlp.initial_model_weights, data)
  b = work(mlp.initial_model_weights, data)
  for x, y in zip(a.weights_delta, b.weights_delta):
    np.testing.assert_array_equal(x, y)
  # One Adam step from fresh moments moves each weight by about the rate.
  np.testing.assert_allclose(np.max(np.abs(a.weights_delta[-1])), 0.05,
                             rtol=1e-3)


def test_client_with_no_data_sends_nothing(mlp):
  empty = _batches(*_separable(8, seed=0), 4).take(0)
  output = _traced_client_update(mlp, learning.sgd(0.1))(
      mlp.initial_model_weights, empty)
  assert output.num_examples == 0.0
  assert all(np.all(d == 0) for d in output.weights_delta)
  assert output.metrics['non_finite_updates'] == 0.0


def test_an_empty_batch_is_no_step(mlp):
  """A zero-size batch between two others changes nothing: with momentum a
  zero gradient would still move the weights, so the step is skipped (and
  oneDNN's pooling gradient aborts on zero-size batches on some CPUs)."""
  x, y = _separable(8, seed=0)
  full = _batches(x, y, 4)
  empty = tf.data.Dataset.from_tensors((x[:0], y[:0]))
  with_empty = full.take(1).concatenate(empty).concatenate(full.skip(1))
  work = _traced_client_update(mlp, learning.sgd(0.1, momentum=0.9))
  a = work(mlp.initial_model_weights, full)
  b = work(mlp.initial_model_weights, with_empty)
  for x_delta, y_delta in zip(a.weights_delta, b.weights_delta):
    np.testing.assert_array_equal(x_delta, y_delta)
  assert b.num_examples == 8.0


def test_client_with_non_finite_update_is_dropped(mlp):
  x, y = _separable(8, seed=0)
  x[3, 1] = np.nan
  output = learning.client_update(mlp, learning.sgd(0.1),
                                  mlp.initial_model_weights, _batches(x, y, 4))
  assert output.num_examples == 0.0
  assert all(np.all(d == 0) for d in output.weights_delta)
  assert output.metrics['non_finite_updates'] == 1.0


def test_dict_batches(mlp):
  x, y = _separable(8, seed=0)
  as_pairs = learning.client_update(mlp, learning.sgd(0.1),
                                    mlp.initial_model_weights, _batches(x, y, 4))
  as_dicts = learning.client_update(
      mlp, learning.sgd(0.1), mlp.initial_model_weights,
      tf.data.Dataset.from_tensor_slices({'x': x, 'y': y}).batch(4))
  for a, b in zip(tf.nest.flatten(as_pairs), tf.nest.flatten(as_dicts)):
    np.testing.assert_array_equal(a, b)


def test_cnn_28x28_client_update_runs():
  model = learning.KerasFunctionalModel.from_keras(models.cnn_28x28)
  rng = np.random.default_rng(0)
  x = rng.uniform(size=(4, 28, 28, 1)).astype(np.float32)
  y = rng.integers(0, 10, 4).astype(np.int32)
  work = _traced_client_update(model, learning.sgd(0.01))
  _assert_pure(work.get_concrete_function())
  output = work(model.initial_model_weights, _batches(x, y, 2))
  assert output.num_examples == 4.0
  assert [d.shape for d in output.weights_delta] == [
      s.shape for s in model.weights_spec.trainable]
  assert np.any(output.weights_delta[0] != 0)


def test_client_update_runs_from_a_reimported_graph_def(mlp):
  """The Beam runner's path: GraphDef bytes in, a dataset's variant tensor fed."""
  concrete = _traced_client_update(mlp, learning.sgd(0.1)).get_concrete_function()
  graph_def = tf.compat.v1.GraphDef.FromString(
      concrete.graph.as_graph_def().SerializeToString())
  input_names = [t.name for t in concrete.inputs]
  output_names = [t.name for t in concrete.outputs]
  wrapped = tf.compat.v1.wrap_function(
      lambda: tf.compat.v1.import_graph_def(graph_def, name=''), [])
  loaded = wrapped.prune(
      feeds=[wrapped.graph.get_tensor_by_name(n) for n in input_names],
      fetches=[wrapped.graph.get_tensor_by_name(n) for n in output_names])
  weights = mlp.initial_model_weights
  data = _batches(*_separable(12, seed=4), 4)
  outputs = loaded(*map(tf.constant, tf.nest.flatten(weights)),
                   tf.data.experimental.to_variant(data))
  expected = tf.nest.flatten(learning.client_update(
      mlp, learning.sgd(0.1), weights, data))
  assert len(outputs) == len(expected)
  for a, b in zip(outputs, expected):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------------
# Server update, evaluation and a round of federated averaging.


def test_server_sgd_at_rate_one_adds_the_mean_delta(mlp):
  weights = mlp.initial_model_weights
  rng = np.random.default_rng(0)
  mean_delta = tuple(rng.normal(size=w.shape).astype(np.float32)
                     for w in weights.trainable)
  optimizer = learning.sgd(1.0)
  state, updated = learning.server_update(
      optimizer, optimizer.init(weights.trainable), weights, mean_delta)
  assert state == {}
  for new, old, delta in zip(updated.trainable, weights.trainable, mean_delta):
    np.testing.assert_array_equal(new, old + delta)
  assert updated.non_trainable == weights.non_trainable


def test_server_adam_keeps_its_state(mlp):
  weights = mlp.initial_model_weights
  mean_delta = tuple(np.ones_like(w) for w in weights.trainable)
  optimizer = learning.adam(0.1)
  state = optimizer.init(weights.trainable)
  for _ in range(2):
    state, weights = learning.server_update(optimizer, state, weights,
                                            mean_delta)
  assert state['step'] == 2
  # A constant positive delta is followed, at about the learning rate a step.
  moved = weights.trainable[0] - mlp.initial_model_weights.trainable[0]
  np.testing.assert_allclose(moved, 0.2, rtol=1e-3)


def test_server_update_refuses_a_mismatched_delta(mlp):
  weights = mlp.initial_model_weights
  optimizer = learning.sgd(1.0)
  with pytest.raises(ValueError, match='trainable weights'):
    learning.server_update(optimizer, {}, weights, weights.trainable[:2])


def test_evaluate_sums_match_the_keras_model(digits_model):
  x, y = _quadrant_digits(20, seed=5)
  sums = learning.evaluate(digits_model, digits_model.initial_model_weights,
                           _batches(x, y, 6))
  logits = digits_model.keras_model(x, training=False)
  losses = keras.losses.sparse_categorical_crossentropy(y, logits,
                                                        from_logits=True)
  np.testing.assert_allclose(sums['loss_sum'], np.sum(losses), rtol=1e-5)
  assert sums['correct'] == np.sum(np.argmax(logits, -1) == y)
  assert sums['num_examples'] == 20.0


def test_evaluate_skips_zero_size_batches():
  """The CNN's metrics with a zero-size batch among the others are the same
  (oneDNN's convolution refuses a zero-size batch on some CPUs)."""
  model = learning.KerasFunctionalModel.from_keras(models.cnn_28x28)
  rng = np.random.default_rng(1)
  x = rng.uniform(size=(4, 28, 28, 1)).astype(np.float32)
  y = rng.integers(0, 10, 4).astype(np.int32)
  full = _batches(x, y, 2)
  empty = tf.data.Dataset.from_tensors((x[:0], y[:0]))
  weights = model.initial_model_weights
  expected = learning.evaluate(model, weights, full)
  got = learning.evaluate(
      model, weights, full.take(1).concatenate(empty).concatenate(
          full.skip(1)))
  assert {k: float(v) for k, v in got.items()} == {
      k: float(v) for k, v in expected.items()}
  assert float(got['num_examples']) == 4.0


def test_rounds_of_federated_averaging_reduce_the_loss(mlp):
  clients = [_batches(*_separable(n, seed=s), 8)
             for n, s in [(16, 10), (40, 11), (24, 12)]]
  test_data = _batches(*_separable(64, seed=99), 16)
  work = _traced_client_update(mlp, learning.sgd(0.1))
  server_optimizer = learning.sgd(1.0, momentum=0.5)
  weights = mlp.initial_model_weights
  state = server_optimizer.init(weights.trainable)
  start = mlp.mean_metrics(learning.evaluate(mlp, weights, test_data))
  for _ in range(5):
    outputs = [work(weights, data) for data in clients]
    total = sum(o.num_examples for o in outputs)
    mean_delta = tuple(
        sum(o.num_examples * o.weights_delta[i] for o in outputs) / total
        for i in range(len(weights.trainable)))
    state, weights = learning.server_update(server_optimizer, state, weights,
                                            mean_delta)
  end = mlp.mean_metrics(learning.evaluate(mlp, weights, test_data))
  assert end['loss'] < 0.6 * start['loss']
  assert end['accuracy'] >= 0.9
