"""Uniform quantization, adaptive-range quantization and bitpacking stages."""

import math
import time

import numpy as np
import pytest
import tensorflow as tf

from encoders.core import encoding_stage
from encoders.core import seeds
from encoders.stages import basic
from encoders.stages import quantization

FLOAT_DTYPES = [tf.float16, tf.bfloat16, tf.float32, tf.float64]
UQ = quantization.IntegerUniformQuantizationEncodingStage
ARQ = quantization.AdaptiveRangeQuantizationEncodingStage
Bitpacking = quantization.IntegerBitpackingEncodingStage


def _wire_bits(encoded):
  """Bits on the wire: every encoded tensor at its dtype's width."""
  return sum(t.dtype.size * 8 * int(tf.size(t))
             for t in tf.nest.flatten(encoded))


def _random(shape, dtype=tf.float32, seed=0, scale=1.0):
  values = np.random.default_rng(seed).normal(size=shape) * scale
  return tf.cast(tf.constant(values, tf.float64), dtype)


def _with_seed(params, seed):
  params = dict(params)
  params['seed'] = tf.constant([0, seed], tf.int64)
  return params


def _levels_step(lo, hi, bits):
  return (hi - lo) / (2**bits - 1)


class TestArguments:

  @pytest.mark.parametrize('make', [
      lambda bits: UQ(bits=bits),
      lambda bits: ARQ(bits=bits),
      lambda bits: Bitpacking(bits),
  ])
  @pytest.mark.parametrize('bits, error', [
      (0, ValueError), (17, ValueError), (-3, ValueError), (True, TypeError),
      (2.5, TypeError), ('8', TypeError)])
  def test_bad_bits(self, make, bits, error):
    with pytest.raises(error, match=r'EncodingStage: (input_)?bits'):
      make(bits)

  def test_bad_min_max(self):
    with pytest.raises(ValueError, match='UniformQuantizationEncodingStage'):
      UQ(min_max=(1.0, 1.0))
    with pytest.raises(ValueError, match='UniformQuantizationEncodingStage'):
      UQ(min_max=(0.0, float('inf')))
    with pytest.raises(TypeError, match='UniformQuantizationEncodingStage'):
      UQ(min_max=(0.0,))

  def test_bad_adaptive_arguments(self):
    with pytest.raises(ValueError, match='initial_range'):
      ARQ(initial_range=0.0)
    with pytest.raises(ValueError, match='decay'):
      ARQ(decay=1.0)

  def test_integer_input_rejected(self):
    with pytest.raises(TypeError, match='UniformQuantization.*int32'):
      UQ().encode(tf.constant([1, 2, 3]), UQ().get_params()[0])
    stage = ARQ()
    params = stage.get_params(stage.initial_state())[0]
    with pytest.raises(TypeError, match='AdaptiveRange.*int64'):
      stage.encode(tf.constant([1, 2], tf.int64), params)

  def test_properties(self):
    assert not UQ().commutes_with_sum
    assert UQ(min_max=(-1, 1)).commutes_with_sum
    assert ARQ().commutes_with_sum
    assert not Bitpacking(8).commutes_with_sum
    assert Bitpacking(8).decode_needs_input_shape
    assert not UQ().decode_needs_input_shape
    assert UQ().compressible_tensors_keys == ['quantized_values']
    assert ARQ().state_update_aggregation_modes == {
        'max_abs': encoding_stage.StateAggregationMode.MAX}


class TestUniformQuantization:

  @pytest.mark.parametrize('dtype', FLOAT_DTYPES)
  @pytest.mark.parametrize('stochastic', [True, False])
  def test_round_trip_error_within_a_step(self, dtype, stochastic):
    stage = UQ(bits=6, stochastic=stochastic)
    x = _random([20, 10], dtype)
    encode_params, decode_params = stage.get_params()
    encoded = stage.encode(x, encode_params)
    decoded = stage.decode(encoded, decode_params)
    assert decoded.dtype == dtype and decoded.shape == x.shape
    levels = encoded['quantized_values']
    assert levels.dtype == tf.int32
    assert 0 <= int(tf.reduce_min(levels)) and int(tf.reduce_max(levels)) <= 63
    assert encoded['min'].dtype == encoded['max'].dtype == tf.float32
    x64 = tf.cast(x, tf.float64).numpy()
    step = _levels_step(x64.min(), x64.max(), 6)
    bound = (1.0 if stochastic else 0.5) * step * 1.001
    # Half-precision outputs add their own rounding of the decoded value.
    bound += np.abs(x64).max() * {tf.float16: 2**-11, tf.bfloat16: 2**-8}.get(
        dtype, 0.0)
    error = np.abs(tf.cast(decoded, tf.float64).numpy() - x64)
    assert error.max() <= bound

  def test_deterministic_rounding_is_nearest_and_exact_at_ends(self):
    stage = UQ(bits=2, stochastic=False)
    x = tf.constant([0.0, 0.9, 1.1, 1.6, 3.0])  # Levels at 0, 1, 2, 3.
    encoded = stage.encode(x, stage.get_params()[0])
    np.testing.assert_array_equal(encoded['quantized_values'].numpy(),
                                  [0, 1, 1, 2, 3])
    decoded = stage.decode(encoded, stage.get_params()[1])
    np.testing.assert_allclose(decoded.numpy(), [0.0, 1.0, 1.0, 2.0, 3.0],
                               atol=1e-6)

  def test_stochastic_rounding_is_unbiased(self):
    # 64 values at fractional level positions, each repeated 4096 times: every
    # copy gets its own dither, so the copies' mean estimates E[decode(x)].
    stage = UQ(bits=3)
    base = np.linspace(-1.0, 1.0, 64, dtype=np.float32) + np.float32(0.013)
    base[0], base[-1] = -1.0, 1.0  # Fixes the range to [-1, 1].
    copies = 4096
    x = tf.constant(np.tile(base, copies))
    encode_params, decode_params = stage.get_params()
    for seed in (0, 1):
      encoded = stage.encode(x, _with_seed(encode_params, seed))
      decoded = stage.decode(encoded, decode_params).numpy()
      errors = decoded.reshape(copies, 64) - base
      z = self._z_scores(errors)
      assert np.max(np.abs(z)) < 5.0, z
      # The same statistic catches a bias of 2% of a step.
      step = 2.0 / 7
      assert np.max(np.abs(self._z_scores(errors + 0.02 * step))) > 5.0

  @staticmethod
  def _z_scores(errors):
    mean = errors.mean(axis=0)
    standard_error = errors.std(axis=0, ddof=1) / math.sqrt(errors.shape[0])
    inner = standard_error > 0  # The range ends are exact, without noise.
    return mean[inner] / standard_error[inner]

  def test_unbiased_across_client_seeds(self):
    stage = UQ(bits=2)
    x = _random([16], seed=3)
    encode_params, decode_params = stage.get_params()
    encode = tf.function(
        lambda x, seed: stage.encode(x, {'seed': seed}))
    trials = np.stack([
        stage.decode(encode(x, tf.constant([0, s], tf.int64)),
                     decode_params).numpy() for s in range(400)])
    z = self._z_scores(trials - x.numpy())
    assert np.max(np.abs(z)) < 5.0, z

  def test_top_value_never_passes_last_level(self):
    # The headroom that replaces a clamp: the top value with the largest
    # dithers, at every width and at awkward offsets and spans.
    for bits in range(1, 17):
      stage = UQ(bits=bits)
      for lo, hi in ((0.0, 1.0), (1e6, 1e6 + 3.0), (-3e-3, 7e-3)):
        lo32, hi32 = np.float32(lo), np.float32(hi)
        x = np.tile(np.array([lo32, hi32, np.nextafter(hi32, lo32)]), 20000)
        levels = stage.encode(tf.constant(x), stage.get_params()[0])
        levels = levels['quantized_values'].numpy()
        assert levels.min() == 0 and levels.max() == 2**bits - 1, (bits, lo)

  def test_same_input_same_bits_and_clients_differ_in_a_form(self):
    with seeds.pure_randomness():
      self._same_input_same_bits_and_clients_differ()

  def _same_input_same_bits_and_clients_differ(self):
    stage = UQ(bits=4)
    encode_params, _ = stage.get_params()
    x = _random([500], seed=1)
    first = stage.encode(x, encode_params)['quantized_values'].numpy()
    again = tf.function(lambda x: stage.encode(x, encode_params))(x)
    np.testing.assert_array_equal(again['quantized_values'].numpy(), first)
    # Another client: same values but one, so the same levels would be chosen
    # by deterministic rounding; the dither differs, so many roundings differ.
    other_x = tf.tensor_scatter_nd_update(x, [[7]], [0.0])
    other = stage.encode(other_x, encode_params)['quantized_values'].numpy()
    assert np.mean(other != first) > 0.1
    reseeded = stage.encode(x, _with_seed(encode_params, 9))
    assert np.mean(reseeded['quantized_values'].numpy() != first) > 0.1

  def test_constant_input_is_exact_without_nan(self):
    for stochastic in (True, False):
      stage = UQ(bits=8, stochastic=stochastic)
      x = tf.fill([5, 3], 2.5)
      encoded = stage.encode(x, stage.get_params()[0])
      decoded = stage.decode(encoded, stage.get_params()[1])
      np.testing.assert_array_equal(decoded.numpy(), x.numpy())

  @pytest.mark.parametrize('shape', [[], [0], [0, 4], [1]])
  def test_scalar_and_empty(self, shape):
    stage = UQ(bits=5)
    x = _random(shape)
    encoded = stage.encode(x, stage.get_params()[0])
    decoded = stage.decode(encoded, stage.get_params()[1])
    assert decoded.shape == shape
    assert np.all(np.isfinite(encoded['min'].numpy()))
    np.testing.assert_allclose(decoded.numpy(), x.numpy(), atol=1e-6)

  def test_dynamic_shape(self):
    stage = UQ(bits=8)
    encode_params, decode_params = stage.get_params()

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32)])
    def round_trip(x):
      return stage.decode(stage.encode(x, encode_params), decode_params)

    for shape in ([3, 7], [0, 2], [1, 1]):
      x = _random(shape)
      decoded = round_trip(x)
      assert decoded.shape == shape
      if x.shape.num_elements():
        assert np.abs(decoded.numpy() - x.numpy()).max() <= _levels_step(
            x.numpy().min(), x.numpy().max(), 8) * 1.001

  def test_separate_traces(self):
    encoder, decoder = UQ(bits=4), UQ(bits=4)
    encode_params = encoder.get_params()[0]
    decode_params = decoder.get_params()[1]
    x = _random([6, 5], tf.float16)
    encoded = tf.function(lambda x: encoder.encode(x, encode_params))(x)
    decoded = tf.function(lambda e: decoder.decode(e, decode_params))(encoded)
    assert decoded.dtype == tf.float16
    x64 = tf.cast(x, tf.float64).numpy()
    error = np.abs(tf.cast(decoded, tf.float64).numpy() - x64).max()
    assert error <= _levels_step(x64.min(), x64.max(), 4) * 1.01

  def test_fixed_range_clips_sends_no_range_and_commutes_with_sum(self):
    stage = UQ(bits=8, min_max=(-1.0, 1.0))
    encode_params, decode_params = stage.get_params()
    xs = [_random([40], seed=s, scale=0.6) for s in range(4)]
    encoded = [stage.encode(x, _with_seed(encode_params, s))
               for s, x in enumerate(xs)]
    assert sorted(encoded[0]) == ['dtype_tag', 'quantized_values']
    assert _wire_bits(encoded[0]) == 40 * 32
    summed = {key: tf.add_n([e[key] for e in encoded]) for key in encoded[0]}
    decoded_sum = stage.decode(summed, decode_params, num_summands=4)
    sum_of_decoded = tf.add_n([stage.decode(e, decode_params) for e in encoded])
    np.testing.assert_allclose(decoded_sum.numpy(), sum_of_decoded.numpy(),
                               atol=1e-5)
    clipped = stage.decode(stage.encode(tf.constant([-5.0, 5.0]),
                                        encode_params), decode_params)
    np.testing.assert_allclose(clipped.numpy(), [-1.0, 1.0], atol=1e-4)


class TestBitpacking:

  @pytest.mark.parametrize('bits', list(range(1, 17)))
  def test_exact_round_trip_and_dense_size(self, bits):
    stage = Bitpacking(bits)
    rng = np.random.default_rng(bits)
    for n in (0, 1, 7, 9, 1001, 4099):
      values = rng.integers(0, 2**bits, n).astype(np.int32)
      if n >= 2:
        values[:2] = [0, 2**bits - 1]
      encoded = stage.encode(tf.constant(values), {})
      packed = encoded['bitpacked_values']
      assert packed.dtype == (tf.uint16 if bits == 16 else tf.uint8)
      assert _wire_bits(encoded) == 8 * math.ceil(n * bits / 8)
      decoded = stage.decode(encoded, {}, shape=[n])
      assert decoded.dtype == tf.int32
      np.testing.assert_array_equal(decoded.numpy(), values)

  @pytest.mark.parametrize('bits', [1, 3, 8, 12])
  def test_dynamic_length_separate_traces(self, bits):
    encoder, decoder = Bitpacking(bits), Bitpacking(bits)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32)])
    def encode(x):
      return encoder.encode(x, {}), tf.shape(x)

    @tf.function
    def decode(encoded, shape):
      return decoder.decode(encoded, {}, shape=shape)

    rng = np.random.default_rng(0)
    for n in (0, 5, 333):
      values = rng.integers(0, 2**bits, n).astype(np.int32)
      np.testing.assert_array_equal(decode(*encode(values)).numpy(), values)

  def test_bad_inputs(self):
    stage = Bitpacking(4)
    with pytest.raises(ValueError, match='Bitpacking.*rank 1.*Flatten'):
      stage.encode(tf.zeros([2, 3], tf.int32), {})
    with pytest.raises(ValueError, match='Bitpacking.*rank 1'):
      stage.encode(tf.constant(3), {})
    with pytest.raises(TypeError, match='Bitpacking.*int32.*float32'):
      stage.encode(tf.zeros([3]), {})
    with pytest.raises(TypeError, match='Bitpacking.*int64'):
      stage.encode(tf.zeros([3], tf.int64), {})
    with pytest.raises(ValueError, match=r'Bitpacking.*\[0, 16\)'):
      stage.encode(tf.constant([1, 16]), {})
    with pytest.raises(ValueError, match=r'Bitpacking.*\[0, 16\)'):
      stage.encode(tf.constant([-1, 3]), {})
    with pytest.raises(ValueError, match='Bitpacking.*shape'):
      stage.decode(stage.encode(tf.constant([1, 2]), {}), {})
    with pytest.raises(ValueError, match='Bitpacking.*5 values.*3 words'):
      stage.decode(stage.encode(tf.constant([1, 2]), {}), {}, shape=[5])

  def test_run_time_value_check_when_asked(self):
    stage = Bitpacking(3, check_values=True)
    encode = tf.function(lambda x: stage.encode(x, {}),
                         input_signature=[tf.TensorSpec([None], tf.int32)])
    assert tf.size(encode(tf.constant([0, 7, 3]))['bitpacked_values']) == 2
    with pytest.raises(tf.errors.InvalidArgumentError, match=r'\[0, 8\)'):
      encode(tf.constant([0, 8, 3]))


def _flatten_quantize_pack(bits):
  """Flatten -> UniformQuantization -> Bitpacking, composed by hand."""
  flatten, quantize, pack = basic.FlattenEncodingStage(), UQ(bits), Bitpacking(
      bits)
  encode_params, decode_params = quantize.get_params()

  def encode(x):
    flat = flatten.encode(x, {})['flattened_values']
    encoded = dict(quantize.encode(flat, encode_params))
    levels = encoded.pop('quantized_values')
    encoded.update(pack.encode(levels, {}))
    return encoded, tf.shape(x), tf.shape(levels)

  def decode(encoded, shape, levels_shape):
    encoded = dict(encoded)
    encoded['quantized_values'] = pack.decode(
        {'bitpacked_values': encoded.pop('bitpacked_values')}, {},
        shape=levels_shape)
    flat = quantize.decode(encoded, decode_params)
    return flatten.decode({'flattened_values': flat}, {}, shape=shape)

  return encode, decode


def test_eight_bit_pipeline_costs_at_most_8_05_bits_per_coordinate():
  n = 10**6
  encode, decode = _flatten_quantize_pack(8)
  x = _random([1000, 1000], seed=5)
  encoded, shape, levels_shape = tf.function(encode)(x)
  bits_per_coordinate = _wire_bits(encoded) / n
  assert bits_per_coordinate <= 8.05
  assert bits_per_coordinate == 8 + 64 / n  # The bytes, plus min and max.
  decoded = tf.function(decode)(encoded, shape, levels_shape)
  step = _levels_step(x.numpy().min(), x.numpy().max(), 8)
  assert np.abs(decoded.numpy() - x.numpy()).max() <= step * 1.001


@pytest.mark.parametrize('bits', [2, 8])
def test_pipeline_throughput_sanity(bits):
  """Prints encode+decode MB/s (noisy shared machine: printed, not asserted)."""
  n = 10**6
  encode, decode = _flatten_quantize_pack(bits)
  round_trip = tf.function(lambda x: decode(*encode(x)))
  x = _random([n], seed=2)
  decoded = round_trip(x)
  times = []
  for _ in range(5):
    start = time.perf_counter()
    decoded = round_trip(x)
    times.append(time.perf_counter() - start)
  print(f'\nFlatten+UniformQuantization({bits})+Bitpacking({bits}) at n={n}: '
        f'{4 * n / np.median(times) / 1e6:.0f} MB/s encode+decode')
  step = _levels_step(x.numpy().min(), x.numpy().max(), bits)
  assert np.abs(decoded.numpy() - x.numpy()).max() <= step * 1.001


class TestAdaptiveRangeQuantization:

  def _round(self, stage, state, xs, seed_offset=0):
    """One round: every client encodes; the server sums levels, decodes once."""
    encode_params, decode_params = stage.get_params(state)
    encoded, updates = [], []
    for i, x in enumerate(xs):
      e, u = stage.encode(x, _with_seed(encode_params, seed_offset + i))
      encoded.append(e)
      updates.append(u)
    reported = {'max_abs': tf.reduce_max(tf.stack(
        [u['max_abs'] for u in updates]))}
    summed = {key: tf.add_n([e[key] for e in encoded]) for key in encoded[0]}
    decoded_sum = stage.decode(summed, decode_params, num_summands=len(xs))
    decoded = [stage.decode(e, decode_params) for e in encoded]
    return stage.update_state(state, reported), decoded_sum, decoded

  def test_range_follows_the_data(self):
    stage = ARQ(bits=8, initial_range=1.0, decay=0.5)
    state = stage.initial_state()
    ranges, targets = [], []
    for round_num, scale in enumerate([10.0] * 6 + [0.1] * 12):
      xs = [_random([50], seed=10 * round_num + c, scale=scale)
            for c in range(3)]
      targets.append(max(float(tf.reduce_max(tf.abs(x))) for x in xs))
      state, _, _ = self._round(stage, state, xs)
      ranges.append(float(state['range']))
    # Each update halves the distance to the clients' largest |x|.
    assert ranges[0] == pytest.approx(0.5 * 1.0 + 0.5 * targets[0], rel=1e-6)
    for previous, current, target in zip(ranges, ranges[1:], targets[1:]):
      assert current == pytest.approx(0.5 * previous + 0.5 * target, rel=1e-6)
    assert ranges[5] > 0.9 * min(targets[:6])  # Grew to the large data...
    assert ranges[-1] < 1.05 * max(targets[6:])  # ...and shrank back.

  def test_decoding_a_sum_equals_sum_of_decodings(self):
    stage = ARQ(bits=6, initial_range=2.0)
    state = stage.initial_state()
    xs = [_random([30], seed=s) for s in range(5)]
    _, decoded_sum, decoded = self._round(stage, state, xs)
    np.testing.assert_allclose(decoded_sum.numpy(), tf.add_n(decoded).numpy(),
                               atol=1e-5)
    # Inside the range, each decoding is within a step of its input.
    step = 4.0 / 63
    for x, d in zip(xs, decoded):
      inside = np.abs(x.numpy()) <= 2.0
      assert np.abs(d.numpy() - x.numpy())[inside].max() <= step * 1.001
      np.testing.assert_array_less(np.abs(d.numpy()), 2.0 + 1e-4)

  def test_sends_only_levels(self):
    stage = ARQ(bits=8)
    encoded, update = stage.encode(_random([100]),
                                   stage.get_params(stage.initial_state())[0])
    assert _wire_bits(encoded) == 100 * 32  # int32 levels; bitpack them.
    assert update['max_abs'].shape == []

  def test_range_never_reaches_zero(self):
    stage = ARQ(initial_range=1.0, decay=0.0)
    state = stage.update_state(stage.initial_state(),
                               {'max_abs': tf.constant(0.0)})
    assert float(state['range']) > 0
    params = stage.get_params(state)
    encoded, _ = stage.encode(tf.zeros([4]), params[0])
    decoded = stage.decode(encoded, params[1])
    assert np.all(np.isfinite(decoded.numpy()))
    np.testing.assert_allclose(decoded.numpy(), 0.0, atol=1e-19)

  @pytest.mark.parametrize('dtype', FLOAT_DTYPES)
  def test_dtypes_and_separate_traces(self, dtype):
    encoder, decoder = ARQ(bits=8), ARQ(bits=8)
    encode_params = encoder.get_params(encoder.initial_state())[0]
    decode_params = decoder.get_params(decoder.initial_state())[1]
    x = _random([4, 4], dtype, scale=0.3)
    encoded, _ = tf.function(lambda x: encoder.encode(x, encode_params))(x)
    decoded = tf.function(lambda e: decoder.decode(e, decode_params))(encoded)
    assert decoded.dtype == dtype and decoded.shape == [4, 4]
    error = np.abs(tf.cast(decoded, tf.float64).numpy() -
                   tf.cast(x, tf.float64).numpy()).max()
    assert error <= 2.0 / 255 * 1.01 + 0.3 * 4 * 2**-8

  def test_scalar_empty_and_dynamic(self):
    stage = ARQ(bits=4)
    encode_params, decode_params = stage.get_params(stage.initial_state())
    round_trip = tf.function(
        lambda x: stage.decode(stage.encode(x, encode_params)[0],
                               decode_params),
        input_signature=[tf.TensorSpec(None, tf.float32)])
    for x in (tf.constant(0.25), tf.zeros([0]), _random([3, 2], scale=0.2)):
      decoded = round_trip(x)
      assert decoded.shape == x.shape
      np.testing.assert_allclose(decoded.numpy(), x.numpy(), atol=2.0 / 15)
