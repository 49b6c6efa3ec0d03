"""TopKEncodingStage and RandomSubsamplingEncodingStage."""

import numpy as np
import pytest
import tensorflow as tf

from encoders.core import seeds
from encoders.stages import sparsification as sp

VALUES = sp.TopKEncodingStage.VALUES_KEY
INDICES = sp.TopKEncodingStage.INDICES_KEY
SAMPLE_SEED = sp.RandomSubsamplingEncodingStage.SAMPLE_SEED_KEY


def _round_trip(stage, x):
  encode_params, decode_params = stage.get_params()
  encoded = stage.encode(x, encode_params)
  return stage.decode(encoded, decode_params, shape=tf.shape(x))


# ---------------------------------------------------------------------------
# Top-k.


@pytest.mark.parametrize('shape, k', [([10], 3), ([6, 7], 5), ([3, 4, 5], 60)])
def test_top_k_keeps_exactly_the_largest_magnitudes(shape, k):
  stage = sp.TopKEncodingStage(k=k)
  x = tf.random.stateless_normal(shape, seed=[1, k])
  encoded = stage.encode(x, {})
  assert encoded[VALUES].dtype == tf.float32
  assert encoded[INDICES].dtype == tf.int32
  flat = x.numpy().ravel()
  expected = np.argsort(-np.abs(flat), kind='stable')[:k]
  np.testing.assert_array_equal(np.sort(encoded[INDICES]), np.sort(expected))
  np.testing.assert_array_equal(encoded[VALUES], flat[encoded[INDICES]])
  decoded = stage.decode(encoded, {}, shape=shape).numpy()
  kept = np.zeros_like(flat)
  kept[expected] = flat[expected]
  np.testing.assert_array_equal(decoded, kept.reshape(shape))


def _large_input(kind, size):
  rng = np.random.default_rng(0)
  if kind == 'normal':
    return rng.standard_normal(size).astype(np.float32)
  if kind == 'sorted':
    return np.sort(rng.standard_normal(size)).astype(np.float32)
  if kind == 'ties':
    return np.tile(np.float32([1.0, -1.0, 0.5]), size // 3 + 1)[:size]
  # Small exactly where a strided sample looks, large elsewhere.
  x = rng.standard_normal(size).astype(np.float32) + 10
  x[::8] = 0.0
  return x


@pytest.mark.parametrize('kind', ['normal', 'sorted', 'ties', 'against_stride'])
@pytest.mark.parametrize('fraction', [0.01, 0.3])
def test_top_k_of_large_inputs_is_exact(kind, fraction):
  # Above 2**17 values the search is narrowed by a sample; never its result.
  size = 2**18
  x = _large_input(kind, size)
  stage = sp.TopKEncodingStage(fraction=fraction)
  k = int(np.ceil(fraction * size))
  encoded = tf.function(lambda x: stage.encode(x, {}))(tf.constant(x))
  expected = np.argsort(-np.abs(x), kind='stable')[:k]
  np.testing.assert_array_equal(np.sort(encoded[INDICES]), np.sort(expected))
  np.testing.assert_array_equal(encoded[VALUES], x[encoded[INDICES]])


def test_top_k_of_all_values_is_lossless():
  stage = sp.TopKEncodingStage(fraction=1.0)
  x = tf.random.stateless_normal([4, 9], seed=[2, 2])
  np.testing.assert_array_equal(_round_trip(stage, x), x)


def test_top_k_ties_keep_the_lower_indices():
  stage = sp.TopKEncodingStage(k=10)
  x = tf.constant([1.0, -1.0] * 500)
  np.testing.assert_array_equal(np.sort(stage.encode(x, {})[INDICES]),
                                np.arange(10))


@pytest.mark.parametrize('fraction, size, expected_k', [
    (0.07, 100, 7), (0.1, 1000, 100), (0.1, 1001, 101), (0.01, 50, 1),
    (1e-9, 7, 1), (0.5, 1, 1), (0.3, 0, 0), (1 / 3, 9, 3), (1.0, 13, 13)])
def test_top_k_fraction_gives_k(fraction, size, expected_k):
  stage = sp.TopKEncodingStage(fraction=fraction)
  x = tf.random.stateless_normal([size], seed=[3, 3])
  assert stage.encode(x, {})[VALUES].shape == [expected_k]

  @tf.function(input_signature=[tf.TensorSpec(None, tf.float32)])
  def encode_dynamic(x):
    return stage.encode(x, {})

  assert encode_dynamic(x)[VALUES].shape == [expected_k]


def test_top_k_larger_than_input_is_a_clear_error():
  stage = sp.TopKEncodingStage(k=6)
  with pytest.raises(ValueError, match='TopKEncodingStage: k=6 exceeds the 5'):
    stage.encode(tf.ones([5]), {})
  with pytest.raises(ValueError, match='TopKEncodingStage: k=6 exceeds'):
    tf.function(lambda x: stage.encode(x, {}))(tf.ones([5]))

  @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
  def encode_dynamic(x):
    return stage.encode(x, {})

  with pytest.raises(tf.errors.InvalidArgumentError,
                     match='TopKEncodingStage: k=6 exceeds'):
    encode_dynamic(tf.ones([5]))
  assert encode_dynamic(tf.ones([6]))[VALUES].shape == [6]


@pytest.mark.parametrize('kwargs', [{}, {'k': 3, 'fraction': 0.5}, {'k': 0},
                                    {'k': 2.0}, {'k': True},
                                    {'fraction': 0.0}, {'fraction': 1.5},
                                    {'fraction': '0.5'}, {'fraction': True}])
def test_top_k_rejects_bad_configuration(kwargs):
  with pytest.raises(ValueError, match='TopKEncodingStage'):
    sp.TopKEncodingStage(**kwargs)


@pytest.mark.parametrize('dtype', [tf.float16, tf.bfloat16, tf.float32,
                                   tf.float64])
def test_top_k_dtypes(dtype):
  stage = sp.TopKEncodingStage(k=4)
  x = tf.cast(tf.constant([0.5, -8.0, 2.0, 0.25, 4.0, -1.0, 0.125]), dtype)
  encoded = stage.encode(x, {})
  assert encoded[VALUES].dtype == dtype
  decoded = stage.decode(encoded, {}, shape=[7])
  assert decoded.dtype == dtype
  np.testing.assert_array_equal(tf.cast(decoded, tf.float64),
                                [0, -8.0, 2.0, 0, 4.0, -1.0, 0])


def test_top_k_scalar_empty_and_bad_dtype():
  stage = sp.TopKEncodingStage(fraction=0.5)
  np.testing.assert_array_equal(_round_trip(stage, tf.constant(3.0)), 3.0)
  decoded = _round_trip(stage, tf.zeros([2, 0]))
  assert decoded.shape == [2, 0]
  with pytest.raises(TypeError, match='TopKEncodingStage.*int32'):
    stage.encode(tf.constant([1, 2]), {})
  with pytest.raises(ValueError, match='TopKEncodingStage.*shape'):
    stage.decode(stage.encode(tf.ones([3]), {}), {})


def test_top_k_traced_separately_with_dynamic_shapes():
  stage = sp.TopKEncodingStage(fraction=0.25)
  x = tf.random.stateless_normal([5, 8], seed=[4, 4])

  @tf.function(input_signature=[tf.TensorSpec(None, tf.float32)])
  def encode(x):
    return stage.encode(x, {})

  @tf.function(input_signature=[
      {VALUES: tf.TensorSpec([None], tf.float32),
       INDICES: tf.TensorSpec([None], tf.int32)},
      tf.TensorSpec([None], tf.int32)])
  def decode(encoded, shape):
    return stage.decode(encoded, {}, shape=shape)

  decoded = decode(encode(x), tf.shape(x))
  assert decoded.shape == [5, 8]
  np.testing.assert_array_equal(decoded, _round_trip(stage, x))
  assert np.count_nonzero(decoded) == 10


def test_top_k_properties():
  stage = sp.TopKEncodingStage(k=1)
  assert stage.name == 'top_k'
  assert stage.compressible_tensors_keys == [VALUES]
  assert not stage.commutes_with_sum
  assert stage.decode_needs_input_shape


# ---------------------------------------------------------------------------
# Random subsampling.


@pytest.fixture
def as_in_a_form():
  """Stages draw their noise as inside a compiled form: a pure function of the
  params seed and the input (fresh noise when run directly: test_fresh_noise.py)."""
  with seeds.pure_randomness():
    yield


@pytest.mark.usefixtures('as_in_a_form')
def test_random_subsampling_sends_k_values_and_a_seed():
  stage = sp.RandomSubsamplingEncodingStage(0.25, seed=3)
  encode_params, decode_params = stage.get_params()
  x = tf.random.stateless_normal([8, 5], seed=[5, 5])
  encoded = stage.encode(x, encode_params)
  assert sorted(encoded) == [SAMPLE_SEED, VALUES]
  assert encoded[VALUES].shape == [10]
  assert encoded[SAMPLE_SEED].dtype == tf.int64
  assert encoded[SAMPLE_SEED].shape == [2]
  np.testing.assert_array_equal(
      encoded[SAMPLE_SEED], seeds.encode_seed(encode_params['seed'], x))
  decoded = stage.decode(encoded, decode_params, shape=[8, 5]).numpy()
  kept = decoded != 0
  assert np.sum(kept) == 10
  # Kept values are the input's, scaled by n / k = 4, at their own places.
  np.testing.assert_allclose(decoded[kept], 4 * x.numpy()[kept], rtol=1e-6)
  np.testing.assert_allclose(np.sort(encoded[VALUES]),
                             np.sort(x.numpy()[kept]), rtol=1e-6)


@pytest.mark.parametrize('size, fraction', [(20, 0.2), (23, 0.2), (7, 0.5)])
def test_random_subsampling_is_unbiased(size, fraction):
  trials = 2000
  stage = sp.RandomSubsamplingEncodingStage(fraction)
  x = tf.random.stateless_normal([size], seed=[6, 6]) + 1.0
  k = int(np.ceil(fraction * size))

  @tf.function
  def decode_with(seed):
    encoded = stage.encode(x, {'seed': seed})
    return stage.decode(encoded, {}, shape=[size])

  decoded = np.stack([decode_with(seeds.initial_seed(t)).numpy()
                      for t in range(trials)])
  x = x.numpy()
  # Each coordinate is drawn k / n times on average (decoded = count * n/k * x).
  counts = decoded / (x * size / k)
  np.testing.assert_allclose(counts, np.round(counts), atol=1e-4)
  assert np.all(np.round(counts).sum(axis=1) == k)
  rate_spread = np.sqrt(k / size / trials)
  assert np.all(np.abs(counts.mean(axis=0) - k / size) < 5 * rate_spread)
  # ... so the mean estimate approaches x: variance per trial ~x^2 (n/k - 1).
  spread = np.abs(x) * np.sqrt(size / k / trials)
  assert np.max(np.abs(decoded.mean(axis=0) - x) / spread) < 5
  # A biased stage (e.g. no n / k rescaling) would be far off.
  assert np.linalg.norm(decoded.mean(axis=0) - x) < 0.2 * np.linalg.norm(x)


def test_random_subsampling_of_everything_is_lossless():
  stage = sp.RandomSubsamplingEncodingStage(1.0)
  x = tf.random.stateless_normal([3, 11], seed=[9, 9])
  np.testing.assert_allclose(_round_trip(stage, x), x, rtol=1e-6)


@pytest.mark.usefixtures('as_in_a_form')
def test_random_subsampling_differs_per_client_and_repeats_per_input():
  stage = sp.RandomSubsamplingEncodingStage(0.1)
  encode_params, decode_params = stage.get_params()
  x = tf.random.stateless_normal([1000], seed=[7, 7])
  y = x + 1e-3

  def kept(v):
    encoded = stage.encode(v, encode_params)
    return np.flatnonzero(stage.decode(encoded, decode_params, shape=[1000]))

  np.testing.assert_array_equal(kept(x), kept(x))
  assert len(np.intersect1d(kept(x), kept(y))) < 50


@pytest.mark.usefixtures('as_in_a_form')
def test_random_subsampling_traced_separately_with_dynamic_shapes():
  stage = sp.RandomSubsamplingEncodingStage(0.3, seed=1)
  encode_params, decode_params = stage.get_params()
  x = tf.random.stateless_normal([6, 9], seed=[8, 8])

  @tf.function(input_signature=[tf.TensorSpec(None, tf.float32)])
  def encode(x):
    return stage.encode(x, encode_params)

  @tf.function(input_signature=[
      {VALUES: tf.TensorSpec([None], tf.float32),
       SAMPLE_SEED: tf.TensorSpec([2], tf.int64)},
      tf.TensorSpec([None], tf.int32)])
  def decode(encoded, shape):
    return stage.decode(encoded, decode_params, shape=shape)

  encoded = encode(x)
  assert encoded[VALUES].shape == [17]
  decoded = decode(encoded, tf.shape(x))
  assert decoded.shape == [6, 9]
  np.testing.assert_allclose(decoded, _round_trip(stage, x), rtol=1e-6)


@pytest.mark.parametrize('dtype', [tf.float16, tf.bfloat16, tf.float32,
                                   tf.float64])
def test_random_subsampling_dtypes(dtype):
  stage = sp.RandomSubsamplingEncodingStage(0.5)
  x = tf.cast(tf.range(1.0, 9.0), dtype)
  decoded = _round_trip(stage, x)
  assert decoded.dtype == dtype
  decoded = tf.cast(decoded, tf.float64).numpy()
  kept = decoded != 0
  assert np.sum(kept) == 4
  np.testing.assert_array_equal(decoded[kept], 2 * np.arange(1.0, 9.0)[kept])


def test_random_subsampling_scalar_empty_and_errors():
  stage = sp.RandomSubsamplingEncodingStage(0.5)
  np.testing.assert_array_equal(_round_trip(stage, tf.constant(3.0)), 3.0)
  assert _round_trip(stage, tf.zeros([0, 3])).shape == [0, 3]
  with pytest.raises(TypeError, match='RandomSubsamplingEncodingStage.*int32'):
    stage.encode(tf.constant([1, 2]), stage.get_params()[0])
  with pytest.raises(ValueError, match='RandomSubsamplingEncodingStage: frac'):
    sp.RandomSubsamplingEncodingStage(0)
  with pytest.raises(TypeError, match='RandomSubsamplingEncodingStage: seed'):
    sp.RandomSubsamplingEncodingStage(0.5, seed='1')
  assert not stage.commutes_with_sum
  assert stage.compressible_tensors_keys == [VALUES]
