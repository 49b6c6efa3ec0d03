"""UnpaddedHadamardEncodingStage: an orthogonal, seeded, size-keeping rotation."""

import numpy as np
import pytest
import tensorflow as tf

from encoders.core import seeds
from encoders.stages import rotation

VALUES = rotation.UnpaddedHadamardEncodingStage.ENCODED_VALUES_KEY


def _params(stage, state=None):
  return stage.get_params(stage.initial_state() if state is None else state)


def _encode(stage, x, state=None):
  encode_params, _ = _params(stage, state)
  encoded, updates = stage.encode(x, encode_params)
  assert updates == {}
  return encoded[VALUES]


def _round_trip(stage, x, state=None):
  encode_params, decode_params = _params(stage, state)
  encoded, _ = stage.encode(x, encode_params)
  return stage.decode(encoded, decode_params, shape=tf.shape(x))


def _sylvester(order):
  h = np.ones([1, 1])
  while h.shape[0] < order:
    h = np.block([[h, h], [h, -h]])
  return h / np.sqrt(order)


def _rotation_matrix(stage, size, dtype=tf.float64):
  """Column j is the encoding of the j-th unit vector."""
  encode_params, _ = _params(stage)
  encode = tf.function(lambda x: stage.encode(x, encode_params)[0][VALUES])
  eye = tf.eye(size, dtype=dtype)
  return np.stack([encode(eye[j]).numpy() for j in range(size)], axis=1)


@pytest.mark.parametrize('shape', [[1], [2], [3], [8], [37], [5, 11], [4096],
                                   [5000], [3, 7, 1000]])
@pytest.mark.parametrize('max_block_size', [4, 2**14])
def test_round_trip_recovers_input(shape, max_block_size):
  stage = rotation.UnpaddedHadamardEncodingStage(seed=3, max_block_size=max_block_size)
  x = tf.random.stateless_normal(shape, seed=[1, 2])
  np.testing.assert_allclose(_round_trip(stage, x), x, atol=2e-6)


@pytest.mark.parametrize('shape', [[1], [37], [5, 11], [4096], [70000]])
def test_keeps_size_and_norm(shape):
  stage = rotation.UnpaddedHadamardEncodingStage(max_block_size=2**10)
  x = tf.random.stateless_normal(shape, seed=[3, 4], dtype=tf.float64)
  rotated = _encode(stage, x)
  assert rotated.shape == [int(np.prod(shape))]
  np.testing.assert_allclose(np.linalg.norm(rotated), np.linalg.norm(x),
                             rtol=1e-12)


def test_power_of_two_input_is_hadamard_times_random_signs():
  stage = rotation.UnpaddedHadamardEncodingStage(seed=5)
  matrix = _rotation_matrix(stage, 64)
  hadamard = _sylvester(64)
  signs = np.diag(hadamard.T @ matrix)
  np.testing.assert_allclose(np.abs(signs), 1.0, atol=1e-12)
  np.testing.assert_allclose(matrix, hadamard * signs[None, :], atol=1e-12)
  # Random signs: not all equal.
  assert 0 < np.sum(signs > 0) < 64


@pytest.mark.parametrize('size, max_block_size', [(37, 8), (21, 16), (48, 16)])
def test_blocked_rotation_is_orthogonal(size, max_block_size):
  stage = rotation.UnpaddedHadamardEncodingStage(max_block_size=max_block_size)
  matrix = _rotation_matrix(stage, size)
  np.testing.assert_allclose(matrix.T @ matrix, np.eye(size), atol=1e-12)


@pytest.mark.parametrize('position', [0, 904, 4095, 4096, 4999])
def test_spreads_a_spike_anywhere(position):
  # n = 5000: one block of 4096, then an overlap window over the last 4096
  # values (904..4999) that mixes in the tail.
  stage = rotation.UnpaddedHadamardEncodingStage(seed=1)
  x = tf.one_hot(position, 5000, dtype=tf.float64)
  rotated = np.abs(_encode(stage, x).numpy())
  # Spread evenly over 4096 coordinates, a unit spike has entries 1/64; the
  # second rotation of the overlap spreads further, like Gaussian noise of
  # about that size, and never gathers it back.
  assert np.max(rotated) < 5 / 64
  assert np.sum(rotated > 1e-9) >= 4096


def test_decode_of_sum_is_sum_of_inputs():
  stage = rotation.UnpaddedHadamardEncodingStage(seed=9, max_block_size=16)
  assert stage.commutes_with_sum
  encode_params, decode_params = _params(stage)
  xs = [tf.random.stateless_normal([5, 11], seed=[i, 7]) for i in range(4)]
  summed = tf.add_n([stage.encode(x, encode_params)[0][VALUES] for x in xs])
  decoded = stage.decode({VALUES: summed}, decode_params, num_summands=4,
                         shape=[5, 11])
  np.testing.assert_allclose(decoded, tf.add_n(xs), atol=1e-5)


def test_seed_decides_the_rotation():
  x = tf.random.stateless_normal([1000], seed=[0, 1])
  a = _encode(rotation.UnpaddedHadamardEncodingStage(seed=1), x)
  again = _encode(rotation.UnpaddedHadamardEncodingStage(seed=1), x)
  b = _encode(rotation.UnpaddedHadamardEncodingStage(seed=2), x)
  np.testing.assert_array_equal(a, again)
  assert np.mean(np.abs(a.numpy() - b.numpy()) > 1e-3) > 0.9


def test_state_update_advances_seed_and_rotation():
  stage = rotation.UnpaddedHadamardEncodingStage(seed=4)
  assert stage.state_update_aggregation_modes == {}
  state = stage.initial_state()
  np.testing.assert_array_equal(state['seed'], seeds.initial_seed(4))
  next_state = stage.update_state(state, {})
  np.testing.assert_array_equal(next_state['seed'],
                                seeds.next_seed(seeds.initial_seed(4)))
  x = tf.random.stateless_normal([300], seed=[2, 2])
  first = _encode(stage, x, state)
  second = _encode(stage, x, next_state)
  assert np.mean(np.abs(first.numpy() - second.numpy()) > 1e-3) > 0.9
  np.testing.assert_allclose(_round_trip(stage, x, next_state), x, atol=2e-6)


def test_encode_and_decode_traced_separately():
  stage = rotation.UnpaddedHadamardEncodingStage(seed=6, max_block_size=64)
  x = tf.random.stateless_normal([7, 30], seed=[5, 5])
  state = stage.update_state(stage.initial_state(), {})

  @tf.function
  def encode(x, state):
    encode_params, _ = stage.get_params(state)
    return stage.encode(x, encode_params)[0]

  @tf.function
  def decode(encoded, state):
    _, decode_params = stage.get_params(state)
    return stage.decode(encoded, decode_params, shape=[7, 30])

  np.testing.assert_allclose(decode(encode(x, state), state), x, atol=2e-6)


@pytest.mark.parametrize('dtype, atol', [(tf.float16, 1e-2),
                                         (tf.bfloat16, 5e-2),
                                         (tf.float32, 2e-6),
                                         (tf.float64, 1e-12)])
def test_float_dtypes_round_trip_in_their_dtype(dtype, atol):
  stage = rotation.UnpaddedHadamardEncodingStage(max_block_size=32)
  x = tf.cast(tf.random.stateless_normal([100], seed=[8, 8]), dtype)
  encoded = _encode(stage, x)
  assert encoded.dtype == dtype
  decoded = _round_trip(stage, x)
  assert decoded.dtype == dtype
  np.testing.assert_allclose(tf.cast(decoded, tf.float64),
                             tf.cast(x, tf.float64), atol=atol)


def test_rejects_integer_input():
  stage = rotation.UnpaddedHadamardEncodingStage()
  with pytest.raises(TypeError, match='HadamardEncodingStage.*int32'):
    _encode(stage, tf.constant([1, 2, 3]))


@pytest.mark.parametrize('shape', [[], [0], [2, 0, 3]])
def test_scalar_and_empty(shape):
  stage = rotation.UnpaddedHadamardEncodingStage()
  x = tf.fill(shape, 2.5)
  rotated = _encode(stage, x)
  assert rotated.shape == [int(np.prod(shape))]
  decoded = _round_trip(stage, x)
  assert decoded.shape == shape
  np.testing.assert_allclose(decoded, x)


@pytest.mark.parametrize('shape', [[], [0], [1], [5], [3, 7], [1000], [70, 30]])
def test_dynamic_shape_gives_the_static_rotation(shape):
  stage = rotation.UnpaddedHadamardEncodingStage(seed=2, max_block_size=256)
  encode_params, decode_params = _params(stage)

  @tf.function(input_signature=[tf.TensorSpec(None, tf.float32)])
  def encode(x):
    return stage.encode(x, encode_params)[0][VALUES]

  @tf.function(input_signature=[tf.TensorSpec([None], tf.float32),
                                tf.TensorSpec([None], tf.int32)])
  def decode(values, shape):
    return stage.decode({VALUES: values}, decode_params, shape=shape)

  x = tf.random.stateless_normal(shape, seed=[6, 1])
  dynamic = encode(x)
  np.testing.assert_allclose(dynamic, _encode(stage, x), atol=1e-6)
  decoded = decode(dynamic, tf.shape(x))
  assert decoded.shape == shape
  np.testing.assert_allclose(decoded, x, atol=2e-6)


@pytest.mark.parametrize('max_block_size', [0, 3, 48, 2**21, 2.0, True])
def test_rejects_bad_max_block_size(max_block_size):
  with pytest.raises(ValueError, match='HadamardEncodingStage: max_block_size'):
    rotation.UnpaddedHadamardEncodingStage(max_block_size=max_block_size)


def test_rejects_bad_seed():
  with pytest.raises(TypeError, match='HadamardEncodingStage: seed'):
    rotation.UnpaddedHadamardEncodingStage(seed='1')


def test_decode_without_shape_is_a_clear_error():
  stage = rotation.UnpaddedHadamardEncodingStage()
  encode_params, decode_params = _params(stage)
  encoded, _ = stage.encode(tf.ones([4]), encode_params)
  with pytest.raises(ValueError, match='HadamardEncodingStage.*shape'):
    stage.decode(encoded, decode_params)


def test_properties():
  stage = rotation.UnpaddedHadamardEncodingStage()
  assert stage.name == 'unpadded_hadamard'
  assert stage.compressible_tensors_keys == [VALUES]
  assert stage.decode_needs_input_shape


def test_two_bit_pipeline_sends_no_padding():
  quantization = pytest.importorskip('encoders.stages.quantization')
  rotate = rotation.UnpaddedHadamardEncodingStage(seed=2)
  quantize = quantization.IntegerUniformQuantizationEncodingStage(bits=2)
  pack = quantization.IntegerBitpackingEncodingStage(input_bits=2)
  size = 1000  # Not a power of two: tensor_encoding would send 1024 values.
  x = tf.random.stateless_normal([size], seed=[4, 2])
  rotate_params, unrotate_params = _params(rotate)
  quantize_params, dequantize_params = quantize.get_params()
  rotated = rotate.encode(x, rotate_params)[0]
  levels = quantize.encode(rotated[VALUES], quantize_params)
  key = quantize.ENCODED_VALUES_KEY
  packed = pack.encode(levels[key], {})
  wire = list(packed.values()) + [t for k, t in levels.items() if k != key]
  assert sum(t.dtype.size * 8 * int(tf.size(t)) for t in wire) == 2 * size + 64
  levels = {**levels, key: pack.decode(packed, {}, shape=[size])}
  values = quantize.decode(levels, dequantize_params)
  decoded = rotate.decode({VALUES: values}, unrotate_params, shape=[size])
  # Stochastic rounding to 4 levels: about 0.95 on Gaussian data.
  assert np.linalg.norm(decoded - x) / np.linalg.norm(x) < 1.2
