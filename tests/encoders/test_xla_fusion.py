"""Subtrees of XLA-compatible stages run as one XLA computation, unchanged in meaning."""

from unittest import mock

import numpy as np
import pytest
import tensorflow as tf

import encoders as te
from encoders.core import seeds
from encoders.core import xla_fusion

_STATEFUL_RANDOM_OPS = {'RandomUniform', 'RandomUniformInt', 'RandomStandardNormal',
                        'StatefulUniformInt', 'StatefulUniformFullInt'}

ENCODERS = {
    'uniform_8bit': lambda: te.encoders.uniform_quantization(8),
    'uniform_3bit': lambda: te.encoders.uniform_quantization(3),
    'uniform_nearest': lambda: te.encoders.uniform_quantization(5, stochastic=False),
    'hadamard_2bit': lambda: te.encoders.hadamard_quantization(2),
    'adaptive_4bit': lambda: te.encoders.adaptive_quantization(4),
    'sign': te.encoders.sign,
    'drive': te.encoders.drive,
}


def _unfused(make_encoder):
  with mock.patch.object(xla_fusion, 'fusible', return_value=False):
    return make_encoder()


def _fused_nodes(encoder):
  nodes = [encoder] if encoder._fusion is not None else []
  for child in encoder.children.values():
    nodes += _fused_nodes(child)
  return nodes


def _input(shape, seed=0):
  return tf.constant(np.random.RandomState(seed).randn(*shape).astype(np.float32))


def _round_trip(encoder, x):
  encode_params, decode_params = encoder.get_params(encoder.initial_state())
  encoded, state_update, shapes = encoder.encode(x, encode_params)
  return encoded, state_update, encoder.decode(encoded, decode_params, shapes)


@pytest.mark.parametrize('name', sorted(ENCODERS))
def test_fused_encoder_sends_the_same_bits_as_stage_by_stage(name):
  x = _input([37, 29])
  fused, unfused = ENCODERS[name](), _unfused(ENCODERS[name])
  assert _fused_nodes(fused) and not _fused_nodes(unfused)
  with seeds.pure_randomness():  # Same seeds on both sides.
    *fused_message, fused_decoded = _round_trip(fused, x)
    *unfused_message, unfused_decoded = _round_trip(unfused, x)
  tf.nest.map_structure(_assert_same, fused_message, unfused_message)
  _assert_same(fused_decoded, unfused_decoded)


def _assert_same(a, b):
  """Integers (levels, packed words) exactly; floats to the last bit or so.

  XLA sums in another order and contracts `a * b + c`, so a scale or a decoded
  value may differ in its last bit.
  """
  assert a.dtype == b.dtype and a.shape == b.shape
  if a.dtype.is_floating:
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-6)
  else:
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_only_subtrees_of_compatible_stages_fuse():
  # The rotation is not XLA-compatible: the quantizer and packer below it fuse.
  encoder = te.encoders.hadamard_quantization(2)
  fused = _fused_nodes(encoder)
  assert [node.stage.name for node in fused] == ['uniform_quantization']
  assert [n.stage.name for n in _fused_nodes(te.encoders.uniform_quantization(8))
         ] == ['flatten']
  # A single stage is never compiled on its own: nothing to fuse.
  assert not _fused_nodes(te.encoders.identity())
  assert not _fused_nodes(te.core.EncoderComposer(
      te.stages.FlattenEncodingStage()).make())


def test_fused_encodes_draw_fresh_noise_with_no_stateful_op_inside_xla():
  encoder = te.encoders.uniform_quantization(2)
  x = _input([1000])
  params, _ = encoder.get_params(encoder.initial_state())
  first, _, _ = encoder.encode(x, params)
  second, _, _ = encoder.encode(x, params)
  bits = 'flattened_values'
  assert not np.array_equal(
      first[bits]['quantized_values']['bitpacked_values'].numpy(),
      second[bits]['quantized_values']['bitpacked_values'].numpy())

  fusion = _fused_nodes(encoder)[0]._fusion
  inside = fusion._encode.get_concrete_function(
      x, params, *seeds.noise_source()).graph
  op_types = {op.type for op in inside.get_operations()}
  for function in inside.as_graph_def().library.function:
    op_types |= {node.op for node in function.node_def}
  assert not op_types & _STATEFUL_RANDOM_OPS


def test_inside_a_form_the_fused_encoder_is_pure_and_replays():
  encoder = te.encoders.uniform_quantization(4)
  x = _input([300])

  @tf.function
  def encode(x, round_number):
    with seeds.pure_randomness(), seeds.noise_round(round_number):
      params, _ = encoder.get_params(encoder.initial_state())
      return encoder.encode(x, params)[0]

  graph = encode.get_concrete_function(x, tf.constant(0, tf.int64)).graph
  op_types = {op.type for op in graph.get_operations()}
  for function in graph.as_graph_def().library.function:
    op_types |= {node.op for node in function.node_def}
  assert not op_types & _STATEFUL_RANDOM_OPS
  leaf = lambda e: e['flattened_values']['quantized_values']['bitpacked_values']
  same = [leaf(encode(x, tf.constant(3, tf.int64))).numpy() for _ in range(2)]
  other = leaf(encode(x, tf.constant(4, tf.int64))).numpy()
  np.testing.assert_array_equal(same[0], same[1])
  assert not np.array_equal(same[0], other)


def test_static_shapes_stay_static_and_dynamic_shapes_work():
  encoder = te.encoders.uniform_quantization(3)
  _, _, decoded = _round_trip(encoder, _input([5, 7]))
  assert decoded.shape == (5, 7)

  @tf.function(input_signature=[tf.TensorSpec([None, 7], tf.float32)])
  def round_trip(x):
    return _round_trip(encoder, x)[2]

  for rows in (1, 4, 9):
    x = _input([rows, 7], seed=rows)
    decoded = round_trip(x)
    assert decoded.shape == (rows, 7)
    span = float(tf.reduce_max(x) - tf.reduce_min(x))
    assert np.max(np.abs(decoded.numpy() - x.numpy())) <= span / 7 + 1e-6


def test_gather_encoder_sums_match_stage_by_stage():
  spec = tf.TensorSpec([64], tf.float32)
  clients = [_input([64], seed=s) for s in range(3)]

  def mean_of(make_encoder):
    gather = te.encoders.as_gather_encoder(make_encoder(), spec)
    with seeds.pure_randomness():
      encode_params, before, after = gather.get_params(gather.initial_state())
      parts = []
      for x in clients:
        encoded, _ = gather.encode(x, encode_params)
        parts.append(gather.decode_before_sum(encoded, before))
      total = tf.nest.map_structure(lambda *p: tf.add_n(p), *parts)
      return gather.decode_after_sum(total, after, len(clients)).numpy()

  make = lambda: te.encoders.adaptive_quantization(6)
  np.testing.assert_allclose(mean_of(make), mean_of(lambda: _unfused(make)),
                             rtol=1e-6, atol=1e-6)


def test_graph_mode_session():
  with tf.Graph().as_default():
    encoder = te.encoders.uniform_quantization(8)
    x = tf.compat.v1.placeholder(tf.float32, [None])
    _, _, decoded = _round_trip(encoder, x)
    with tf.compat.v1.Session() as session:
      value = np.linspace(-1, 1, 50).astype(np.float32)
      out = session.run(decoded, {x: value})
  assert np.max(np.abs(out - value)) <= 2 / 255 + 1e-6
