"""Small example encoding stages, each showing one part of the stage interfaces.

tensor_encoding's `test_utils` holds these; the encoders' own tests build
encoder trees from them, and stage tests written for tensor_encoding name them
as `test_utils.PlusOneEncodingStage` etc., which `test_utils` re-exports. They
live apart from `BaseEncodingStageTest`, which needs none of them.
"""

import numpy as np
import tensorflow as tf

from encoders.core import encoding_stage


@encoding_stage.tf_style_encoding_stage
class PlusOneEncodingStage(encoding_stage.EncodingStageInterface):
  """Example: adds one. The smallest stage: no state, no shape, no sum."""

  ENCODED_VALUES_KEY = 'plus_one_values'
  ADD_PARAM_KEY = 'plus_one_addend'

  @property
  def name(self):
    return 'plus_one'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_VALUES_KEY]

  @property
  def commutes_with_sum(self):
    return False

  @property
  def decode_needs_input_shape(self):
    return False

  def get_params(self):
    params = {self.ADD_PARAM_KEY: tf.constant(1.0)}
    return params, params

  def encode(self, x, encode_params):
    return {self.ENCODED_VALUES_KEY: x + encode_params[self.ADD_PARAM_KEY]}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del num_summands, shape  # Not needed to undo an addition.
    return (encoded_tensors[self.ENCODED_VALUES_KEY] -
            decode_params[self.ADD_PARAM_KEY])


@encoding_stage.tf_style_encoding_stage
class TimesTwoEncodingStage(encoding_stage.EncodingStageInterface):
  """Example: doubles. Linear, so it commutes with sum."""

  ENCODED_VALUES_KEY = 'times_two_values'
  FACTOR_PARAM_KEY = 'times_two_factor'

  @property
  def name(self):
    return 'times_two'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_VALUES_KEY]

  @property
  def commutes_with_sum(self):
    return True

  @property
  def decode_needs_input_shape(self):
    return False

  def get_params(self):
    params = {self.FACTOR_PARAM_KEY: tf.constant(2.0)}
    return params, params

  def encode(self, x, encode_params):
    return {self.ENCODED_VALUES_KEY: x * encode_params[self.FACTOR_PARAM_KEY]}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del num_summands, shape  # Scaling back is the same for a sum.
    return (encoded_tensors[self.ENCODED_VALUES_KEY] /
            decode_params[self.FACTOR_PARAM_KEY])


@encoding_stage.tf_style_encoding_stage
class SimpleLinearEncodingStage(encoding_stage.EncodingStageInterface):
  """Example: `a * x + b`, with `a` and `b` from the constructor.

  `a` and `b` may be Python numbers or `tf.Variable`s; they reach `encode` and
  `decode` through the params. Undoing a sum of `n` encodings subtracts
  `n * b`, so this stage needs `num_summands`.
  """

  ENCODED_VALUES_KEY = 'linear_values'
  A_PARAM_KEY = 'linear_a'
  B_PARAM_KEY = 'linear_b'

  def __init__(self, a, b):
    self._a = a
    self._b = b

  @property
  def name(self):
    return 'simple_linear'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_VALUES_KEY]

  @property
  def commutes_with_sum(self):
    return True

  @property
  def decode_needs_input_shape(self):
    return False

  def get_params(self):
    params = {self.A_PARAM_KEY: self._a, self.B_PARAM_KEY: self._b}
    return params, params

  def encode(self, x, encode_params):
    a = encode_params[self.A_PARAM_KEY]
    b = encode_params[self.B_PARAM_KEY]
    return {self.ENCODED_VALUES_KEY: a * x + b}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del shape  # Element-wise.
    a = decode_params[self.A_PARAM_KEY]
    b = decode_params[self.B_PARAM_KEY]
    if num_summands is not None:
      b = b * tf.cast(num_summands, b.dtype)
    return (encoded_tensors[self.ENCODED_VALUES_KEY] - b) / a


@encoding_stage.tf_style_encoding_stage
class ReduceMeanEncodingStage(encoding_stage.EncodingStageInterface):
  """Example: keeps only the mean, so decoding needs the input's shape.

  The shape is not part of the encoding: the encoder around the stage keeps it
  and passes it to `decode`.
  """

  ENCODED_VALUES_KEY = 'mean_values'

  @property
  def name(self):
    return 'reduce_mean'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_VALUES_KEY]

  @property
  def commutes_with_sum(self):
    return True

  @property
  def decode_needs_input_shape(self):
    return True

  def get_params(self):
    return {}, {}

  def encode(self, x, encode_params):
    del encode_params  # No params.
    # One element per input dimension, so decoding is a broadcast.
    return {self.ENCODED_VALUES_KEY: tf.reduce_mean(x, keepdims=True)}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del decode_params, num_summands  # A sum of means spreads like a mean.
    return tf.broadcast_to(encoded_tensors[self.ENCODED_VALUES_KEY], shape)


@encoding_stage.tf_style_encoding_stage
class RandomAddSubtractOneEncodingStage(encoding_stage.EncodingStageInterface):
  """Example: adds +1 or -1, each with probability 1/2, to every element.

  Lossy but unbiased: the average of many decodings approaches the input.
  Draws with a stateful random op, so every evaluation differs.
  """

  ENCODED_VALUES_KEY = 'random_pm_one_values'

  @property
  def name(self):
    return 'random_add_subtract_one'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_VALUES_KEY]

  @property
  def commutes_with_sum(self):
    return True

  @property
  def decode_needs_input_shape(self):
    return False

  def get_params(self):
    return {}, {}

  def encode(self, x, encode_params):
    del encode_params  # No params.
    heads = tf.random.uniform(tf.shape(x)) < 0.5
    step = tf.where(heads, tf.ones_like(x), -tf.ones_like(x))
    return {self.ENCODED_VALUES_KEY: x + step}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del decode_params, num_summands, shape  # The noise stays in.
    return encoded_tensors[self.ENCODED_VALUES_KEY]


@encoding_stage.tf_style_encoding_stage
class SignIntFloatEncodingStage(encoding_stage.EncodingStageInterface):
  """Example: splits every value into three tensors, losslessly.

  The sign, the integer part of the magnitude and its fractional part.
  """

  ENCODED_SIGNS_KEY = 'split_signs'
  ENCODED_INTS_KEY = 'split_ints'
  ENCODED_FLOATS_KEY = 'split_fractions'

  @property
  def name(self):
    return 'sign_int_float'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_SIGNS_KEY, self.ENCODED_INTS_KEY,
            self.ENCODED_FLOATS_KEY]

  @property
  def commutes_with_sum(self):
    return False

  @property
  def decode_needs_input_shape(self):
    return False

  def get_params(self):
    return {}, {}

  def encode(self, x, encode_params):
    del encode_params  # No params.
    magnitude = tf.abs(x)
    whole = tf.floor(magnitude)
    return {
        self.ENCODED_SIGNS_KEY: tf.sign(x),
        self.ENCODED_INTS_KEY: whole,
        self.ENCODED_FLOATS_KEY: magnitude - whole,
    }

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del decode_params, num_summands, shape  # All is in the three parts.
    magnitude = (encoded_tensors[self.ENCODED_INTS_KEY] +
                 encoded_tensors[self.ENCODED_FLOATS_KEY])
    return encoded_tensors[self.ENCODED_SIGNS_KEY] * magnitude


# A Lehmer (MINSTD) generator: s_{i+1} = 48271 * s_i mod (2**31 - 1).
_LEHMER_MODULUS = 2**31 - 1
_LEHMER_MULTIPLIER = 48271
# Outputs are whole numbers 1.._DUMMY_RNG_RANGE: small enough that float32
# keeps the fractional part of `x + value` for x of order one.
_DUMMY_RNG_RANGE = 128


def dummy_rng_source(seed, num_elements):
  """Deterministic pseudo-random whole numbers from a seed tensor; tests only.

  Stands in for a seeded random source shared by `encode` and `decode`: equal
  seeds give equal values, different seeds different ones. Statistically it is
  poor (values are whole numbers in [1, 128]); do not use it for real
  randomness.

  Args:
    seed: an integer scalar tensor (or Python int).
    num_elements: Python int, how many values to return.

  Returns:
    A float32 tensor of shape `(num_elements,)`.
  """
  if not isinstance(num_elements, (int, np.integer)) or num_elements < 0:
    raise ValueError('dummy_rng_source needs a static, non-negative number of '
                     f'elements, got {num_elements!r}.')
  # Step i of the generator is start * multiplier**(i + 1) (mod modulus): the
  # powers are computed here, so the graph has a fixed size for any length.
  powers = np.empty(num_elements, np.int64)
  power = 1
  for i in range(num_elements):
    power = power * _LEHMER_MULTIPLIER % _LEHMER_MODULUS
    powers[i] = power
  seed = tf.cast(seed, tf.int64)
  # A nonzero start: zero is the generator's fixed point.
  start = tf.math.floormod(seed, _LEHMER_MODULUS - 1) + 1
  states = tf.math.floormod(start * tf.constant(powers), _LEHMER_MODULUS)
  return tf.cast(tf.math.floormod(states, _DUMMY_RNG_RANGE) + 1, tf.float32)


@encoding_stage.tf_style_encoding_stage
class PlusRandomNumEncodingStage(encoding_stage.EncodingStageInterface):
  """Example: adds seeded pseudo-random whole numbers, undone by the seed.

  `get_params` draws one seed and gives it to both `encode` and `decode`, so
  decoding regenerates exactly the numbers encoding added. Needs a static input
  shape.
  """

  ENCODED_VALUES_KEY = 'plus_random_values'
  SEED_PARAM_KEY = 'plus_random_seed'

  @property
  def name(self):
    return 'plus_random_num'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_VALUES_KEY]

  @property
  def commutes_with_sum(self):
    return False

  @property
  def decode_needs_input_shape(self):
    return False

  def get_params(self):
    seed = tf.random.uniform((), maxval=tf.int32.max, dtype=tf.int32)
    params = {self.SEED_PARAM_KEY: seed}
    return params, params

  def encode(self, x, encode_params):
    noise = self._noise(encode_params[self.SEED_PARAM_KEY], x)
    return {self.ENCODED_VALUES_KEY: x + noise}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del num_summands, shape  # The encoding has the input's shape.
    encoded = encoded_tensors[self.ENCODED_VALUES_KEY]
    return encoded - self._noise(decode_params[self.SEED_PARAM_KEY], encoded)

  def _noise(self, seed, like):
    values = dummy_rng_source(seed, like.shape.num_elements())
    return tf.reshape(tf.cast(values, like.dtype), like.shape)


@encoding_stage.tf_style_adaptive_encoding_stage
class PlusOneOverNEncodingStage(encoding_stage.AdaptiveEncodingStageInterface):
  """Example adaptive stage: in round N (counted by its state) adds 1/N.

  Its state only counts rounds, so it sends no state update tensors. It reuses
  `PlusOneEncodingStage` unchanged, giving it the addend through the params.
  """

  ENCODED_VALUES_KEY = PlusOneEncodingStage.ENCODED_VALUES_KEY
  ADD_PARAM_KEY = PlusOneEncodingStage.ADD_PARAM_KEY
  ITERATION_STATE_KEY = 'plus_one_over_n_round'

  def __init__(self):
    self._plus = PlusOneEncodingStage()

  @property
  def name(self):
    return 'plus_one_over_n'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_VALUES_KEY]

  @property
  def commutes_with_sum(self):
    return False

  @property
  def decode_needs_input_shape(self):
    return False

  @property
  def state_update_aggregation_modes(self):
    return {}

  def initial_state(self):
    return {self.ITERATION_STATE_KEY: tf.constant(1, tf.int32)}

  def update_state(self, state, state_update_tensors):
    del state_update_tensors  # The round count needs nothing from encoders.
    return {self.ITERATION_STATE_KEY: state[self.ITERATION_STATE_KEY] + 1}

  def get_params(self, state):
    rounds = tf.cast(state[self.ITERATION_STATE_KEY], tf.float32)
    params = {self.ADD_PARAM_KEY: 1.0 / rounds}
    return params, params

  def encode(self, x, encode_params):
    return self._plus.encode(x, encode_params), {}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    return self._plus.decode(encoded_tensors, decode_params,
                             num_summands=num_summands, shape=shape)


@encoding_stage.tf_style_adaptive_encoding_stage
class AdaptiveNormalizeEncodingStage(
    encoding_stage.AdaptiveEncodingStageInterface):
  """Example adaptive stage: learns a factor that scales inputs to unit norm.

  Each encoder reports its input's L2 norm (aggregated by STACK, so the
  server sees every one); the state keeps a running estimate of 1 / norm,
  which moves toward the reported norms' mean by a weight that grows with the
  number of reports. It reuses `TimesTwoEncodingStage` with that factor.
  """

  ENCODED_VALUES_KEY = TimesTwoEncodingStage.ENCODED_VALUES_KEY
  FACTOR_PARAM_KEY = TimesTwoEncodingStage.FACTOR_PARAM_KEY
  FACTOR_STATE_KEY = 'normalize_factor'
  NORM_STATE_UPDATE_KEY = 'normalize_input_norm'
  # How much of the old estimate one report leaves.
  _DECAY_PER_REPORT = 0.9

  def __init__(self):
    self._scale = TimesTwoEncodingStage()

  @property
  def name(self):
    return 'adaptive_normalize'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_VALUES_KEY]

  @property
  def commutes_with_sum(self):
    return True

  @property
  def decode_needs_input_shape(self):
    return False

  @property
  def state_update_aggregation_modes(self):
    return {
        self.NORM_STATE_UPDATE_KEY: encoding_stage.StateAggregationMode.STACK
    }

  def initial_state(self):
    return {self.FACTOR_STATE_KEY: tf.constant(1.0)}

  def update_state(self, state, state_update_tensors):
    """Moves the factor toward 1 / (mean reported norm).

    Works on one encoder's scalar report (a broadcast) as on a stack of many
    (an aggregation); more reports move the estimate further.
    """
    norms = state_update_tensors[self.NORM_STATE_UPDATE_KEY]
    num_reports = norms.shape.num_elements()
    keep = self._DECAY_PER_REPORT**num_reports
    factor = (keep * state[self.FACTOR_STATE_KEY] +
              (1.0 - keep) / tf.reduce_mean(norms))
    return {self.FACTOR_STATE_KEY: factor}

  def get_params(self, state):
    # The state tensor itself: no new ops.
    params = {self.FACTOR_PARAM_KEY: state[self.FACTOR_STATE_KEY]}
    return params, params

  def encode(self, x, encode_params):
    encoded = self._scale.encode(x, encode_params)
    return encoded, {self.NORM_STATE_UPDATE_KEY: tf.norm(x)}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    return self._scale.decode(encoded_tensors, decode_params,
                              num_summands=num_summands, shape=shape)


@encoding_stage.tf_style_adaptive_encoding_stage
class StateUpdateTensorsEncodingStage(
    encoding_stage.AdaptiveEncodingStageInterface):
  """Example adaptive stage sending one state update per aggregation mode.

  Encoding is the identity; every mode receives the input itself, and the
  next state records the sum, minimum and maximum of the aggregated values and
  how many elements the stacked ones hold.
  """

  ENCODED_VALUES_KEY = 'all_modes_values'
  SUM_STATE_UPDATE_KEY = 'all_modes_update_sum'
  MIN_STATE_UPDATE_KEY = 'all_modes_update_min'
  MAX_STATE_UPDATE_KEY = 'all_modes_update_max'
  STACK_STATE_UPDATE_KEY = 'all_modes_update_stack'
  LAST_SUM_STATE_KEY = 'all_modes_last_sum'
  LAST_MIN_STATE_KEY = 'all_modes_last_min'
  LAST_MAX_STATE_KEY = 'all_modes_last_max'
  LAST_COUNT_STATE_KEY = 'all_modes_last_count'

  @property
  def name(self):
    return 'state_update_tensors'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_VALUES_KEY]

  @property
  def commutes_with_sum(self):
    return True

  @property
  def decode_needs_input_shape(self):
    return False

  @property
  def state_update_aggregation_modes(self):
    modes = encoding_stage.StateAggregationMode
    return {
        self.SUM_STATE_UPDATE_KEY: modes.SUM,
        self.MIN_STATE_UPDATE_KEY: modes.MIN,
        self.MAX_STATE_UPDATE_KEY: modes.MAX,
        self.STACK_STATE_UPDATE_KEY: modes.STACK,
    }

  def initial_state(self):
    return {
        self.LAST_SUM_STATE_KEY: tf.constant(0.0),
        self.LAST_MIN_STATE_KEY: tf.constant(0.0),
        self.LAST_MAX_STATE_KEY: tf.constant(0.0),
        self.LAST_COUNT_STATE_KEY: tf.constant(0, tf.int32),
    }

  def update_state(self, state, state_update_tensors):
    del state  # The next state depends on the updates only.
    updates = state_update_tensors
    return {
        self.LAST_SUM_STATE_KEY:
            tf.reduce_sum(updates[self.SUM_STATE_UPDATE_KEY]),
        self.LAST_MIN_STATE_KEY:
            tf.reduce_min(updates[self.MIN_STATE_UPDATE_KEY]),
        self.LAST_MAX_STATE_KEY:
            tf.reduce_max(updates[self.MAX_STATE_UPDATE_KEY]),
        self.LAST_COUNT_STATE_KEY:
            tf.size(updates[self.STACK_STATE_UPDATE_KEY], out_type=tf.int32),
    }

  def get_params(self, state):
    del state  # No params.
    return {}, {}

  def encode(self, x, encode_params):
    del encode_params  # No params.
    # A copy made inside `encode`, so its name carries the encode scope.
    x = tf.identity(x)
    updates = {key: x for key in self.state_update_aggregation_modes}
    return {self.ENCODED_VALUES_KEY: x}, updates

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del decode_params, num_summands, shape  # The identity.
    return tf.identity(encoded_tensors[self.ENCODED_VALUES_KEY])
