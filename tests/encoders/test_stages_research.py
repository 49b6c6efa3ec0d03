"""Research stages: Kashin's representation, sparse splitting, per-channel and
dithered quantization, clipping at the research module paths."""

import numpy as np
import pytest
import tensorflow as tf

from encoders.core import seeds
from encoders.stages import basic
from encoders.stages.research import clipping
from encoders.stages.research import kashin
from encoders.stages.research import misc
from encoders.stages.research import quantization
from encoders import testing

Kashin = kashin.KashinHadamardEncodingStage
Split = misc.SplitBySmallValueEncodingStage
Differences = misc.DifferenceBetweenIntegersEncodingStage
PRNG = quantization.PRNGUniformQuantizationEncodingStage
PerChannel = quantization.PerChannelUniformQuantizationEncodingStage
PerChannelPRNG = quantization.PerChannelPRNGUniformQuantizationEncodingStage


def _random(shape, dtype=tf.float32, seed=0, scale=1.0):
  values = np.random.default_rng(seed).normal(size=shape) * scale
  return tf.cast(tf.constant(values, tf.float64), dtype)


def _round_trip(stage, x, encode_params=None, decode_params=None):
  params = stage.get_params()
  encode_params = params[0] if encode_params is None else encode_params
  decode_params = params[1] if decode_params is None else decode_params
  encoded = stage.encode(x, encode_params)
  shape = tf.shape(x) if stage.decode_needs_input_shape else None
  return encoded, stage.decode(encoded, decode_params, shape=shape)


def _with_seed(params, seed):
  return dict(params, seed=tf.constant([0, seed], tf.int64))


class TestKashin:

  @pytest.mark.parametrize('shape', [(1,), (12,), (3, 12), (2, 100), (5, 0)])
  @pytest.mark.parametrize('dtype', [tf.float32, tf.float64])
  def test_exact_without_last_clip(self, shape, dtype):
    x = _random(shape, dtype)
    encoded, y = _round_trip(Kashin(delta=50.0, num_iters=2), x)
    assert y.dtype == dtype and y.shape == x.shape
    assert encoded[Kashin.ENCODED_VALUES_KEY].dtype == dtype
    tol = 1e-5 if dtype == tf.float32 else 1e-12
    np.testing.assert_allclose(y, x, atol=tol)

  @pytest.mark.parametrize('make_x', [
      lambda: _random([4, 100], seed=1),
      # The worst case for spreading: all mass on one coordinate.
      lambda: tf.one_hot([0, 37, 99], 100) * 5.0,
      lambda: tf.ones([1, 100]),
  ])
  @pytest.mark.parametrize('eta, delta, num_iters', [
      (0.9, 1.0, 3), (0.5, 2.0, 5), (0.8, 100.0, 4)])
  def test_clipped_coefficients_within_kashin_bound(self, make_x, eta, delta,
                                                    num_iters):
    # With every iteration clipped, |a_j| <= sum of the levels
    # = ||x|| (1 + eta + ... + eta**(k-1)) / sqrt(delta N) < ||x|| /
    # ((1 - eta) sqrt(delta N)): Kashin's bound, whatever the input.
    x = make_x()
    stage = Kashin(eta=eta, delta=delta, num_iters=num_iters,
                   last_iter_clip=True, seed=5)
    encoded, _ = _round_trip(stage, x)
    a = encoded[Kashin.ENCODED_VALUES_KEY].numpy()
    size = a.shape[1]
    norms = np.linalg.norm(x.numpy(), axis=1)
    levels = sum(eta**i for i in range(num_iters))
    bound = norms * levels / np.sqrt(delta * size)
    assert np.all(np.abs(a).max(axis=1) <= bound * (1 + 1e-5) + 1e-7)

  def test_spike_is_spread_and_reconstructed(self):
    # A one-hot vector's coefficients are about 1/sqrt(N) each; the default
    # (unclipped last step) still reconstructs it exactly.
    x = tf.one_hot([7], 100)
    encoded, y = _round_trip(Kashin(seed=1), x)
    a = encoded[Kashin.ENCODED_VALUES_KEY].numpy()
    assert a.shape == (1, 128)
    assert np.abs(a).max() < 4 / np.sqrt(128)
    np.testing.assert_allclose(y, x, atol=1e-6)

  def test_default_frame_meets_bound_without_last_clip(self):
    # Default eta, delta and 3 iterations: for Gaussian rows the levels
    # already cover the residual, so even the unclipped last step stays
    # within the Kashin bound ||x|| / ((1 - eta) sqrt(delta N)).
    x = _random([16, 200], seed=2)
    encoded, _ = _round_trip(Kashin(seed=2), x)
    a = encoded[Kashin.ENCODED_VALUES_KEY].numpy()
    bound = np.linalg.norm(x.numpy(), axis=1) / (0.1 * np.sqrt(a.shape[1]))
    assert np.all(np.abs(a).max(axis=1) <= bound)

  def test_error_shrinks_with_iterations_when_clipping(self):
    x = _random([3, 50], seed=3)
    errors = []
    for num_iters in range(1, 7):
      stage = Kashin(eta=0.9, delta=100.0, num_iters=num_iters,
                     last_iter_clip=True, seed=4)
      errors.append(float(tf.norm(_round_trip(stage, x)[1] - x)))
    assert all(a > b for a, b in zip(errors, errors[1:])), errors

  @pytest.mark.parametrize('threshold, n, size', [
      (0.85, 6, 8), (0.85, 7, 16), (0.85, 8, 16), (1.0, 8, 8), (0.0, 1, 2),
      (0.85, 0, 1), (0.5, 1000, 2048)])
  def test_frame_size(self, threshold, n, size):
    stage = Kashin(pad_extra_level_threshold=threshold, seed=0)
    encoded, _ = _round_trip(stage, tf.ones([2, n]))
    assert encoded[Kashin.ENCODED_VALUES_KEY].shape == (2, size)

  def test_seed_fixes_the_frame_and_decode_regenerates_it(self):
    x = _random([2, 20])
    stage = Kashin(seed=9)
    first, _ = _round_trip(stage, x)
    second, _ = _round_trip(stage, x)
    np.testing.assert_array_equal(first[Kashin.ENCODED_VALUES_KEY],
                                  second[Kashin.ENCODED_VALUES_KEY])
    # Unseeded: a fresh frame per get_params, still decoded exactly.
    unseeded = Kashin()
    one, y1 = _round_trip(unseeded, x)
    two, y2 = _round_trip(unseeded, x)
    assert not np.allclose(one[Kashin.ENCODED_VALUES_KEY],
                           two[Kashin.ENCODED_VALUES_KEY])
    np.testing.assert_allclose(y1, x, atol=1e-5)
    np.testing.assert_allclose(y2, x, atol=1e-5)
    # Decoding with another seed's frame does not give x back.
    encode_params, decode_params = stage.get_params()
    encoded = stage.encode(x, encode_params)
    wrong = stage.decode(encoded, _with_seed(decode_params, 123),
                         shape=x.shape)
    assert float(tf.norm(wrong - x)) > 0.1 * float(tf.norm(x))

  def test_unknown_leading_dimension(self):
    stage = Kashin(seed=0)
    encode_params, decode_params = stage.get_params()

    @tf.function(input_signature=[tf.TensorSpec([None, 6], tf.float32)])
    def round_trip(x):
      encoded = stage.encode(x, encode_params)
      assert encoded[Kashin.ENCODED_VALUES_KEY].shape.as_list() == [None, 8]
      return stage.decode(encoded, decode_params, shape=tf.shape(x))

    x = _random([5, 6])
    np.testing.assert_allclose(round_trip(x), x, atol=1e-5)

  @pytest.mark.parametrize('kwargs, error, match', [
      (dict(seed=1.5), TypeError, 'seed'),
      (dict(seed='1'), TypeError, 'seed'),
      (dict(pad_extra_level_threshold=1.5), ValueError,
       'pad_extra_level_threshold'),
      (dict(eta=True), ValueError, 'eta'),
      (dict(num_iters=2.0), ValueError, 'num_iters'),
  ])
  def test_bad_arguments(self, kwargs, error, match):
    with pytest.raises(error, match=f'KashinHadamardEncodingStage: {match}'):
      Kashin(**kwargs)

  def test_rejects_integer_input(self):
    stage = Kashin()
    with pytest.raises(TypeError, match='KashinHadamardEncodingStage'):
      stage.encode(tf.ones([4], tf.int32), stage.get_params()[0])

  def test_harness(self):
    testing.check_stage(Kashin(seed=0), lossless=True, atol=1e-4,
                        shapes=((5, 11),), dtypes=(tf.float32, tf.float64))


class TestSplitBySmallValue:

  def test_keeps_large_values_at_flat_positions(self):
    x = tf.constant([[0.5, -1e-9, 0.0], [-2.0, 1e-3, 0.04]])
    stage = Split(threshold=0.01)
    encoded, y = _round_trip(stage, x)
    np.testing.assert_array_equal(encoded[Split.ENCODED_INDICES_KEY],
                                  [0, 3, 5])
    assert encoded[Split.ENCODED_INDICES_KEY].dtype == tf.int32
    np.testing.assert_array_equal(encoded[Split.ENCODED_VALUES_KEY],
                                  np.float32([0.5, -2.0, 0.04]))
    np.testing.assert_array_equal(y, np.float32([[0.5, 0, 0], [-2.0, 0, 0.04]]))

  def test_threshold_may_be_a_tensor(self):
    x = tf.constant([0.1, 0.2, 0.3], tf.float64)
    _, y = _round_trip(Split(threshold=tf.constant(0.15, tf.float32)), x)
    np.testing.assert_array_equal(y, [0.0, 0.2, 0.3])

  def test_indices_chain_into_differences(self):
    x = _random([1000], seed=5)
    split = Split(threshold=1.0)
    encoded = split.encode(x, split.get_params()[0])
    indices = encoded[Split.ENCODED_INDICES_KEY]
    gaps, indices_back = _round_trip(Differences(), indices)
    assert int(tf.reduce_min(gaps[Differences.ENCODED_VALUES_KEY])) >= 0
    np.testing.assert_array_equal(indices_back, indices)

  @pytest.mark.parametrize('threshold', [-1.0, float('nan')])
  def test_bad_threshold(self, threshold):
    with pytest.raises(ValueError, match='SplitBySmallValueEncodingStage'):
      Split(threshold=threshold)

  def test_harness(self):
    # Threshold 0 keeps every non-zero value: exact.
    testing.check_stage(Split(threshold=0.0), lossless=True)


class TestDifferenceBetweenIntegers:

  @pytest.mark.parametrize('dtype', [tf.int8, tf.int32, tf.int64, tf.uint8,
                                     tf.uint32])
  def test_exact_including_wrap_around(self, dtype):
    top = dtype.max
    x = tf.constant([3, top, 0, 7, top - 1, 1], dtype)
    encoded, y = _round_trip(Differences(), x)
    assert encoded[Differences.ENCODED_VALUES_KEY].dtype == dtype
    np.testing.assert_array_equal(y, x)

  def test_sum_of_encodings_decodes_to_sum(self):
    xs = [tf.constant(np.random.default_rng(i).integers(0, 100, 20), tf.int32)
          for i in range(4)]
    stage = Differences()
    encoded = [stage.encode(x, {})[Differences.ENCODED_VALUES_KEY] for x in xs]
    total = stage.decode({Differences.ENCODED_VALUES_KEY: tf.add_n(encoded)},
                         {}, num_summands=4)
    np.testing.assert_array_equal(total, tf.add_n(xs))

  def test_rejections_name_the_stage(self):
    stage = Differences()
    with pytest.raises(TypeError, match='DifferenceBetweenIntegersEncodingSta'
                       'ge: Unsupported input type float64'):
      stage.encode(tf.ones([3], tf.float64), {})
    with pytest.raises(ValueError, match='Number of dimensions must be 1'):
      stage.encode(tf.ones([], tf.int32), {})

  @pytest.mark.parametrize('length', [25, 0])
  def test_separate_traces_with_unknown_length(self, length):
    # encoders.testing takes float inputs only, which this stage rejects, so
    # its separate-traces check is done here by hand: encode and decode in
    # their own tf.functions, only numpy crossing between them.
    stage = Differences()
    encode = tf.function(
        lambda x: stage.encode(x, {}),
        input_signature=[tf.TensorSpec([None], tf.int64)])
    decode = tf.function(
        lambda e: stage.decode({Differences.ENCODED_VALUES_KEY: e}, {}),
        input_signature=[tf.TensorSpec([None], tf.int64)])
    x = np.random.default_rng(12).integers(-1000, 1000, length)
    encoded = encode(tf.constant(x)).copy()
    first = encode(tf.constant(x))[Differences.ENCODED_VALUES_KEY].numpy()
    np.testing.assert_array_equal(
        first, encoded[Differences.ENCODED_VALUES_KEY])
    np.testing.assert_array_equal(decode(first).numpy(), x)


def _step(x, bits=8, axis=None):
  """The spacing of the levels over `x`'s range (per channel with `axis`)."""
  values = np.asarray(x, np.float64)
  return (values.max(axis=axis) - values.min(axis=axis)) / (2**bits - 1)


class TestQuantization:

  @pytest.mark.parametrize('stage_class', [PRNG, PerChannelPRNG])
  def test_dither_error_within_half_a_level(self, stage_class):
    x = _random([40, 8], seed=6, scale=3.0)
    encoded, y = _round_trip(stage_class(bits=8), x)
    per_channel = stage_class is PerChannelPRNG
    step = _step(x, axis=0 if per_channel else None)
    assert np.all(np.abs(y - x) <= step / 2 * (1 + 1e-4) + 1e-6)
    levels = encoded[quantization.PRNGUniformQuantizationEncodingStage
                     .ENCODED_VALUES_KEY].numpy()
    assert levels.dtype == np.float32
    np.testing.assert_array_equal(levels, np.round(levels))
    assert levels.min() >= 0 and levels.max() <= 255
    expected = (2, 8) if per_channel else (2,)
    assert encoded[stage_class.MIN_MAX_VALUES_KEY].shape == expected

  def test_dither_error_is_uniform_over_a_level(self):
    # Subtractive dither: the error is uniform on (-1/2, 1/2] of a level,
    # whatever the input, so its variance is step**2 / 12 even for inputs that
    # sit exactly on a level (where stochastic rounding has no error at all,
    # and halfway between levels, where it has variance step**2 / 4).
    x = tf.constant(np.linspace(0.0, 3.0, 4001), tf.float32)  # 3 / 4000 apart
    stage = PRNG(bits=2)  # levels at 0, 1, 2, 3
    errors = np.concatenate(
        [(_round_trip(stage, x)[1] - x).numpy() for _ in range(5)])
    assert np.abs(errors).max() <= 0.5 + 1e-6
    assert abs(errors.mean()) < 0.01
    assert abs(errors.var() - 1 / 12) < 0.01

  def test_per_channel_ranges_are_independent(self):
    # Channel scales 1e-3 .. 1e3: each channel's error follows its own range.
    scales = np.array([1e-3, 1.0, 1e3], np.float32)
    x = _random([100, 3], seed=7) * scales
    for stage in (PerChannel(bits=8, stochastic=False),
                  PerChannel(bits=8, stochastic=True), PerChannelPRNG(bits=8)):
      encoded, y = _round_trip(stage, x)
      step = _step(x, axis=0)
      assert np.all(np.abs(y - x).max(axis=0) <= step * (1 + 1e-4)), stage
      np.testing.assert_array_equal(encoded[stage.MIN_MAX_VALUES_KEY],
                                    [x.numpy().min(0), x.numpy().max(0)])

  def test_round_to_nearest_within_half_a_level(self):
    x = _random([60, 4], seed=8)
    _, y = _round_trip(PerChannel(bits=3, stochastic=False), x)
    step = (x.numpy().max(0) - x.numpy().min(0)) / 7
    assert np.all(np.abs(y - x) <= step / 2 * (1 + 1e-5))

  @pytest.mark.parametrize('stage', [
      PRNG(bits=2), PerChannel(bits=2), PerChannelPRNG(bits=2)],
      ids=['prng', 'per_channel', 'per_channel_prng'])
  def test_mean_of_fresh_encodings_converges(self, stage):
    # Run directly: every get_params and encode draws fresh noise, in a
    # tf.function too (the fresh draws are stateful ops, run every call).
    x = _random([20, 3], seed=9)
    trials = 400
    round_trip = tf.function(lambda: _round_trip(stage, x)[1])
    decoded = np.stack([round_trip().numpy() for _ in range(trials)])
    per_channel = not isinstance(stage, PRNG)
    step = _step(x, bits=2, axis=0 if per_channel else None)
    # Each trial's error is at most one level, so the mean's standard error
    # is at most step / sqrt(trials); allow 5 of those.
    assert np.all(np.abs(decoded.mean(0) - x) <= 5 * step / np.sqrt(trials))
    assert np.abs(decoded - x).max() > 0.1 * step.min()  # Noise was added.

  def test_pure_randomness_is_per_client_and_replayable(self):
    a, b = _random([30], seed=10), _random([30], seed=11)
    with seeds.pure_randomness():
      stage = PRNG(bits=4)
      enc_a1, _ = _round_trip(stage, a)
      enc_a2, _ = _round_trip(stage, a)
      enc_b, _ = _round_trip(stage, b)
    nonce = PRNG.DITHER_NONCE_KEY
    assert int(enc_a1[nonce]) == int(enc_a2[nonce])
    np.testing.assert_array_equal(enc_a1[PRNG.ENCODED_VALUES_KEY],
                                  enc_a2[PRNG.ENCODED_VALUES_KEY])
    assert int(enc_a1[nonce]) != int(enc_b[nonce])

  @pytest.mark.parametrize('stage_class', [PRNG, PerChannel, PerChannelPRNG])
  @pytest.mark.parametrize('dtype', [tf.float16, tf.bfloat16, tf.float64])
  def test_keeps_dtype_and_zero_input_exact(self, stage_class, dtype):
    _, y = _round_trip(stage_class(bits=4), _random([6, 5], dtype))
    assert y.dtype == dtype
    _, zero = _round_trip(stage_class(bits=4), tf.zeros([6, 5], dtype))
    np.testing.assert_array_equal(tf.cast(zero, tf.float32), 0.0)

  @pytest.mark.parametrize('bits, error', [
      (0, ValueError), (17, ValueError), (True, ValueError), (8.0, ValueError),
      ('8', ValueError)])
  @pytest.mark.parametrize('stage_class', [PRNG, PerChannel, PerChannelPRNG])
  def test_bad_bits(self, stage_class, bits, error):
    with pytest.raises(error, match=f'{stage_class.__name__}: bits must be an '
                       'integer between 1 and 16'):
      stage_class(bits=bits)

  def test_rejects_integer_input(self):
    stage = PerChannel()
    with pytest.raises(TypeError,
                       match='PerChannelUniformQuantizationEncodingStage'):
      stage.encode(tf.ones([4], tf.int32), stage.get_params()[0])

  @pytest.mark.parametrize('make', [
      lambda: PRNG(bits=8), lambda: PerChannel(bits=8),
      lambda: PerChannelPRNG(bits=8)], ids=['prng', 'per_channel',
                                            'per_channel_prng'])
  def test_harness(self, make):
    # Inside pure_randomness, as in a compiled form: noise is a pure function
    # of the seed and the input, so the determinism checks apply.
    with seeds.pure_randomness():
      testing.check_stage(make(), unbiased=True, max_relative_error=0.02,
                          shapes=((5, 11),), num_trials=100)

  def test_deterministic_rounding_harness(self):
    testing.check_stage(PerChannel(bits=8, stochastic=False),
                        max_relative_error=0.01, shapes=((5, 11),))


class TestClipping:

  def test_research_path_names_our_stages(self):
    assert clipping.ClipByNormEncodingStage is basic.ClipByNormEncodingStage
    assert clipping.ClipByValueEncodingStage is basic.ClipByValueEncodingStage

  def test_bounds_of_mixed_dtypes(self):
    stage = clipping.ClipByValueEncodingStage(tf.constant(-1.0, tf.float64),
                                              tf.constant(0.5, tf.float32))
    _, y = _round_trip(stage, tf.constant([-3.0, 0.25, 2.0], tf.float16))
    assert y.dtype == tf.float16
    np.testing.assert_array_equal(y, [-1.0, 0.25, 0.5])

  def test_harness(self):
    testing.check_stage(clipping.ClipByNormEncodingStage(1.0),
                        shapes=((5, 11),))
    testing.check_stage(clipping.ClipByValueEncodingStage(-1.0, 1.0),
                        shapes=((5, 11),))
