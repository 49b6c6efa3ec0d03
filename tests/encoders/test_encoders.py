"""The ready-made encoders, through the platform surfaces users call."""

import numpy as np
import pytest
import tensorflow as tf

import encoders as te

SPEC = tf.TensorSpec([20, 30], tf.float32)

READY_MADE = {
    'identity': te.encoders.identity,
    'half_precision': te.encoders.half_precision,
    'uniform_8': lambda: te.encoders.uniform_quantization(8),
    'uniform_2': lambda: te.encoders.uniform_quantization(2),
    'hadamard_2': lambda: te.encoders.hadamard_quantization(2),
    'adaptive_8': lambda: te.encoders.adaptive_quantization(8, 4.0),
    'top_k': lambda: te.encoders.top_k(0.1),
    'random_k': lambda: te.encoders.random_k(0.25),
    'sign': te.encoders.sign,
    'drive': te.encoders.drive,
    'subsampled_drive': lambda: te.encoders.subsampled_drive(0.5),
}

# Upper bounds on the relative L2 error of one encode/decode of N(0, 1) data.
MAX_RELATIVE_ERROR = {
    'identity': 0.0, 'half_precision': 1e-3, 'uniform_8': 0.02,
    'uniform_2': 0.9, 'hadamard_2': 0.9, 'adaptive_8': 0.02, 'top_k': 0.9,
    'random_k': 2.0, 'sign': 0.7, 'drive': 0.9, 'subsampled_drive': 1.6,
}


def normal(shape, seed):
  return tf.constant(np.random.RandomState(seed).normal(size=shape),
                     tf.float32)


def relative_error(decoded, x):
  return float(tf.norm(decoded - x) / tf.norm(x))


@pytest.mark.parametrize('name', sorted(READY_MADE))
def test_simple_encoder_round_trip(name):
  simple = te.encoders.as_simple_encoder(READY_MADE[name](), SPEC)
  x = normal(SPEC.shape, 0)
  encoded, _ = simple.encode(x, simple.initial_state())
  decoded = simple.decode(encoded)
  assert decoded.shape == SPEC.shape and decoded.dtype == SPEC.dtype
  assert relative_error(decoded, x) <= MAX_RELATIVE_ERROR[name]


@pytest.mark.parametrize('name', sorted(READY_MADE))
def test_gather_encoder_sum_equals_sum_of_decodes(name):
  gather = te.encoders.as_gather_encoder(READY_MADE[name](), SPEC)
  params = gather.get_params(gather.initial_state())
  xs = [normal(SPEC.shape, s) for s in range(4)]
  parts, singles = [], []
  for x in xs:
    encoded, _ = gather.encode(x, params[0])
    parts.append(gather.decode_before_sum(encoded, params[1]))
    singles.append(gather.decode(encoded, params))
  summed = tf.nest.map_structure(lambda *t: tf.add_n(list(t)), *parts)
  total = gather.decode_after_sum(summed, params[2], len(xs))
  np.testing.assert_allclose(total, tf.add_n(singles), rtol=1e-4, atol=1e-4)


def bits_per_coordinate(encoder, n):
  return te.encoders.as_gather_encoder(
      encoder, tf.TensorSpec([n], tf.float32)).encoded_bits / n


def test_uniform_8bit_costs_at_most_8_05_bits_at_a_million():
  assert bits_per_coordinate(te.encoders.uniform_quantization(8),
                             10**6) <= 8.05


@pytest.mark.parametrize('name, low, high', [
    ('identity', 32, 32), ('half_precision', 16, 16), ('uniform_2', 2, 2.01),
    ('hadamard_2', 2, 2.01), ('sign', 1, 1.01), ('drive', 1, 1.01),
    ('top_k', 6.4, 6.41), ('subsampled_drive', 0.5, 0.52),
])
def test_bits_per_coordinate(name, low, high):
  assert low <= bits_per_coordinate(READY_MADE[name](), 10**4) <= high


def test_top_k_of_a_large_tensor_has_a_static_size():
  # Above the size where top-k samples a bracket, its result still has a
  # static length, so the bits of a form using it can be counted.
  assert bits_per_coordinate(te.encoders.top_k(0.01), 10**6) == pytest.approx(
      0.64, abs=1e-3)


def test_drive_is_unbiased_over_rounds():
  """Each round rotates anew (the seed is state), so averaging rounds converges."""
  spec = tf.TensorSpec([256], tf.float32)
  simple = te.encoders.as_simple_encoder(te.encoders.drive(), spec)
  x = normal(spec.shape, 1)
  state = simple.initial_state()
  decoded = []
  for _ in range(200):
    encoded, state = simple.encode(x, state)
    decoded.append(simple.decode(encoded))
  one = relative_error(decoded[0], x)
  mean = relative_error(tf.add_n(decoded) / len(decoded), x)
  assert 0.6 < one < 0.9  # DRIVE's 1-bit error: sqrt(pi/2 - 1) ~ 0.76.
  assert mean < 3 * one / np.sqrt(len(decoded))


def test_adaptive_quantization_range_follows_the_clients():
  gather = te.encoders.as_gather_encoder(
      te.encoders.adaptive_quantization(8, initial_range=1.0, decay=0.0), SPEC)
  state = gather.initial_state()
  xs = [normal(SPEC.shape, s) * 10 for s in range(3)]
  params = gather.get_params(state)
  updates = [gather.encode(x, params[0])[1] for x in xs]
  state = gather.update_state(state, gather.aggregate_state_updates(updates))
  assert float(state[0]) == pytest.approx(
      max(float(tf.reduce_max(tf.abs(x))) for x in xs), rel=1e-6)
  # With the learned range, the error is 8-bit-small; with the first, clipped.
  x = xs[0]
  after = gather.decode(gather.encode(x, gather.get_params(state)[0])[0],
                        gather.get_params(state))
  before = gather.decode(gather.encode(x, params[0])[0], params)
  assert relative_error(after, x) < 0.02 < relative_error(before, x)


def test_error_feedback_with_top_k_sends_everything_eventually():
  spec = tf.TensorSpec([100], tf.float32)
  gather = te.encoders.as_gather_encoder(te.encoders.top_k(k=10), spec)
  feedback = te.core.ErrorFeedback(gather)
  params = gather.get_params()
  x = normal(spec.shape, 2)
  residual, sent = feedback.initial_residual(), tf.zeros(spec.shape)
  for _ in range(10):  # The same x each round: ten rounds of ten coordinates.
    encoded, _, residual = feedback.encode(x, residual, params)
    sent += gather.decode(encoded, params)
  np.testing.assert_allclose(sent + residual, 10 * x, rtol=1e-5, atol=1e-5)


def test_tutorial_style_encoder_fn():
  """The TFF compression tutorial's encoder_fn moves over by its import line."""

  def broadcast_encoder_fn(value):
    spec = tf.TensorSpec(value.shape, value.dtype)
    if value.shape.num_elements() > 10000:
      return te.encoders.as_simple_encoder(
          te.encoders.uniform_quantization(bits=8), spec)
    return te.encoders.as_simple_encoder(te.encoders.identity(), spec)

  weights = [tf.zeros([200, 100]), tf.zeros([100])]
  encoders = [broadcast_encoder_fn(w) for w in weights]
  assert encoders[0].encoded_bits <= 8.05 * 20000
  assert encoders[1].encoded_bits == 32 * 100


def test_public_names_match_tensor_encoding():
  for name in ['EncodingStageInterface', 'AdaptiveEncodingStageInterface',
               'tf_style_encoding_stage', 'tf_style_adaptive_encoding_stage',
               'as_adaptive_encoding_stage', 'StateAggregationMode', 'Encoder',
               'EncoderComposer', 'SimpleEncoder', 'GatherEncoder']:
    assert hasattr(te.core, name), name
  for name in ['as_simple_encoder', 'as_gather_encoder', 'identity',
               'uniform_quantization', 'hadamard_quantization']:
    assert callable(getattr(te.encoders, name)), name
  assert {m.name for m in te.core.StateAggregationMode} == {
      'SUM', 'MIN', 'MAX', 'STACK'}


def test_bad_configuration_errors_name_the_stage():
  with pytest.raises(ValueError, match='UniformQuantizationEncodingStage.*bits'):
    te.encoders.uniform_quantization(17)
  with pytest.raises(ValueError, match='TopKEncodingStage'):
    te.encoders.as_gather_encoder(te.encoders.top_k(k=1000),
                                  tf.TensorSpec([10], tf.float32))
  with pytest.raises((TypeError, ValueError), match='UniformQuantization'):
    te.encoders.as_simple_encoder(te.encoders.uniform_quantization(8),
                                  tf.TensorSpec([10], tf.int32))


@pytest.mark.parametrize('name', sorted(READY_MADE))
@pytest.mark.parametrize('shape', [[0], [0, 5], [3, 0]])
def test_every_encoder_takes_a_tensor_without_elements(name, shape):
  """A layer or batch may be empty: each encoder round-trips it as an empty
  tensor of its shape, through both interfaces."""
  spec = tf.TensorSpec(shape, tf.float32)
  x = tf.zeros(shape)
  simple = te.encoders.as_simple_encoder(READY_MADE[name](), spec)
  encoded, _ = simple.encode(x, simple.initial_state())
  assert simple.decode(encoded).shape == shape
  gather = te.encoders.as_gather_encoder(READY_MADE[name](), spec)
  params = gather.get_params(gather.initial_state())
  encoded, _ = gather.encode(x, params[0])
  decoded = gather.decode(encoded, params)
  assert decoded.shape == shape and decoded.dtype == tf.float32
