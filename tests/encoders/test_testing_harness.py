"""The public stage harness: passes correct toy stages, catches broken ones."""

import numpy as np
import pytest
import tensorflow as tf

import encoders.core as te_core
from encoders.core import seeds
from encoders import testing

# ---------------------------------------------------------------------------
# Correct toy stages.


@te_core.tf_style_encoding_stage
class IdentityStage(te_core.EncodingStageInterface):
  """Sends x as it is."""

  name = 'identity'
  compressible_tensors_keys = ['values']
  commutes_with_sum = True
  decode_needs_input_shape = False

  def get_params(self):
    return {}, {}

  def encode(self, x, encode_params):
    return {'values': tf.identity(x)}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    return tf.identity(encoded_tensors['values'])


@te_core.tf_style_encoding_stage
class TimesTwoStage(te_core.EncodingStageInterface):
  """Lossless (a power of two scales exactly) and linear."""

  name = 'times_two'
  compressible_tensors_keys = ['values']
  commutes_with_sum = True
  decode_needs_input_shape = False

  def get_params(self):
    return {'factor': 2.0}, {'factor': 2.0}

  def encode(self, x, encode_params):
    return {'values': x * tf.cast(encode_params['factor'], x.dtype)}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    values = encoded_tensors['values']
    return values / tf.cast(decode_params['factor'], values.dtype)


@te_core.tf_style_encoding_stage
class StochasticRoundingStage(te_core.EncodingStageInterface):
  """Rounds x/step up or down at random, unbiased; noise per client and seed.

  `noise_offset` shifts the rounding noise: anything but 0 makes it biased.
  """

  def __init__(self, step=0.25, seed=0, noise_offset=0.0):
    self._step = step
    self._seed = seed
    self._noise_offset = noise_offset

  name = 'stochastic_rounding'
  compressible_tensors_keys = ['values']
  commutes_with_sum = True
  decode_needs_input_shape = False

  def get_params(self):
    return ({'seed': seeds.initial_seed(self._seed), 'step': self._step},
            {'step': self._step})

  def encode(self, x, encode_params):
    noise = tf.random.stateless_uniform(
        tf.shape(x), seed=seeds.client_seed(encode_params['seed'], x))
    step = tf.cast(encode_params['step'], tf.float32)
    scaled = tf.cast(x, tf.float32) / step
    rounded = tf.floor(scaled + noise + self._noise_offset)
    return {'values': tf.cast(rounded, x.dtype)}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    values = encoded_tensors['values']
    return values * tf.cast(decode_params['step'], values.dtype)


@te_core.tf_style_adaptive_encoding_stage
class RandomSignsStage(te_core.AdaptiveEncodingStageInterface):
  """Flips signs by a shared seed that changes every round: lossless, linear."""

  def __init__(self, seed=0):
    self._seed = seed

  name = 'random_signs'
  compressible_tensors_keys = ['values']
  commutes_with_sum = True
  decode_needs_input_shape = False
  state_update_aggregation_modes = {}

  def initial_state(self):
    return {'seed': seeds.initial_seed(self._seed)}

  def update_state(self, state, state_update_tensors):
    return {'seed': seeds.next_seed(state['seed'])}

  def get_params(self, state):
    return {'seed': state['seed']}, {'seed': state['seed']}

  def _signs(self, like, seed):
    bits = tf.random.stateless_uniform(tf.shape(like), seed=seed) < 0.5
    return tf.where(bits, tf.ones_like(like), -tf.ones_like(like))

  def encode(self, x, encode_params):
    return {'values': x * self._signs(x, encode_params['seed'])}, {}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    values = encoded_tensors['values']
    return values * self._signs(values, decode_params['seed'])


@te_core.tf_style_adaptive_encoding_stage
class AdaptiveRoundingStage(te_core.AdaptiveEncodingStageInterface):
  """Stochastic rounding to int16 on a scale learnt from last round's max |x|.

  The rounding noise comes from the data fingerprint alone. The empty
  `dtype` tensor tells decode the input dtype at no cost on the wire.
  """

  name = 'adaptive_rounding'
  compressible_tensors_keys = ['values']
  commutes_with_sum = False
  decode_needs_input_shape = False
  state_update_aggregation_modes = {
      'max_abs': te_core.StateAggregationMode.MAX}

  def initial_state(self):
    return {'scale': tf.constant(1.0)}

  def update_state(self, state, state_update_tensors):
    return {'scale': tf.maximum(state_update_tensors['max_abs'], 1e-6)}

  def get_params(self, state):
    return {'scale': state['scale']}, {'scale': state['scale']}

  def encode(self, x, encode_params):
    x32 = tf.cast(x, tf.float32)
    noise = tf.random.stateless_uniform(
        tf.shape(x), seed=seeds.client_seed(seeds.initial_seed(0), x))
    levels = x32 / encode_params['scale'] * 127.0
    values = tf.cast(tf.floor(levels + noise), tf.int16)
    max_abs = tf.maximum(tf.reduce_max(tf.abs(x32)), 0.0)
    return ({'values': values, 'dtype': tf.zeros([0], x.dtype)},
            {'max_abs': max_abs})

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    levels = tf.cast(encoded_tensors['values'], tf.float32)
    y = levels * (decode_params['scale'] / 127.0)
    return tf.cast(y, encoded_tensors['dtype'].dtype)


@te_core.tf_style_encoding_stage
class TopKEncodingStage(te_core.EncodingStageInterface):
  """Keeps the k largest-magnitude values: written as for tensor_encoding."""

  VALUES_KEY = 'top_k_values'
  INDICES_KEY = 'top_k_indices'

  def __init__(self, k):
    self._k = k

  @property
  def name(self):
    return 'top_k'

  @property
  def compressible_tensors_keys(self):
    return [self.VALUES_KEY]

  @property
  def commutes_with_sum(self):
    return False

  @property
  def decode_needs_input_shape(self):
    return True

  def get_params(self):
    return {}, {}

  def encode(self, x, encode_params):
    flat = tf.reshape(x, [-1])
    k = tf.minimum(self._k, tf.size(flat))
    _, indices = tf.math.top_k(tf.abs(flat), k=k)
    return {self.VALUES_KEY: tf.gather(flat, indices),
            self.INDICES_KEY: indices}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    values = encoded_tensors[self.VALUES_KEY]
    indices = encoded_tensors[self.INDICES_KEY]
    flat = tf.scatter_nd(indices[:, None], values, [tf.reduce_prod(shape)])
    return tf.reshape(flat, shape)


@te_core.tf_style_encoding_stage
class NoHalfStage(IdentityStage):
  """Rejects float16 clearly."""

  name = 'no_half'

  def encode(self, x, encode_params):
    if x.dtype == tf.float16:
      raise TypeError(f'NoHalfStage: float16 inputs are not supported, got '
                      f'{x.dtype.name}')
    return {'values': tf.identity(x)}


@te_core.tf_style_encoding_stage
class StaticShapeOnlyStage(IdentityStage):
  """Rejects unknown dims clearly."""

  name = 'static_shape_only'

  def encode(self, x, encode_params):
    if not x.shape.is_fully_defined():
      raise ValueError(f'StaticShapeOnlyStage: needs a static shape, got '
                       f'{x.shape}')
    return {'values': tf.identity(x)}


# ---------------------------------------------------------------------------
# Broken stages.


@te_core.tf_style_encoding_stage
class MissingKeyStage(IdentityStage):
  """Names a compressible key that encode never returns."""

  name = 'missing_key'
  compressible_tensors_keys = ['values', 'scale']


@te_core.tf_style_encoding_stage
class PlusOneClaimingCommuteStage(te_core.EncodingStageInterface):
  """Adds one but says it commutes with sum: the sum decodes n - 1 too high."""

  name = 'plus_one'
  compressible_tensors_keys = ['values']
  commutes_with_sum = True
  decode_needs_input_shape = False

  def get_params(self):
    return {}, {}

  def encode(self, x, encode_params):
    return {'values': x + 1}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    return encoded_tensors['values'] - 1


@te_core.tf_style_encoding_stage
class LeakyScaleStage(te_core.EncodingStageInterface):
  """Keeps the scale on `self` in encode and reads it back in decode."""

  name = 'leaky_scale'
  compressible_tensors_keys = ['values']
  commutes_with_sum = False
  decode_needs_input_shape = False

  def get_params(self):
    return {}, {}

  def encode(self, x, encode_params):
    self._scale = tf.reduce_max(tf.abs(x)) + 1
    return {'values': x / self._scale}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    return encoded_tensors['values'] * self._scale


@te_core.tf_style_encoding_stage
class DtypeOnSelfStage(IdentityStage):
  """Remembers the input dtype on `self` for decode: the last one encoded."""

  name = 'dtype_on_self'

  def encode(self, x, encode_params):
    self._dtype = x.dtype
    return {'values': tf.cast(x, tf.float32)}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    return tf.cast(encoded_tensors['values'], self._dtype)


@te_core.tf_style_encoding_stage
class Float32DecodeStage(IdentityStage):
  """Always decodes to float32."""

  name = 'float32_decode'

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    return tf.cast(encoded_tensors['values'], tf.float32)


@te_core.tf_style_encoding_stage
class StatefulRandomStage(StochasticRoundingStage):
  """Stochastic rounding with a stateful random op: differs on every call."""

  name = 'stateful_random'

  def encode(self, x, encode_params):
    noise = tf.random.uniform(tf.shape(x))
    rounded = tf.floor(tf.cast(x, tf.float32) / self._step + noise)
    return {'values': tf.cast(rounded, x.dtype)}


@te_core.tf_style_encoding_stage
class HalfPrecisionStage(IdentityStage):
  """Sends float16: lossy, though it may be claimed lossless."""

  name = 'half_precision'
  commutes_with_sum = False  # Sums of float16 values round differently.

  def encode(self, x, encode_params):
    return {'values': tf.cast(x, tf.float16),
            'dtype': tf.zeros([0], x.dtype)}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    return tf.cast(encoded_tensors['values'], encoded_tensors['dtype'].dtype)


@te_core.tf_style_encoding_stage
class FirstElementScaleStage(IdentityStage):
  """Divides by x[0]: an empty input hits a raw TF indexing error."""

  name = 'first_element_scale'
  commutes_with_sum = False

  def encode(self, x, encode_params):
    flat = tf.reshape(x, [-1])
    scale = tf.abs(flat[0]) + 1
    return {'values': x / scale, 'scale': scale}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    return encoded_tensors['values'] * encoded_tensors['scale']


# ---------------------------------------------------------------------------
# Correct stages pass.


CORRECT_STAGES = [
    (IdentityStage(), dict(lossless=True)),
    (TimesTwoStage(), dict(lossless=True)),
    (RandomSignsStage(seed=3), dict(lossless=True)),
    (StochasticRoundingStage(), dict(unbiased=True, max_relative_error=0.15)),
    (AdaptiveRoundingStage(), dict(unbiased=True, max_relative_error=0.1)),
    (TopKEncodingStage(k=10), dict(max_relative_error=0.9)),
]


@pytest.mark.parametrize('stage, claims', CORRECT_STAGES,
                         ids=[stage.name for stage, _ in CORRECT_STAGES])
def test_correct_stages_pass(stage, claims):
  report = testing.check_stage(stage, **claims)
  errors = report['round_trip'].values()
  if claims.get('lossless'):
    assert all(e == 0.0 for e in errors)
  else:
    assert all(0.0 < e <= claims['max_relative_error'] for e in errors)
  assert set(report['dtypes']) == {'float16', 'bfloat16', 'float32', 'float64'}
  assert set(report['scalar_empty_dynamic']) == {
      'scalar eager', 'scalar traced', '0 eager', '0 traced', '4x0 eager',
      '4x0 traced', '37 dynamic', '5x11 dynamic'}
  assert ('commutes_with_sum' in report) == stage.commutes_with_sum
  assert ('unbiased' in report) == bool(claims.get('unbiased'))


def test_unbiased_stage_passes_for_several_seeds():
  for seed in (1, 2, 3):
    result = testing.check_unbiased(StochasticRoundingStage(step=0.5),
                                    seed=seed)
    assert result['max_z_along_directions'] < 6.0


def test_unbiased_check_reports_statistics():
  result = testing.check_unbiased(StochasticRoundingStage(), num_trials=50)
  assert result['num_trials'] == 50
  assert 0.0 < result['max_z_per_coordinate'] < 6.0


def test_round_trip_returns_relative_error():
  error = testing.check_round_trip(StochasticRoundingStage(step=0.5))
  x = testing.make_input(testing.DEFAULT_SHAPES[0])
  # Stochastic rounding errs by at most one step per element.
  assert 0.0 < error <= 0.5 * np.sqrt(x.shape[0]) / np.linalg.norm(x)


def test_clear_dtype_rejection_is_reported_not_failed():
  results = testing.check_dtypes(NoHalfStage())
  assert results['float16'].startswith('rejected: NoHalfStage: float16')
  assert results['float32'] == 0.0


def test_clear_rejection_of_unknown_dims_is_reported_not_failed():
  results = testing.check_scalar_empty_dynamic(StaticShapeOnlyStage())
  assert results['37 dynamic'].startswith(
      'rejected: StaticShapeOnlyStage: needs a static shape')
  assert results['scalar traced'] == 0.0


def test_structure_check_catches_missing_compressible_key():
  with pytest.raises(AssertionError,
                     match=r"compressible_tensors_keys \['scale'\] are not "
                     r"among the encoded keys \['values'\]"):
    testing.check_structure(MissingKeyStage())


def test_checks_accept_stage_variants_and_options():
  report = testing.check_stage(TimesTwoStage(), lossless=True,
                               shapes=[(2, 3, 4)], dtypes=[tf.float64],
                               skip=['scalar_empty_dynamic'])
  assert list(report['round_trip']) == ['2x3x4']
  assert list(report['dtypes']) == ['float64']
  assert 'scalar_empty_dynamic' not in report


def test_bad_harness_arguments_raise_value_error():
  with pytest.raises(ValueError, match='unknown checks in skip'):
    testing.check_stage(IdentityStage(), skip=['nonsense'])
  with pytest.raises(ValueError, match='num_trials'):
    testing.check_unbiased(StochasticRoundingStage(), num_trials=2)


# ---------------------------------------------------------------------------
# Broken stages fail, with a message naming stage, check and input.


def test_false_commutes_with_sum_claim_fails():
  with pytest.raises(AssertionError) as info:
    testing.check_commutes_with_sum(PlusOneClaimingCommuteStage())
  message = str(info.value)
  assert "PlusOneClaimingCommuteStage (name 'plus_one')" in message
  assert 'commutes_with_sum failed for float32 input of shape (37,)' in message
  assert 'differ by up to 2 ' in message  # 3 summands: n - 1 too high.


def test_false_commutes_with_sum_claim_fails_check_stage():
  with pytest.raises(AssertionError,
                     match=r'(?s)^1 check.*commutes_with_sum failed'):
    testing.check_stage(PlusOneClaimingCommuteStage(), shapes=[(7,)])


@pytest.mark.parametrize('noise_offset', [0.15, -0.5])
def test_biased_stage_fails_unbiased_check(noise_offset):
  stage = StochasticRoundingStage(noise_offset=noise_offset)
  with pytest.raises(AssertionError) as info:
    testing.check_unbiased(stage)
  message = str(info.value)
  assert 'StochasticRoundingStage' in message
  assert ('unbiased failed for float32 input of shape (6, 11), 200 trials'
          in message)
  assert 'z=' in message


def test_small_bias_fails_along_a_direction():
  # 0.05 of a step is invisible per coordinate but not summed over 66 of them.
  stage = StochasticRoundingStage(noise_offset=0.05)
  with pytest.raises(AssertionError, match='all-ones direction'):
    testing.check_unbiased(stage)


def test_decode_reading_a_tensor_kept_from_encode_fails():
  with pytest.raises(AssertionError) as info:
    testing.check_separate_traces(LeakyScaleStage())
  message = str(info.value)
  assert ("LeakyScaleStage (name 'leaky_scale'): separate traces failed for "
          'float32 input of shape (37,): encode and decode in separate '
          'tf.functions raised') in message
  with pytest.raises(AssertionError, match='separate traces failed'):
    testing.check_stage(LeakyScaleStage(), shapes=[(5,)])


def test_decode_reading_a_python_value_kept_from_encode_fails():
  with pytest.raises(AssertionError) as info:
    testing.check_separate_traces(DtypeOnSelfStage())
  message = str(info.value)
  assert ('traced decode of one encoded value changed after other inputs were '
          'encoded (decode depends on state kept from encode): float32(37,) vs '
          'float64(37,)') in message


def test_dtype_changing_stage_fails():
  with pytest.raises(AssertionError) as info:
    testing.check_shape_and_dtype(Float32DecodeStage(), dtype=tf.float64)
  assert ('shape and dtype failed for float64 input of shape (37,): inside '
          'tf.function: decode returned dtype float32 for a float64 input'
          in str(info.value))
  with pytest.raises(AssertionError, match='dtypes failed for float16'):
    testing.check_stage(Float32DecodeStage(), lossless=True)


def test_nondeterministic_stage_fails():
  with pytest.raises(AssertionError) as info:
    testing.check_deterministic(StatefulRandomStage())
  message = str(info.value)
  assert ("StatefulRandomStage (name 'stateful_random'): deterministic"
          in message)
  assert "different encoded tensors under key 'values'" in message
  assert 'first difference at (' in message


def test_false_lossless_claim_fails():
  with pytest.raises(AssertionError) as info:
    testing.check_round_trip(HalfPrecisionStage(), lossless=True)
  message = str(info.value)
  assert 'round trip failed for float32 input of shape (37,)' in message
  assert 'claimed lossless but decoded and input differ' in message
  # Honest about being lossy, with a fitting bound, it passes.
  testing.check_stage(HalfPrecisionStage(), max_relative_error=1e-3)


def test_max_relative_error_is_enforced():
  with pytest.raises(AssertionError, match='exceeds max_relative_error 0.01'):
    testing.check_round_trip(TopKEncodingStage(k=10), max_relative_error=0.01)


def test_raw_tf_error_on_empty_input_fails():
  with pytest.raises(AssertionError) as info:
    testing.check_scalar_empty_dynamic(FirstElementScaleStage())
  message = str(info.value)
  assert 'float32 input of shape (0,) (eager)' in message
  assert 'expected it to work or to raise a ValueError/TypeError' in message


def test_check_stage_lists_every_failure():
  with pytest.raises(AssertionError) as info:
    testing.check_stage(StatefulRandomStage(), lossless=True, shapes=[(9,)])
  message = str(info.value)
  assert message.startswith('5 check(s) failed for StatefulRandomStage')
  for check in ('round trip', 'separate traces', 'deterministic', 'dtypes',
                'scalar/empty/dynamic'):
    assert f'{check} failed' in message
