"""The core: composer, Encoder tree, SimpleEncoder, GatherEncoder, error feedback."""

import numpy as np
import pytest
import tensorflow as tf

import encoders as te

# ---------------------------------------------------------------------------
# Toy stages, written the way a tensor_encoding user writes them.


@te.core.tf_style_encoding_stage
class ScaleStage(te.core.EncodingStageInterface):
  """Lossless, linear: commutes with sum."""

  def __init__(self, factor, name='scale'):
    self._factor = factor
    self._name = name

  name = property(lambda self: self._name)
  compressible_tensors_keys = ['values']
  commutes_with_sum = True
  decode_needs_input_shape = False

  def get_params(self):
    return {'factor': self._factor}, {'factor': self._factor}

  def encode(self, x, encode_params):
    return {'values': x * tf.cast(encode_params['factor'], x.dtype)}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    values = encoded_tensors['values']
    return values / tf.cast(decode_params['factor'], values.dtype)


@te.core.tf_style_encoding_stage
class SplitStage(te.core.EncodingStageInterface):
  """Splits x into two halves of a sum, each further encodable."""

  name = 'split'
  compressible_tensors_keys = ['a', 'b']
  commutes_with_sum = True
  decode_needs_input_shape = False

  def get_params(self):
    return {}, {}

  def encode(self, x, encode_params):
    return {'a': x * 0.25, 'b': x * 0.75, 'tag': tf.constant(1.0)}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    return encoded_tensors['a'] + encoded_tensors['b']


@te.core.tf_style_encoding_stage
class RoundStage(te.core.EncodingStageInterface):
  """Lossy, to int16, needs the shape: does not commute with sum."""

  name = 'round'
  compressible_tensors_keys = []
  commutes_with_sum = False
  decode_needs_input_shape = True

  def get_params(self):
    return {}, {}

  def encode(self, x, encode_params):
    return {'ints': tf.cast(tf.round(tf.reshape(x, [-1])), tf.int16)}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    return tf.reshape(tf.cast(encoded_tensors['ints'], tf.float32), shape)


@te.core.tf_style_encoding_stage
class TopKStage(te.core.EncodingStageInterface):
  """Exactly what a tensor_encoding user would write: top_k values and indices."""

  def __init__(self, k):
    self._k = k

  name = 'user_top_k'
  compressible_tensors_keys = ['values']
  commutes_with_sum = False
  decode_needs_input_shape = True

  def get_params(self):
    return {}, {}

  def encode(self, x, encode_params):
    flat = tf.reshape(x, [-1])
    _, indices = tf.math.top_k(tf.abs(flat), k=self._k)
    return {'values': tf.gather(flat, indices), 'indices': indices}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    size = tf.reduce_prod(shape)
    flat = tf.scatter_nd(encoded_tensors['indices'][:, None],
                         encoded_tensors['values'], [size])
    return tf.reshape(flat, shape)


def make_stats_stage(mode):
  """An adaptive stage whose state is its clients' statistic under `mode`."""

  @te.core.tf_style_adaptive_encoding_stage
  class StatsStage(te.core.AdaptiveEncodingStageInterface):
    name = 'stats'
    compressible_tensors_keys = ['values']
    commutes_with_sum = True
    decode_needs_input_shape = False
    state_update_aggregation_modes = {'stat': mode}

    def initial_state(self):
      return {'seen': tf.constant(0.0)}

    def update_state(self, state, state_update_tensors):
      stat = state_update_tensors['stat']
      if mode == te.core.StateAggregationMode.STACK:
        stat = tf.reduce_sum(stat)  # Order-independent, as STACK demands.
      return {'seen': stat}

    def get_params(self, state):
      return {}, {}

    def encode(self, x, encode_params):
      return {'values': x}, {'stat': tf.reduce_max(x)}

    def decode(self, encoded_tensors, decode_params, num_summands=None,
               shape=None):
      return encoded_tensors['values']

  return StatsStage()


SPEC = tf.TensorSpec([3, 4], tf.float32)


def random_x(seed, spec=SPEC):
  return tf.constant(np.random.RandomState(seed).uniform(
      -5, 5, spec.shape).astype(spec.dtype.as_numpy_dtype))


# ---------------------------------------------------------------------------
# Composer.


def test_composer_rejects_non_compressible_key_naming_stage():
  with pytest.raises(KeyError, match=r"'split'.*'tag'.*compressible"):
    te.core.EncoderComposer(SplitStage()).add_child(ScaleStage(2.0), 'tag')
  with pytest.raises(KeyError, match=r"'round'.*'ints'"):
    te.core.EncoderComposer(ScaleStage(2.0)).add_parent(RoundStage(), 'ints')


def test_composer_rejects_key_collision():
  composer = te.core.EncoderComposer(SplitStage())
  composer.add_child(ScaleStage(2.0), 'a')
  with pytest.raises(KeyError, match=r"'a' already has a child"):
    composer.add_child(ScaleStage(3.0), 'a')


def test_composer_rejects_non_stage():
  with pytest.raises(TypeError, match='EncodingStageInterface'):
    te.core.EncoderComposer(object())


def test_commuting_structure_stops_at_first_non_commuting_stage():
  composer = te.core.EncoderComposer(SplitStage())
  composer.add_child(RoundStage(), 'a')
  composer.add_child(ScaleStage(2.0), 'b').add_child(RoundStage(), 'values')
  encoder = composer.make()
  commuting = encoder.commuting_structure
  assert commuting['commute'] is True
  assert commuting['children']['a']['commute'] is False
  assert commuting['children']['b']['commute'] is True
  assert commuting['children']['b']['children']['values']['commute'] is False
  assert not encoder.fully_commutes_with_sum


def test_add_parent_builds_the_same_tree_as_add_child():
  up = te.core.EncoderComposer(RoundStage()).add_parent(
      ScaleStage(4.0), 'values').make()
  down = te.core.EncoderComposer(ScaleStage(4.0))
  down.add_child(RoundStage(), 'values')
  down = down.make()
  x = random_x(0)
  results = []
  for encoder in (up, down):
    ep, dp = encoder.get_params(encoder.initial_state())
    encoded, _, shapes = encoder.encode(x, ep)
    results.append(encoder.decode(encoded, dp, shapes).numpy())
  np.testing.assert_array_equal(results[0], results[1])
  np.testing.assert_allclose(results[0], np.round(x.numpy() * 4) / 4)


# ---------------------------------------------------------------------------
# SimpleEncoder.


def test_simple_encoder_round_trip_and_only_tensors_sent():
  composer = te.core.EncoderComposer(ScaleStage(8.0))
  composer.add_child(RoundStage(), 'values')
  simple = te.encoders.as_simple_encoder(composer.make(), SPEC)
  x = random_x(1)
  encoded, state = simple.encode(x)
  assert state == ()
  assert list(encoded) == ['encoded_tensors/values/ints']
  assert encoded['encoded_tensors/values/ints'].dtype == tf.int16
  assert simple.encoded_bits == 12 * 16
  np.testing.assert_allclose(simple.decode(encoded), np.round(x * 8) / 8)


def test_simple_encoder_decode_in_a_separate_trace():
  composer = te.core.EncoderComposer(ScaleStage(8.0))
  composer.add_child(RoundStage(), 'values')
  simple = te.encoders.as_simple_encoder(composer.make(), SPEC)
  encode = tf.function(lambda x: simple.encode(x)[0])
  decode = tf.function(simple.decode)
  x = random_x(2)
  np.testing.assert_allclose(decode(encode(x)), np.round(x * 8) / 8)


def test_simple_encoder_rejects_wrong_input_and_keys():
  simple = te.encoders.as_simple_encoder(
      te.core.EncoderComposer(ScaleStage(2.0)).make(), SPEC)
  with pytest.raises(ValueError, match=r'built for.*shape \(2,\)'):
    simple.encode(tf.zeros([2]))
  with pytest.raises(ValueError, match='keys'):
    simple.decode({'nope': tf.zeros([3, 4])})
  with pytest.raises(TypeError, match='fully defined'):
    te.encoders.as_simple_encoder(
        te.core.EncoderComposer(ScaleStage(2.0)).make(),
        tf.TensorSpec([None], tf.float32))
  with pytest.raises(TypeError, match='Encoder'):
    te.encoders.as_simple_encoder(ScaleStage(2.0), SPEC)


def test_simple_encoder_threads_adaptive_state():
  simple = te.encoders.as_simple_encoder(
      te.core.EncoderComposer(
          make_stats_stage(te.core.StateAggregationMode.MAX)).make(), SPEC)
  x = random_x(3)
  _, state = simple.encode(x, simple.initial_state())
  assert float(state[0]) == pytest.approx(float(tf.reduce_max(x)))


# ---------------------------------------------------------------------------
# GatherEncoder.


def mixed_tree_encoder():
  """split -> a: round (not commuting), b: scale -> round."""
  composer = te.core.EncoderComposer(SplitStage())
  composer.add_child(RoundStage(), 'a')
  composer.add_child(ScaleStage(4.0), 'b').add_child(RoundStage(), 'values')
  return composer.make()


def test_gather_encoder_sum_equals_sum_of_single_decodes():
  gather = te.encoders.as_gather_encoder(mixed_tree_encoder(), SPEC)
  ep, bp, ap = gather.get_params(gather.initial_state())
  xs = [random_x(s) for s in range(5)]
  parts, singles = [], []
  for x in xs:
    encoded, _ = gather.encode(x, ep)
    part = gather.decode_before_sum(encoded, bp)
    parts.append(part)
    singles.append(gather.decode(encoded, (ep, bp, ap)))
  summed = tf.nest.map_structure(lambda *t: tf.add_n(list(t)), *parts)
  decoded_sum = gather.decode_after_sum(summed, ap, len(xs))
  np.testing.assert_allclose(decoded_sum, tf.add_n(singles), rtol=1e-6)
  # And the sum is a close estimate of the true sum (rounding is lossy).
  np.testing.assert_allclose(decoded_sum, tf.add_n(xs), atol=len(xs) * 0.5)
  # The part-decoded value keeps the commuting structure: 'b' stays encoded.
  assert sorted(parts[0]) == ['a', 'b/values', 'tag']


def test_gather_encoder_non_commuting_root_part_is_a_tensor():
  gather = te.encoders.as_gather_encoder(
      te.core.EncoderComposer(TopKStage(3)).make(), SPEC)
  ep, bp, ap = gather.get_params()
  x = random_x(4)
  encoded, _ = gather.encode(x, ep)
  assert sorted(encoded) == ['encoded_tensors/indices',
                             'encoded_tensors/values']
  part = gather.decode_before_sum(encoded, bp)
  assert tf.is_tensor(part)
  decoded = gather.decode_after_sum(part, ap, 1).numpy()
  flat = np.abs(x.numpy().ravel())
  keep = np.argsort(-flat)[:3]
  expected = np.zeros(12, np.float32)
  expected[keep] = x.numpy().ravel()[keep]
  np.testing.assert_array_equal(decoded.ravel(), expected)


def test_gather_encoder_methods_in_separate_traces():
  gather = te.encoders.as_gather_encoder(mixed_tree_encoder(), SPEC)
  params = tf.function(gather.get_params)(gather.initial_state())
  encode = tf.function(lambda x, p: gather.encode(x, p)[0])
  before = tf.function(gather.decode_before_sum)
  after = tf.function(lambda part, p: gather.decode_after_sum(part, p, 1))
  x = random_x(5)
  decoded = after(before(encode(x, params[0]), params[1]), params[2])
  np.testing.assert_allclose(decoded, gather.decode(
      gather.encode(x, params[0])[0], params))


@pytest.mark.parametrize('mode, expected', [
    (te.core.StateAggregationMode.SUM, lambda m: m.sum()),
    (te.core.StateAggregationMode.MIN, lambda m: m.min()),
    (te.core.StateAggregationMode.MAX, lambda m: m.max()),
    (te.core.StateAggregationMode.STACK, lambda m: m.sum()),
])
def test_gather_encoder_all_four_aggregation_modes(mode, expected):
  gather = te.encoders.as_gather_encoder(
      te.core.EncoderComposer(make_stats_stage(mode)).make(), SPEC)
  assert gather.state_update_aggregation_modes == [mode]
  ep, _, _ = gather.get_params()
  xs = [random_x(s) for s in range(6)]
  updates = [gather.encode(x, ep)[1] for x in xs]
  # A merge tree: accumulate two groups separately, then merge.
  left = gather.aggregate_state_updates(updates[:2])
  right = gather.aggregate_state_updates(updates[2:])
  merged = gather.merge_state_updates(left, right)
  if mode == te.core.StateAggregationMode.STACK:
    assert merged[0].shape == [6]
  state = gather.update_state(gather.initial_state(), merged)
  maxima = np.array([x.numpy().max() for x in xs])
  assert float(state[0]) == pytest.approx(float(expected(maxima)), rel=1e-6)


def test_gather_encoder_empty_aggregate_is_identity():
  for mode in te.core.StateAggregationMode:
    gather = te.encoders.as_gather_encoder(
        te.core.EncoderComposer(make_stats_stage(mode)).make(), SPEC)
    update = gather.encode(random_x(7), gather.get_params()[0])[1]
    merged = gather.merge_state_updates(
        gather.state_update_zero(), gather.aggregate_state_updates([update]))
    value = merged[0].numpy()
    assert np.all(value.ravel() == update[0].numpy().ravel())


def test_state_updates_must_match_declared_modes():

  @te.core.tf_style_adaptive_encoding_stage
  class Undeclared(te.core.AdaptiveEncodingStageInterface):
    name = 'undeclared'
    compressible_tensors_keys = []
    commutes_with_sum = True
    decode_needs_input_shape = False
    state_update_aggregation_modes = {}

    def initial_state(self):
      return {}

    def update_state(self, state, state_update_tensors):
      return {}

    def get_params(self, state):
      return {}, {}

    def encode(self, x, encode_params):
      return {'values': x}, {'forgot_to_declare': tf.reduce_sum(x)}

    def decode(self, encoded_tensors, decode_params, num_summands=None,
               shape=None):
      return encoded_tensors['values']

  with pytest.raises(ValueError, match='state_update_aggregation_modes'):
    te.encoders.as_gather_encoder(
        te.core.EncoderComposer(Undeclared()).make(), SPEC)


# ---------------------------------------------------------------------------
# Error feedback.


def test_error_feedback_residual_is_what_the_server_did_not_get():
  gather = te.encoders.as_gather_encoder(
      te.core.EncoderComposer(TopKStage(2)).make(), SPEC)
  feedback = te.core.ErrorFeedback(gather)
  params = gather.get_params()
  residual = feedback.initial_residual()
  total_sent = tf.zeros(SPEC.shape)
  xs = [random_x(10 + s) for s in range(4)]
  for x in xs:
    encoded, _, new_residual = feedback.encode(x, residual, params)
    sent = gather.decode(encoded, params)
    np.testing.assert_allclose(new_residual, x + residual - sent, atol=1e-6)
    # Nothing of the residual travels: the message is only top-k values+indices.
    assert sorted(encoded) == ['encoded_tensors/indices',
                               'encoded_tensors/values']
    total_sent += sent
    residual = new_residual
  # Telescoping: everything not yet sent is exactly the final residual.
  np.testing.assert_allclose(total_sent + residual, tf.add_n(xs), atol=1e-5)


def test_error_feedback_is_pure_in_tf_function():
  gather = te.encoders.as_gather_encoder(
      te.core.EncoderComposer(TopKStage(2)).make(), SPEC)
  feedback = te.core.ErrorFeedback(gather)
  step = tf.function(lambda x, r, p: feedback.encode(x, r, p))
  params = gather.get_params()
  x, r = random_x(20), random_x(21)
  a = step(x, r, params)
  b = step(x, r, params)
  tf.nest.map_structure(np.testing.assert_array_equal, a, b)
  with pytest.raises(TypeError, match='GatherEncoder'):
    te.core.ErrorFeedback(object())
