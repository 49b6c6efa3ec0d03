"""encoders.testing.test_utils, used as a stage author would, here eagerly.

One shipped stage goes through the inherited `BaseEncodingStageTest` checks;
the other tests feed the helpers stages that break their contract, which the
helpers must catch.
"""

import numpy as np
import tensorflow as tf

from encoders.core import encoding_stage
from encoders import stages
from encoders.testing import test_utils

_BITS = 8
_RANGE = (-1.0, 1.0)


class UniformQuantizationStageTest(test_utils.BaseEncodingStageTest):
  """A fixed range: lossy, commutes with sum, so every base check applies."""

  @property
  def is_lossless(self):
    return False

  def default_encoding_stage(self):
    return stages.UniformQuantizationEncodingStage(
        bits=_BITS, min_max=list(_RANGE), stochastic=False)

  def default_input(self):
    return tf.random.normal([4, 6])

  def common_asserts_for_test_data(self, data):
    step = (_RANGE[1] - _RANGE[0]) / (2**_BITS - 1)
    clipped = np.clip(data.x, *_RANGE)
    # Rounding to nearest: at most half a step off, plus float slack.
    self.assertAllClose(clipped, data.decoded_x, rtol=0.0, atol=step / 2 + 1e-6)
    levels = data.encoded_x[
        stages.UniformQuantizationEncodingStage.ENCODED_VALUES_KEY]
    self.assertAllEqual(levels, np.round(levels))
    self.assertAllInRange(levels, 0, 2**_BITS - 1)


@encoding_stage.tf_style_encoding_stage
class _RemembersInputStage(encoding_stage.EncodingStageInterface):
  """Broken: decode returns the tensor encode kept on `self`."""

  name = 'remembers_input'
  compressible_tensors_keys = ['values']
  commutes_with_sum = False
  decode_needs_input_shape = False

  def get_params(self):
    return {}, {}

  def encode(self, x, encode_params):
    self._kept = x
    return {'values': tf.zeros_like(x)}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    return tf.identity(self._kept)


class _PlusOneClaimingSumStage(test_utils.PlusOneEncodingStage):
  """Broken: claims to commute with sum, but decoding a sum of n encodings
  leaves n - 1 extra ones in."""

  @property
  def commutes_with_sum(self):
    return True


class HelpersCatchBrokenStagesTest(test_utils.BaseEncodingStageTest):
  """The helpers on stages they should reject, and on edge cases."""

  # The base checks run on an example stage; the tests below are the point.
  is_lossless = True

  def default_encoding_stage(self):
    return test_utils.TimesTwoEncodingStage()

  def default_input(self):
    return tf.constant([1.0, -2.0, 3.5])

  def common_asserts_for_test_data(self, data):
    self.assertAllClose(2.0 * data.x, data.encoded_x[
        test_utils.TimesTwoEncodingStage.ENCODED_VALUES_KEY])

  def test_one_to_many_catches_state_kept_from_encode(self):
    # The kept tensor belongs to the sender's graph, not the receiver's.
    with self.assertRaisesRegex(ValueError, 'another tf.Graph'):
      self.run_one_to_many_encode_decode(_RemembersInputStage(),
                                         lambda: tf.ones([3]))

  def test_assert_commutes_with_sum_catches_a_false_claim(self):
    stage = _PlusOneClaimingSumStage()
    inputs = [np.full([3], v, np.float32) for v in (1.0, 2.0, 4.0)]
    data, decode_params = self.run_many_to_one_encode_decode(stage, inputs)
    with self.assertRaisesRegex(AssertionError, 'not close'):
      self.assert_commutes_with_sum(data, stage, decode_params)

  def test_evaluate_tf_py_list_keeps_python_values_and_runs_once(self):
    with tf.Graph().as_default():
      draw = tf.random.uniform([4])
      fetches = [{'tensor': draw, 'python': 3, 'nested': {'s': 'text'}},
                 draw * 2.0, None, np.arange(2)]
      with self.session() as session:
        first, doubled, none, array = self.evaluate_tf_py_list(fetches,
                                                               session)
    self.assertEqual(3, first['python'])
    self.assertEqual({'s': 'text'}, first['nested'])
    self.assertIsNone(none)
    self.assertAllEqual([0, 1], array)
    # One run: the doubled draw is twice the same draw.
    self.assertAllClose(2.0 * first['tensor'], doubled)

  def test_many_to_one_aggregates_state_updates_of_every_encoder(self):
    stage = test_utils.StateUpdateTensorsEncodingStage()
    inputs = [np.array([1, 5], np.int32), np.array([-3, 2], np.int32),
              np.array([0, 7], np.int32)]
    data, _ = self.run_many_to_one_encode_decode(stage, inputs)
    state = data[0].updated_state
    self.assertEqual(12, state[stage.LAST_SUM_STATE_KEY])
    self.assertEqual(-3, state[stage.LAST_MIN_STATE_KEY])
    self.assertEqual(7, state[stage.LAST_MAX_STATE_KEY])
    self.assertEqual(6, state[stage.LAST_COUNT_STATE_KEY])
    aggregated = test_utils.aggregate_state_update_tensors(
        stage, [d.state_update_tensors for d in data])
    # SUM keeps the dtype, as a sum in TensorFlow would (numpy widens int32).
    self.assertEqual(np.int32,
                     aggregated[stage.SUM_STATE_UPDATE_KEY].dtype)
    self.assertEqual((3, 2), aggregated[stage.STACK_STATE_UPDATE_KEY].shape)

  def test_generic_asserts_catch_a_changed_dtype(self):
    stage = test_utils.TimesTwoEncodingStage()
    x = tf.constant([1.0, 2.0])
    encode_params, decode_params = stage.get_params()
    encoded_x, decoded_x = self.encode_decode_x(stage, x, encode_params,
                                                decode_params)
    data = test_utils.TestData(x, encoded_x, tf.cast(decoded_x, tf.float64))
    with self.assertRaises(AssertionError):
      self.generic_asserts(data, stage)

  def test_only_concrete_test_classes_are_collected(self):
    self.assertFalse(test_utils.BaseEncodingStageTest.__test__)
    self.assertTrue(UniformQuantizationStageTest.__test__)
    self.assertFalse(test_utils.TestData.__test__)
