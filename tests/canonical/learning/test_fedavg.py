"""Federated averaging with encoded broadcast and mean, compiled to the canonical form:
the older builder, `build_federated_averaging_process`, which composes TFF's
`build_weighted_fed_avg` over the older building blocks."""

import numpy as np
import pytest
import tensorflow as tf

import canonical as cf
from canonical import aggregators
from canonical.core import computations
from canonical.core import types as ft
from canonical.executors import compiled
from canonical import learning
from canonical.learning import algorithms
from canonical.learning import framework
from canonical.learning import models
from canonical.templates import measured_process
import encoders as te

# 10000 (the tutorial's threshold) would leave every variable of the small
# model unencoded; above 100 elements, its two dense kernels (4096 and 320
# of 4538 weights) are encoded.
_BIG = 100
_CLIENT_SIZES = (16, 24, 40)
# TFF's metric sums: loss and accuracy (a sum and a count each, float32),
# num_examples and num_batches (int64).
_METRIC_BITS = 4 * 32 + 2 * 64


def _quadrant_digits(n, seed):
  """8x8 images whose label (0-3) is the quadrant that is bright: learnable."""
  rng = np.random.default_rng(seed)
  y = rng.integers(0, 4, n).astype(np.int32)
  x = rng.uniform(0, 0.3, size=(n, 8, 8, 1)).astype(np.float32)
  for i, label in enumerate(y):
    row, col = divmod(int(label), 2)
    x[i, 4 * row:4 * row + 4, 4 * col:4 * col + 4, 0] += 0.7
  return x, y


def _client(n, seed):
  return tf.data.Dataset.from_tensor_slices(_quadrant_digits(n, seed)).batch(8)


def _clients(sizes=_CLIENT_SIZES, first_seed=0):
  return [_client(n, first_seed + i) for i, n in enumerate(sizes)]


def _broadcast_encoder(spec):
  if spec.shape.num_elements() > _BIG:
    return te.encoders.as_simple_encoder(
        te.encoders.uniform_quantization(bits=8), spec)
  return te.encoders.as_simple_encoder(te.encoders.identity(), spec)


def _mean_encoder(spec):
  if spec.shape.num_elements() > _BIG:
    return te.encoders.as_gather_encoder(
        te.encoders.uniform_quantization(bits=8), spec)
  return te.encoders.as_gather_encoder(te.encoders.identity(), spec)


def _top_k_encoder(spec):
  if spec.shape.num_elements() > _BIG:
    return te.encoders.as_gather_encoder(te.encoders.top_k(fraction=0.05),
                                         spec)
  return te.encoders.as_gather_encoder(te.encoders.identity(), spec)


@pytest.fixture(scope='module')
def model():
  return learning.KerasFunctionalModel.from_keras(models.small_8x8, seed=0)


@pytest.fixture(scope='module')
def plain(model):
  process = algorithms.build_federated_averaging_process(
      model, lambda: learning.sgd(0.1))
  return process, cf.compile(process)


@pytest.fixture(scope='module')
def encoded(model):
  broadcast = framework.build_encoded_broadcast_process_from_model(
      model, _broadcast_encoder)
  mean = framework.build_encoded_mean_process_from_model(model, _mean_encoder)
  process = algorithms.build_federated_averaging_process(
      model, lambda: learning.sgd(0.1), broadcast_process=broadcast,
      aggregation_process=mean)
  return process, cf.compile(process), broadcast, mean


@pytest.fixture(scope='module')
def feedback(model):
  mean = framework.build_encoded_mean_process_from_model(
      model, _top_k_encoder, error_feedback=True)
  process = algorithms.build_federated_averaging_process(
      model, lambda: learning.sgd(0.1), aggregation_process=mean)
  return process, cf.compile(process), mean


def _train(metrics):
  """TFF's training metrics of a round."""
  return metrics['client_work']['train']


def _assert_close(actual, expected, atol=1e-6):
  tf.nest.assert_same_structure(actual, expected, check_types=False)
  for a, e in zip(tf.nest.flatten(actual), tf.nest.flatten(expected)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=1e-5,
                               atol=atol)


def _run_rounds_against_reference(process, form, clients, rounds, seeds):
  """Runs `rounds` rounds compiled, checking each against the reference."""
  state = form.initialize()
  _assert_close(state, process.initialize.invoke())
  history = []
  for r in range(rounds):
    expected_state, expected_metrics = cf.reference.run_round(
        process, state, clients)
    for seed in seeds:
      new_state, metrics = cf.run_round(form, state, clients,
                                        merge_seed=seed + r)
      _assert_close(new_state, expected_state)
      _assert_close(metrics, expected_metrics)
    state = new_state
    history.append({k: float(v) for k, v in _train(metrics).items()})
  return state, history


# ---------------------------------------------------------------------------
# Compiled == reference, and the metrics.


def test_plain_fedavg_compiled_matches_reference(plain):
  process, form = plain
  # TFF's process: its `next` runs the compiled round, not the reference.
  assert compiled.compiled_round(process.next) is not None
  state, history = _run_rounds_against_reference(
      process, form, _clients(), rounds=2, seeds=(1, 7))
  assert not np.array_equal(state.global_model_weights.trainable[2],
                            form.initialize().global_model_weights.trainable[2])
  for metrics in history:
    assert metrics['num_examples'] == sum(_CLIENT_SIZES)
    assert metrics['num_batches'] == sum(-(-n // 8) for n in _CLIENT_SIZES)
    assert 0.0 <= metrics['accuracy'] <= 1.0


def test_plain_fedavg_is_weighted_federated_averaging(plain, model):
  """One round is w + sum_i n_i delta_i / sum_i n_i, with each client's own training."""
  _, form = plain
  clients = _clients()
  state = form.initialize()
  new_state, _ = cf.run_round(form, state, clients, merge_seed=3)
  train = tf.function(lambda w, d: learning.client_update(
      model, learning.sgd(0.1), w, d))
  outputs = [train(state.global_model_weights, data) for data in clients]
  total = sum(float(o.num_examples) for o in outputs)
  assert total == sum(_CLIENT_SIZES)
  for i, weight in enumerate(state.global_model_weights.trainable):
    expected = weight + sum(o.num_examples * o.weights_delta[i]
                            for o in outputs) / total
    np.testing.assert_allclose(new_state.global_model_weights.trainable[i],
                               expected,
                               rtol=1e-5, atol=1e-6)


def test_encoded_fedavg_compiled_matches_reference(encoded):
  process, form, _, _ = encoded
  _run_rounds_against_reference(process, form, _clients(), rounds=2,
                                seeds=(2, 11))


def test_encoded_fedavg_learns(encoded):
  _, form, _, _ = encoded
  clients = _clients()
  state = form.initialize()
  losses = []
  for r in range(6):
    state, metrics = cf.run_round(form, state, clients, merge_seed=r)
    losses.append(float(_train(metrics)['loss']))
  assert losses[-1] < 0.6 * losses[0], losses
  assert float(_train(metrics)['accuracy']) > 0.8


def test_fedadam_keeps_its_state_on_the_server(model):
  process = algorithms.build_federated_averaging_process(
      model, lambda: learning.sgd(0.1),
      server_optimizer_fn=lambda: learning.adam(0.01))
  form = cf.compile(process)
  state, _ = _run_rounds_against_reference(process, form, _clients((8, 16)),
                                           rounds=2, seeds=(5,))
  assert int(state.finalizer['step']) == 2
  assert float(tf.linalg.global_norm(list(state.finalizer['v']))) > 0.0


# ---------------------------------------------------------------------------
# Bits on the wire.


def test_encoded_bits_are_about_a_quarter(plain, encoded, model):
  _, plain_form = plain
  _, form, broadcast, mean = encoded
  num_weights = sum(s.shape.num_elements()
                    for s in tf.nest.flatten(model.weights_spec))
  assert plain_form.broadcast_bits == 32 * num_weights
  assert plain_form.aggregated_bits == 32 * num_weights + 32 + _METRIC_BITS
  # C is exactly the encoded model, plus the 128-bit stochastic-rounding seed
  # of each 8-bit mean encoder and the 64-bit round number that seeds each
  # client's noise, which clients need to encode.
  seed_bits = 2 * 128 + 64
  assert form.broadcast_bits == broadcast.encoded_bits + seed_bits
  # U is exactly the encoded delta, the weight and the metric sums.
  assert form.aggregated_bits == mean.encoded_bits + 32 + _METRIC_BITS
  for compressed, uncompressed in (
      (form.broadcast_bits, plain_form.broadcast_bits),
      (form.aggregated_bits, plain_form.aggregated_bits)):
    # 4416 weights at 8 bits, 122 at 32, and a few scalars (min, max).
    assert 0.25 < compressed / uncompressed < 0.3, compressed / uncompressed


def test_the_tutorial_cnn_compiles_to_a_quarter_of_the_bits():
  model = learning.KerasFunctionalModel.from_keras(models.cnn_28x28, seed=0)

  def tutorial_encoder(as_encoder):

    def encoder_fn(spec):
      if spec.shape.num_elements() > 10000:
        return as_encoder(te.encoders.uniform_quantization(bits=8), spec)
      return as_encoder(te.encoders.identity(), spec)

    return encoder_fn

  process = algorithms.build_federated_averaging_process(
      model, lambda: learning.sgd(0.02),
      broadcast_process=framework.build_encoded_broadcast_process_from_model(
          model, tutorial_encoder(te.encoders.as_simple_encoder)),
      aggregation_process=framework.build_encoded_mean_process_from_model(
          model, tutorial_encoder(te.encoders.as_gather_encoder)))
  form = cf.compile(process)
  uncompressed = 32 * 1_663_370
  assert 0.25 < form.broadcast_bits / uncompressed < 0.26
  assert 0.25 < form.aggregated_bits / uncompressed < 0.26
  _assert_pure(form)


# ---------------------------------------------------------------------------
# Error feedback: the residual is client state, never in U.


def test_error_feedback_residual_is_client_state_not_in_the_message(
    feedback, model):
  _, form, mean = feedback
  assert form.has_client_state
  trainable = model.weights_spec.trainable
  assert ft.same_member(form.client_state_spec, trainable)
  assert form.aggregated_bits == mean.encoded_bits + 32 + _METRIC_BITS
  residual_bits = 32 * sum(s.shape.num_elements() for s in trainable)
  assert form.aggregated_bits < residual_bits / 4
  for zero in tf.nest.flatten(form.client_state_init()):
    assert not np.any(zero.numpy())


def test_error_feedback_compiled_matches_reference_with_returning_clients(
    feedback):
  process, form, _ = feedback
  a, b, c = _clients((16, 24, 32), first_seed=20)
  state = form.initialize()
  residuals = {}
  # Round 1: A and B are new; round 2: A returns (with its residual), C is new.
  for r, (names, data) in enumerate(((('a', 'b'), (a, b)),
                                     (('a', 'c'), (a, c)))):
    states = [residuals.get(name) for name in names]
    expected = cf.reference.run_round(process, state, data, states)
    for seed in (r, r + 5):
      new_state, metrics, new_states = cf.run_round(
          form, state, data, client_states=states, merge_seed=seed)
      _assert_close((new_state, metrics, new_states), expected)
    state = new_state
    residuals.update(zip(names, new_states))
  assert float(tf.linalg.global_norm(list(residuals['a']))) > 0.0


def test_a_returning_client_encodes_its_old_residual(feedback, model):
  """new residual + what the server got = weight * update + old residual,
  the update TFF's (initial - trained weights)."""
  _, form, _ = feedback
  data = _client(24, seed=30)
  state = form.initialize()
  state, _, (residual,) = cf.run_round(form, state, [data], [None])
  assert float(tf.linalg.global_norm(list(residual))) > 0.0
  # Second round for the same client, with its residual.
  new_state, metrics, (new_residual,) = cf.run_round(form, state, [data],
                                                     [residual])
  weight = float(_train(metrics)['num_examples'])
  old_weights = state.global_model_weights
  output = tf.function(lambda w, d: learning.client_update(
      model, learning.sgd(0.1), w, d))(old_weights, data)
  for i in range(len(residual)):
    # Server SGD at rate 1: old - new weights = the decoded message / weight.
    received = (old_weights.trainable[i] -
                new_state.global_model_weights.trainable[i]) * weight
    np.testing.assert_allclose(
        new_residual[i] + received,
        -weight * output.weights_delta[i] + residual[i], rtol=1e-4,
        atol=1e-4)
  # Without its residual the client would have sent something else.
  fresh_state, _, _ = cf.run_round(form, state, [data], [None])
  assert not np.allclose(fresh_state.global_model_weights.trainable[2],
                         new_state.global_model_weights.trainable[2])


# ---------------------------------------------------------------------------
# The processes on their own.


def _values(seed):
  rng = np.random.default_rng(seed)
  return (rng.normal(size=(200,)).astype(np.float32),
          rng.normal(size=(3,)).astype(np.float32))


_VALUE_SPEC = (tf.TensorSpec([200], tf.float32), tf.TensorSpec([3], tf.float32))


def test_encoded_mean_is_the_weighted_mean():
  process = aggregators.build_encoded_mean_process(_VALUE_SPEC, _mean_encoder)
  values = [_values(s) for s in range(3)]
  weights = [np.float32(w) for w in (1.0, 3.0, 0.0)]
  state = process.initialize.invoke()
  _, mean = process.next(state, values, weights)
  for i, (exact_tensor, mean_tensor) in enumerate(zip(
      zip(*values), mean)):
    expected = sum(w * v for w, v in zip(weights, exact_tensor)) / 4.0
    if i == 1:  # 3 elements: identity, exact.
      np.testing.assert_allclose(mean_tensor, expected, rtol=1e-6)
    else:  # 8 bits on each client's weighted value: within a level or so.
      levels = max(np.ptp(w * v) for w, v in zip(weights, exact_tensor)) / 255
      assert np.max(np.abs(mean_tensor - expected)) < 2 * levels
  _, nothing = process.next(state, values[:1], [np.float32(0.0)])
  for tensor in nothing:
    assert np.all(tensor == 0.0)


def _mean_as_iterative_process(mean):
  """An IterativeProcess whose clients hold (value, weight) and whose metric is the mean."""

  @cf.federated_computation(cf.server(mean.state_spec),
                            cf.clients((_VALUE_SPEC, tf.TensorSpec(
                                [], tf.float32))))
  def next_fn(state, data):
    new_state, value = mean.next(state, data[0], data[1])
    return new_state, value

  return cf.IterativeProcess(mean.initialize, next_fn)


def test_adaptive_encoder_state_updates_aggregate_in_the_same_aggregation():
  """The MAX-mode range of adaptive quantization follows the clients, compiled."""

  def adaptive(spec):
    return te.encoders.as_gather_encoder(
        te.encoders.adaptive_quantization(bits=8, initial_range=0.1), spec)

  mean = aggregators.build_encoded_mean_process(_VALUE_SPEC, adaptive)
  process = _mean_as_iterative_process(mean)
  form = cf.compile(process)
  data = [(_values(s), np.float32(w)) for s, w in ((0, 1.0), (1, 2.0),
                                                   (2, 1.0), (3, 4.0))]
  state = form.initialize()
  expected_state, expected_mean = cf.reference.run_round(process, state, data)
  for seed in (1, 2, 3):
    new_state, value = cf.run_round(form, state, data, merge_seed=seed)
    _assert_close((new_state, value), (expected_state, expected_mean))
  # The shared range grew from 0.1 towards the clients' weighted magnitudes.
  for before, after in zip(tf.nest.flatten(state),
                           tf.nest.flatten(new_state)):
    assert float(after) > float(before)
  # U: the encoded values, the weight, one MAX state update per tensor.
  assert form.aggregated_bits == mean.encoded_bits + 32 + 2 * 32


def test_encoded_broadcast_decodes_at_the_clients():
  broadcast = aggregators.build_encoded_broadcast_process(_VALUE_SPEC,
                                                     _broadcast_encoder)
  value = _values(0)
  initialize = cf.tf_computation(
      lambda: (broadcast.initialize.invoke(), tuple(map(tf.constant, value))))

  @cf.federated_computation(cf.server(initialize.result_spec),
                            cf.clients(tf.TensorSpec([], tf.float32)))
  def next_fn(state, data):
    del data  # Every client reports what it decoded.
    new_encoder_state, at_clients = broadcast.next(state[0], state[1])
    return (cf.federated_zip((new_encoder_state, state[1])),
            cf.federated_mean(at_clients))

  process = cf.IterativeProcess(initialize, next_fn)
  form = cf.compile(process)
  assert form.broadcast_bits == broadcast.encoded_bits
  assert form.broadcast_bits < 32 * 203 / 2
  state = form.initialize()
  data = [np.float32(0.0)] * 3
  new_state, decoded = cf.run_round(form, state, data, merge_seed=1)
  _assert_close((new_state, decoded), cf.reference.run_round(process, state,
                                                             data))
  np.testing.assert_array_equal(decoded[1], value[1])  # identity
  step = np.ptp(value[0]) / 255
  assert np.max(np.abs(decoded[0] - value[0])) <= step
  assert np.any(decoded[0] != value[0])


# ---------------------------------------------------------------------------
# Purity and errors.


def _assert_pure(form):
  for name, piece in form.pieces.items():
    concrete = piece.concrete_function
    assert not computations.impure_ops(concrete), (name, computations.impure_ops(
        concrete))
    assert not concrete.captured_inputs, name
    assert all(t.dtype != tf.resource for t in concrete.graph.inputs), name


def test_every_piece_is_pure(plain, encoded, feedback):
  for form in (plain[1], encoded[1], feedback[1]):
    _assert_pure(form)


def test_tff_style_model_fn_and_keras_model_fn(model):
  model_fn = lambda: learning.KerasFunctionalModel.from_keras(models.small_8x8)
  process = algorithms.build_federated_averaging_process(
      model_fn, learning.sgd(0.1),
      broadcast_process=framework.build_encoded_broadcast_process_from_model(
          model_fn, _broadcast_encoder))
  state = process.initialize.invoke()
  _assert_close(state.global_model_weights, model.initial_model_weights)
  keras_process = algorithms.build_federated_averaging_process(
      models.small_8x8, lambda: learning.sgd(0.1))
  assert ft.same_member(keras_process.state_spec.global_model_weights,
                        process.state_spec.global_model_weights)
  assert keras_process.state_spec.distributor == ()  # plain broadcast
  assert process.state_spec.distributor != ()


def test_bad_arguments_get_clear_errors(model):
  with pytest.raises(TypeError, match=r'SimpleEncoder for tensor 0 .*as_gather_encoder'):
    framework.build_encoded_mean_process_from_model(model, _broadcast_encoder)
  with pytest.raises(TypeError, match='as_simple_encoder'):
    framework.build_encoded_broadcast_process_from_model(model, _mean_encoder)
  with pytest.raises(ValueError, match='built for'):
    aggregators.build_encoded_broadcast_process(
        _VALUE_SPEC, lambda spec: _broadcast_encoder(_VALUE_SPEC[0]))
  with pytest.raises(TypeError, match='pure optimizer .* got str'):
    algorithms.build_federated_averaging_process(model, lambda: 'sgd')
  with pytest.raises(ValueError, match='client_epochs'):
    algorithms.build_federated_averaging_process(model, learning.sgd(0.1),
                                             client_epochs=0)
  other = aggregators.build_encoded_mean_process(_VALUE_SPEC, _mean_encoder)
  with pytest.raises(cf.FederatedError, match='aggregation_process'):
    algorithms.build_federated_averaging_process(model, learning.sgd(0.1),
                                             aggregation_process=other)
  with pytest.raises(TypeError, match='FunctionalModel'):
    algorithms.build_federated_averaging_process(lambda: 3, learning.sgd(0.1))
  mean = framework.build_encoded_mean_process_from_model(model, _mean_encoder)
  own = measured_process.MeasuredProcess(mean.initialize, mean.next,
                                         mean.value_spec, name='own_mean')
  with pytest.raises(TypeError, match="'own_mean' was not made by "
                     'canonical.aggregators.*model_aggregator'):
    algorithms.build_federated_averaging_process(model, learning.sgd(0.1),
                                                 aggregation_process=own)


def test_summary_names_each_tensors_encoder(encoded):
  _, form, _, _ = encoded
  text = form.summary(print_fn=None)
  assert 'uniform_quantization' in text and 'bitpacking' in text
  assert any(name.startswith('broadcast[') for name in form.encoders)
  assert any(name.startswith('aggregation[') for name in form.encoders)
