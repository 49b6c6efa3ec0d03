"""SignEncodingStage: a bit per value and one scale; DRIVE after a rotation."""

import numpy as np
import pytest
import tensorflow as tf

from encoders.stages import basic
from encoders.stages import rotation
from encoders.stages import sign

SIGNS = sign.SignEncodingStage.SIGNS_KEY
SCALE = sign.SignEncodingStage.SCALE_KEY
TAG = basic.DTYPE_TAG_KEY


def _round_trip(stage, x):
  return stage.decode(stage.encode(x, {}), {}, shape=tf.shape(x))


def test_signs_are_flat_zero_one_ints_and_zero_counts_as_positive():
  stage = sign.SignEncodingStage()
  x = tf.constant([[1.5, -2.0, 0.0], [-0.5, 3.0, -1.0]])
  encoded = stage.encode(x, {})
  assert encoded[SIGNS].dtype == tf.int32
  np.testing.assert_array_equal(encoded[SIGNS], [1, 0, 1, 0, 1, 0])
  assert encoded[SCALE].shape == []


def test_mean_abs_scale_and_decode():
  stage = sign.SignEncodingStage('mean_abs')
  x = tf.constant([[1.5, -2.0, 0.0], [-0.5, 3.0, -1.0]])
  encoded = stage.encode(x, {})
  np.testing.assert_allclose(encoded[SCALE], 8.0 / 6)
  decoded = stage.decode(encoded, {}, shape=[2, 3])
  expected = np.array([[1, -1, 1], [-1, 1, -1]]) * 8 / 6
  np.testing.assert_allclose(decoded, expected, rtol=1e-6)


def test_drive_scale_is_squared_l2_over_l1():
  stage = sign.SignEncodingStage('drive')
  x = tf.constant([3.0, -4.0, 1.0])
  np.testing.assert_allclose(stage.encode(x, {})[SCALE], 26.0 / 8, rtol=1e-6)


def test_mean_abs_keeps_l1_norm_and_is_the_least_squares_scale():
  x = tf.random.stateless_normal([1000], seed=[1, 1])
  decoded = _round_trip(sign.SignEncodingStage('mean_abs'), x).numpy()
  np.testing.assert_allclose(np.abs(decoded).sum(), np.abs(x).sum(), rtol=1e-5)
  signs = np.sign(decoded)
  best = np.dot(signs, x) / len(signs)
  np.testing.assert_allclose(np.abs(decoded[0]), best, rtol=1e-5)


@pytest.mark.parametrize('scale', ['mean_abs', 'drive'])
@pytest.mark.parametrize('shape', [[], [0], [4, 0], [1]])
def test_scalar_and_empty(scale, shape):
  stage = sign.SignEncodingStage(scale)
  x = tf.fill(shape, -2.0)
  encoded = stage.encode(x, {})
  assert encoded[SIGNS].shape == [int(np.prod(shape))]
  decoded = stage.decode(encoded, {}, shape=shape)
  assert decoded.shape == shape
  np.testing.assert_allclose(decoded, x)


@pytest.mark.parametrize('scale', ['mean_abs', 'drive'])
def test_all_zero_input_decodes_to_zeros(scale):
  stage = sign.SignEncodingStage(scale)
  np.testing.assert_array_equal(_round_trip(stage, tf.zeros([3, 4])),
                                np.zeros([3, 4]))


@pytest.mark.parametrize('dtype', [tf.float16, tf.bfloat16, tf.float32,
                                   tf.float64])
def test_float_dtypes_decode_to_their_dtype(dtype):
  stage = sign.SignEncodingStage()
  x = tf.cast(tf.random.stateless_normal([2000], seed=[2, 3]), dtype)
  encoded = stage.encode(x, {})
  assert encoded[SIGNS].dtype == tf.int32
  # One float32 scale whatever the input; the dtype rides in a free tag.
  assert encoded[SCALE].dtype == tf.float32
  assert encoded[TAG].dtype == dtype and encoded[TAG].shape == [0]
  decoded = stage.decode(encoded, {}, shape=[2000])
  assert decoded.dtype == dtype
  x64 = tf.cast(x, tf.float64).numpy()
  np.testing.assert_array_equal(np.sign(tf.cast(decoded, tf.float64)),
                                np.where(x64 >= 0, 1, -1))
  np.testing.assert_allclose(np.abs(tf.cast(decoded, tf.float64)),
                             np.mean(np.abs(x64)), rtol=1e-2)


def test_rejects_integer_input_and_unknown_scale():
  with pytest.raises(TypeError, match='SignEncodingStage.*int32'):
    sign.SignEncodingStage().encode(tf.constant([1, -2]), {})
  with pytest.raises(ValueError, match="SignEncodingStage: scale.*'l2'"):
    sign.SignEncodingStage('l2')


def test_decode_without_shape_is_a_clear_error():
  stage = sign.SignEncodingStage()
  with pytest.raises(ValueError, match='SignEncodingStage.*shape'):
    stage.decode(stage.encode(tf.ones([3]), {}), {})


def test_encode_and_decode_traced_separately_and_dynamic_shapes():
  stage = sign.SignEncodingStage('drive')
  x = tf.random.stateless_normal([6, 7], seed=[4, 4])
  expected = _round_trip(stage, x)

  @tf.function(input_signature=[tf.TensorSpec(None, tf.float32)])
  def encode(x):
    return stage.encode(x, {})

  @tf.function(input_signature=[
      {SIGNS: tf.TensorSpec([None], tf.int32),
       SCALE: tf.TensorSpec([], tf.float32),
       TAG: tf.TensorSpec([0], tf.float32)},
      tf.TensorSpec([None], tf.int32)])
  def decode(encoded, shape):
    return stage.decode(encoded, {}, shape=shape)

  decoded = decode(encode(x), tf.shape(x))
  assert decoded.shape == [6, 7]
  np.testing.assert_allclose(decoded, expected, rtol=1e-6)


def test_same_input_same_bits_and_properties():
  stage = sign.SignEncodingStage()
  x = tf.random.stateless_normal([50], seed=[5, 5])
  a, b = stage.encode(x, {}), stage.encode(x, {})
  np.testing.assert_array_equal(a[SIGNS], b[SIGNS])
  np.testing.assert_array_equal(a[SCALE], b[SCALE])
  assert stage.name == 'sign'
  assert stage.compressible_tensors_keys == [SIGNS]
  assert not stage.commutes_with_sum
  assert stage.decode_needs_input_shape


def test_drive_after_hadamard_is_unbiased_over_rotations():
  """Hadamard -> Sign('drive') composed by hand, averaged over rotations."""
  size, rounds = 1000, 300
  x = tf.random.stateless_normal([size], seed=[7, 7], dtype=tf.float64)
  rotate = rotation.UnpaddedHadamardEncodingStage(seed=11)
  one_bit = sign.SignEncodingStage('drive')

  @tf.function
  def estimate(state):
    encode_params, decode_params = rotate.get_params(state)
    rotated, _ = rotate.encode(x, encode_params)
    values = rotated[rotate.ENCODED_VALUES_KEY]
    signs = one_bit.encode(values, {})
    unsigned = one_bit.decode(signs, {}, shape=tf.shape(values))
    return rotate.decode({rotate.ENCODED_VALUES_KEY: unsigned}, decode_params,
                         shape=[size])

  state = rotate.initial_state()
  estimates = []
  for _ in range(rounds):
    estimates.append(estimate(state).numpy())
    state = rotate.update_state(state, {})
  estimates = np.stack(estimates)
  x = x.numpy()
  squared_norm = np.sum(x**2)
  vnmse = np.mean(np.sum((estimates - x)**2, axis=1)) / squared_norm
  mean_error = np.linalg.norm(estimates.mean(axis=0) - x) / np.linalg.norm(x)
  print(f'DRIVE 1-bit after Hadamard, d={size}: vNMSE {vnmse:.3f} '
        f'(relative error {np.sqrt(vnmse):.3f}); relative error of the mean '
        f'of {rounds} rotations {mean_error:.4f}')
  # DRIVE's vNMSE for 1 bit is about pi/2 - 1 = 0.571 for large d.
  assert 0.45 < vnmse < 0.7
  # Unbiased: the mean of independent estimates has vNMSE ~ vnmse / rounds.
  assert mean_error < 2.5 * np.sqrt(vnmse / rounds)


def test_signs_bitpack_to_one_bit_each():
  quantization = pytest.importorskip('encoders.stages.quantization')
  packer = quantization.IntegerBitpackingEncodingStage(input_bits=1)
  stage = sign.SignEncodingStage()
  x = tf.random.stateless_normal([13, 7], seed=[9, 9])
  encoded = stage.encode(x, {})
  packed = packer.encode(encoded[SIGNS], {})
  wire_bits = sum(t.dtype.size * 8 * int(tf.size(t))
                  for t in list(packed.values()) + [encoded[SCALE],
                                                    encoded[TAG]])
  assert wire_bits == 8 * int(np.ceil(91 / 8)) + 32
  unpacked = packer.decode(packed, {}, shape=[91])
  np.testing.assert_array_equal(unpacked, encoded[SIGNS])
  decoded = stage.decode({**encoded, SIGNS: unpacked}, {}, shape=[13, 7])
  np.testing.assert_array_equal(decoded, _round_trip(stage, x))
