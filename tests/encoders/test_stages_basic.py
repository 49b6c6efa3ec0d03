"""Identity, flatten, cast and clipping stages."""

import pathlib

import numpy as np
import pytest
import tensorflow as tf

from encoders.stages import basic

FLOAT_DTYPES = [tf.float16, tf.bfloat16, tf.float32, tf.float64]


def _wire_bits(encoded):
  return sum(t.dtype.size * 8 * int(tf.size(t)) for t in encoded.values())


def _round_trip(stage, x, shape=None):
  encode_params, decode_params = stage.get_params()
  encoded = stage.encode(x, encode_params)
  return encoded, stage.decode(encoded, decode_params, shape=shape)


def _separately_traced_round_trip(make_stage, x):
  """Encodes and decodes in two tf.functions, on two instances of the stage."""
  encoder, decoder = make_stage(), make_stage()
  encode_params, _ = encoder.get_params()
  _, decode_params = decoder.get_params()
  encode = tf.function(
      lambda x: (encoder.encode(x, encode_params), tf.shape(x)))
  encoded, shape = encode(x)
  decode = tf.function(lambda encoded, shape: decoder.decode(
      encoded, decode_params, shape=shape))
  return decode(encoded, shape)


def _random(shape, dtype=tf.float32, seed=0, scale=1.0):
  values = np.random.default_rng(seed).normal(size=shape) * scale
  return tf.cast(tf.constant(values, tf.float64), dtype)


class TestIdentity:

  def test_round_trip_is_exact_and_free(self):
    stage = basic.IdentityEncodingStage()
    x = _random([3, 4])
    encoded, decoded = _round_trip(stage, x)
    assert list(encoded) == ['identity_values']
    np.testing.assert_array_equal(decoded.numpy(), x.numpy())
    assert stage.commutes_with_sum and not stage.decode_needs_input_shape
    assert stage.compressible_tensors_keys == ['identity_values']

  def test_separate_traces(self):
    x = _random([5])
    decoded = _separately_traced_round_trip(basic.IdentityEncodingStage, x)
    np.testing.assert_array_equal(decoded.numpy(), x.numpy())


class TestFlatten:

  @pytest.mark.parametrize('shape', [[], [0], [7], [2, 3, 4], [0, 5]])
  def test_round_trip_any_shape(self, shape):
    stage = basic.FlattenEncodingStage()
    x = _random(shape)
    encoded, decoded = _round_trip(stage, x, shape=shape)
    assert encoded['flattened_values'].shape.rank == 1
    assert encoded['flattened_values'].shape[0] == int(np.prod(shape))
    assert decoded.shape == shape
    np.testing.assert_array_equal(decoded.numpy(), x.numpy())

  def test_dynamic_shape_in_tf_function(self):
    stage = basic.FlattenEncodingStage()

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32)])
    def round_trip(x):
      encoded = stage.encode(x, {})
      assert encoded['flattened_values'].shape.as_list() == [None]
      return stage.decode(encoded, {}, shape=tf.shape(x))

    for shape in ([3, 5], [0, 2], [1, 1]):
      x = _random(shape)
      np.testing.assert_array_equal(round_trip(x).numpy(), x.numpy())

  def test_static_shape_restored_in_graph(self):
    stage = basic.FlattenEncodingStage()

    @tf.function
    def round_trip(x):
      decoded = stage.decode(stage.encode(x, {}), {}, shape=[2, 3])
      assert decoded.shape.as_list() == [2, 3]
      return decoded

    x = _random([2, 3])
    np.testing.assert_array_equal(round_trip(x).numpy(), x.numpy())

  def test_commutes_with_sum(self):
    stage = basic.FlattenEncodingStage()
    xs = [_random([2, 3], seed=s) for s in range(3)]
    summed = tf.add_n([stage.encode(x, {})['flattened_values'] for x in xs])
    decoded = stage.decode({'flattened_values': summed}, {}, num_summands=3,
                           shape=[2, 3])
    np.testing.assert_allclose(decoded.numpy(), tf.add_n(xs).numpy(),
                               rtol=1e-6)
    assert stage.commutes_with_sum and stage.decode_needs_input_shape

  def test_decode_without_shape_fails_clearly(self):
    stage = basic.FlattenEncodingStage()
    encoded = stage.encode(_random([2, 2]), {})
    with pytest.raises(ValueError, match='FlattenEncodingStage.*shape'):
      stage.decode(encoded, {})

  def test_separate_traces(self):
    x = _random([4, 1, 3])
    decoded = _separately_traced_round_trip(basic.FlattenEncodingStage, x)
    np.testing.assert_array_equal(decoded.numpy(), x.numpy())


class TestCast:

  @pytest.mark.parametrize('input_dtype, wire_dtype, rtol', [
      (tf.float32, tf.float16, 1e-3),
      (tf.float32, tf.bfloat16, 8e-3),
      (tf.float64, tf.float32, 1e-7),
      (tf.float64, tf.float16, 1e-3),
  ])
  def test_round_trip_returns_input_dtype(self, input_dtype, wire_dtype, rtol):
    stage = basic.CastEncodingStage(wire_dtype)
    x = _random([50], input_dtype)
    encoded, decoded = _round_trip(stage, x)
    assert encoded['cast_values'].dtype == wire_dtype
    assert decoded.dtype == input_dtype
    np.testing.assert_allclose(decoded.numpy(), x.numpy(), rtol=rtol)
    # Only the narrow values cost bits; the dtype tag is empty.
    assert _wire_bits(encoded) == 50 * wire_dtype.size * 8

  def test_same_dtype_passes_unchanged(self):
    x = _random([6], tf.float16)
    _, decoded = _round_trip(basic.CastEncodingStage(tf.float16), x)
    assert decoded.dtype == tf.float16
    np.testing.assert_array_equal(decoded.numpy(), x.numpy())

  def test_separate_traces_recover_dtype(self):
    x = _random([3, 3], tf.float64)
    decoded = _separately_traced_round_trip(
        lambda: basic.CastEncodingStage(tf.float32), x)
    assert decoded.dtype == tf.float64
    np.testing.assert_allclose(decoded.numpy(), x.numpy(), rtol=1e-7)

  def test_scalar_and_empty(self):
    stage = basic.CastEncodingStage(tf.bfloat16)
    for shape in ([], [0]):
      _, decoded = _round_trip(stage, _random(shape))
      assert decoded.shape == shape and decoded.dtype == tf.float32

  def test_does_not_commute_with_sum(self):
    # Sums in float16 round differently from sums of decoded float32 values.
    stage = basic.CastEncodingStage(tf.float16)
    assert not stage.commutes_with_sum

  def test_errors(self):
    with pytest.raises(ValueError, match='CastEncodingStage.*int32'):
      basic.CastEncodingStage(tf.int32)
    stage = basic.CastEncodingStage(tf.bfloat16)
    with pytest.raises(ValueError, match='CastEncodingStage.*float16.*narrow'):
      stage.encode(_random([3], tf.float16), {})
    with pytest.raises(TypeError, match='CastEncodingStage.*int32'):
      stage.encode(tf.constant([1, 2]), {})
    with pytest.raises(ValueError, match='CastEncodingStage.*float32.*float64'):
      basic.CastEncodingStage(tf.float64).encode(_random([3]), {})


class TestClipByNorm:

  @pytest.mark.parametrize('dtype', FLOAT_DTYPES)
  def test_long_vector_scaled_to_clip_norm(self, dtype):
    stage = basic.ClipByNormEncodingStage(2.0)
    x = _random([40], dtype, scale=3.0)
    _, decoded = _round_trip(stage, x)
    assert decoded.dtype == dtype
    decoded64 = tf.cast(decoded, tf.float64).numpy()
    x64 = tf.cast(x, tf.float64).numpy()
    rtol = 1e-2 if dtype in (tf.float16, tf.bfloat16) else 1e-5
    np.testing.assert_allclose(np.linalg.norm(decoded64), 2.0, rtol=rtol)
    np.testing.assert_allclose(decoded64 / np.linalg.norm(decoded64),
                               x64 / np.linalg.norm(x64), atol=rtol)

  def test_short_vector_and_zero_unchanged(self):
    stage = basic.ClipByNormEncodingStage(100.0)
    for x in (_random([10]), tf.zeros([4]), tf.zeros([0]), tf.constant(3.0)):
      _, decoded = _round_trip(stage, x)
      np.testing.assert_array_equal(decoded.numpy(), x.numpy())

  def test_float16_norm_does_not_overflow(self):
    # sum(x**2) = 4e8 overflows float16 (max 65504): the norm runs in float32.
    x = tf.fill([100], tf.constant(2000.0, tf.float16))
    _, decoded = _round_trip(basic.ClipByNormEncodingStage(1.0), x)
    assert np.all(np.isfinite(decoded.numpy()))
    np.testing.assert_allclose(decoded.numpy().astype(np.float64), 0.1,
                               rtol=1e-3)

  def test_tensor_clip_norm_and_separate_traces(self):
    x = _random([8], scale=5.0)
    decoded = _separately_traced_round_trip(
        lambda: basic.ClipByNormEncodingStage(tf.constant(0.5)), x)
    np.testing.assert_allclose(np.linalg.norm(decoded.numpy()), 0.5, rtol=1e-5)

  def test_decode_of_sum_is_sum(self):
    stage = basic.ClipByNormEncodingStage(1.0)
    encoded = [stage.encode(_random([5], seed=s, scale=4.0), {'clip_norm': 1.0})
               for s in range(3)]
    summed = {'clipped_values':
                  tf.add_n([e['clipped_values'] for e in encoded])}
    decoded = stage.decode(summed, {}, num_summands=3)
    separately = tf.add_n([stage.decode(e, {}) for e in encoded])
    np.testing.assert_allclose(decoded.numpy(), separately.numpy(), rtol=1e-6)
    assert stage.commutes_with_sum

  @pytest.mark.parametrize('clip_norm, error', [
      (0.0, ValueError), (-1.0, ValueError), (float('inf'), ValueError),
      (float('nan'), ValueError), ('1', TypeError), (True, TypeError)])
  def test_bad_clip_norm(self, clip_norm, error):
    with pytest.raises(error, match='ClipByNormEncodingStage'):
      basic.ClipByNormEncodingStage(clip_norm)


class TestOneClipping:
  """`clip_by_global_l2_norm` is the project's one clipping: a structure of
  mixed float dtypes clipped as one vector, each tensor in its dtype."""

  def test_structure_clipped_as_one_vector(self):
    values = {'a': _random([3, 4], tf.float32, seed=1, scale=3.0),
              'b': (_random([5], tf.float16, seed=2, scale=3.0),
                    _random([], tf.float64, seed=3, scale=3.0))}
    clipped, norm = basic.clip_by_global_l2_norm(values, 1.5)
    flat = [tf.cast(x, tf.float64).numpy().ravel()
            for x in tf.nest.flatten(values)]
    expected_norm = np.linalg.norm(np.concatenate(flat))
    assert norm.dtype == tf.float64  # One float64 tensor widens the norm.
    np.testing.assert_allclose(norm.numpy(), expected_norm, rtol=1e-6)
    for x, y, original in zip(tf.nest.flatten(clipped), flat,
                              tf.nest.flatten(values)):
      assert x.dtype == original.dtype
      rtol = 1e-2 if x.dtype == tf.float16 else 1e-6
      np.testing.assert_allclose(tf.cast(x, tf.float64).numpy().ravel(),
                                 y * 1.5 / expected_norm, rtol=rtol)

  def test_inside_the_ball_and_zero_unchanged(self):
    for values in ([_random([4]), _random([2, 2], tf.float16)],
                   [tf.zeros([3]), tf.zeros([0])], []):
      clipped, _ = basic.clip_by_global_l2_norm(values, 100.0)
      for x, y in zip(clipped, values):
        np.testing.assert_array_equal(x.numpy(), y.numpy())

  def test_one_tensor_is_the_stages_clip(self):
    x = _random([40], scale=3.0)
    clipped, norm = basic.clip_by_global_l2_norm([x], 2.0)
    encoded = basic.ClipByNormEncodingStage(2.0).encode(x, {'clip_norm': 2.0})
    np.testing.assert_array_equal(clipped[0].numpy(),
                                  encoded['clipped_values'].numpy())
    np.testing.assert_array_equal(norm.numpy(),
                                  basic.clip_by_l2_norm(x, 2.0)[1].numpy())


def test_the_library_clips_one_way():
  """No clip of its own anywhere else: TensorFlow's clip ops are not
  called by the library (norms for measurements are not clips)."""
  root = pathlib.Path(basic.__file__).parents[2]
  found = []
  for package in ('encoders', 'canonical', 'beam_runner', 'pipelines'):
    for path in (root / package).rglob('*.py'):
      text = path.read_text()
      for name in ('clip_by_global_norm', 'clip_by_norm(',
                   'clip_by_average_norm'):
        if f'tf.{name}' in text:
          found.append(f'{path.relative_to(root)}: tf.{name}')
  assert not found, found


class TestClipByValue:

  @pytest.mark.parametrize('dtype', FLOAT_DTYPES)
  def test_values_clipped(self, dtype):
    stage = basic.ClipByValueEncodingStage(-0.5, 1.0)
    x = _random([60], dtype, scale=2.0)
    _, decoded = _round_trip(stage, x)
    assert decoded.dtype == dtype
    expected = np.clip(tf.cast(x, tf.float64).numpy(), -0.5, 1.0)
    np.testing.assert_array_equal(tf.cast(decoded, tf.float64).numpy(),
                                  expected)

  def test_scalar_empty_and_dynamic(self):
    stage = basic.ClipByValueEncodingStage(0.0, 1.0)
    for x in (tf.constant(3.0), tf.zeros([0, 3])):
      _, decoded = _round_trip(stage, x)
      assert decoded.shape == x.shape
    fn = tf.function(lambda x: _round_trip(stage, x)[1],
                     input_signature=[tf.TensorSpec([None], tf.float32)])
    np.testing.assert_array_equal(fn(tf.constant([-1.0, 0.5, 2.0])).numpy(),
                                  [0.0, 0.5, 1.0])

  def test_separate_traces_and_sum(self):
    x = _random([3, 2], scale=3.0)
    decoded = _separately_traced_round_trip(
        lambda: basic.ClipByValueEncodingStage(-1.0, 1.0), x)
    np.testing.assert_array_equal(decoded.numpy(), np.clip(x.numpy(), -1, 1))
    assert basic.ClipByValueEncodingStage(-1.0, 1.0).commutes_with_sum

  def test_bad_bounds(self):
    with pytest.raises(ValueError, match='ClipByValueEncodingStage.*exceed'):
      basic.ClipByValueEncodingStage(1.0, -1.0)
    with pytest.raises(TypeError, match='ClipByValueEncodingStage'):
      basic.ClipByValueEncodingStage(None, 1.0)
    with pytest.raises(TypeError, match='ClipByValueEncodingStage.*int32'):
      basic.ClipByValueEncodingStage(0.0, 1.0).encode(tf.constant([1]), {
          'clip_value_min': 0.0, 'clip_value_max': 1.0})


def test_dtype_tag_is_free_and_names_dtype():
  for dtype in FLOAT_DTYPES:
    tag = basic.dtype_tag(dtype)
    assert tf.size(tag) == 0
    assert basic.tagged_dtype(tag) == dtype
    # A sum of tags (the server summing encodings) still names the dtype.
    assert basic.tagged_dtype(tf.add_n([tag, tag])) == dtype
