"""Stochastic encoders draw fresh noise per encode when run directly, and pure
noise from the round and the client inside a compiled form (encoders/core/seeds.py)."""

import numpy as np
import pytest
import tensorflow as tf

import canonical as cf
from canonical import aggregators
import encoders as te
from encoders.core import seeds

_SPEC = tf.TensorSpec([300], tf.float32)
_REPEATS = 100


def _input():
  return tf.constant(np.random.default_rng(0).uniform(-1, 1, 300), tf.float32)


def _spread(decodings, x):
  """(rms error of one decoding, error of the mean of all): ratio ~sqrt(n) if independent."""
  errors = np.stack([d - x for d in decodings])
  single = np.sqrt(np.mean(errors**2))
  of_mean = np.sqrt(np.mean(np.mean(errors, axis=0)**2))
  return single, of_mean


@pytest.mark.parametrize('name, make', [
    ('uniform_2bit', lambda: te.encoders.uniform_quantization(2)),
    ('hadamard_2bit', lambda: te.encoders.hadamard_quantization(2)),
    ('random_k', lambda: te.encoders.random_k(0.2)),
])
@pytest.mark.parametrize('traced', [False, True])
def test_mean_of_repeated_encodes_converges_like_independent_draws(
    name, make, traced):
  del name
  encoder = te.encoders.as_simple_encoder(make(), _SPEC)
  state = encoder.initial_state()

  def round_trip(x):
    return encoder.decode(encoder.encode(x, state)[0])

  if traced:
    round_trip = tf.function(round_trip)
  x = _input()
  single, of_mean = _spread([round_trip(x).numpy() for _ in range(_REPEATS)],
                            x.numpy())
  # Independent draws: of_mean ~ single / sqrt(100) = single / 10. The same
  # noise every time would leave of_mean == single.
  assert single > 0
  assert of_mean < 2.0 * single / np.sqrt(_REPEATS), (single, of_mean)


def test_graph_mode_session_runs_draw_fresh_noise():
  with tf.Graph().as_default():
    stage = te.stages.UniformQuantizationEncodingStage(bits=2)
    x = _input()
    encode_params, decode_params = stage.get_params()
    decoded = stage.decode(stage.encode(x, encode_params), decode_params)
    with tf.compat.v1.Session() as session:
      x_value = session.run(x)
      runs = [session.run(decoded) for _ in range(_REPEATS)]
  single, of_mean = _spread(runs, x_value)
  assert of_mean < 2.0 * single / np.sqrt(_REPEATS)


def test_inside_pure_randomness_the_same_input_gives_the_same_bits():
  encoder = te.encoders.as_simple_encoder(te.encoders.uniform_quantization(2),
                                          _SPEC)
  x = _input()
  with seeds.pure_randomness():
    first = encoder.encode(x)[0]
    again = encoder.encode(x)[0]
    with seeds.noise_round(1):
      next_round = encoder.encode(x)[0]
  key = 'encoded_tensors/flattened_values/quantized_values/bitpacked_values'
  np.testing.assert_array_equal(first[key], again[key])
  assert np.mean(first[key].numpy() != next_round[key].numpy()) > 0.5


def _one_client_mean_form():
  def encoder_fn(spec):
    return te.encoders.as_gather_encoder(te.encoders.uniform_quantization(2),
                                         spec)

  mean = aggregators.build_encoded_mean_process(_SPEC, encoder_fn)

  @cf.federated_computation(cf.server(mean.state_spec),
                            cf.clients((_SPEC, tf.TensorSpec([], tf.float32))))
  def next_fn(state, data):
    return mean.next(state, data[0], data[1])

  return cf.compile(cf.IterativeProcess(mean.initialize, next_fn))


def test_compiled_form_replays_a_round_and_redraws_in_the_next():
  form = _one_client_mean_form()
  client = [(_input().numpy(), np.float32(1.0))]
  state = form.initialize()
  state_1, mean_1 = cf.run_round(form, state, client)
  _, replayed = cf.run_round(form, state, client)
  # A round replayed from the same state gives the same bits.
  np.testing.assert_array_equal(mean_1, replayed)
  # The same client with the same data in the next round draws new noise.
  _, mean_2 = cf.run_round(form, state_1, client)
  # (2-bit stochastic rounding flips about a third of the values; 0 if reused.)
  assert np.mean(np.asarray(mean_1) != np.asarray(mean_2)) > 0.15
  # Averaged over rounds, the noise cancels like independent draws.
  means, current = [], state
  for _ in range(40):
    current, value = cf.run_round(form, current, client)
    means.append(np.asarray(value))
  single, of_mean = _spread(means, client[0][0])
  assert of_mean < 2.0 * single / np.sqrt(40)


def test_compiled_form_draws_no_stateful_random_numbers():
  form = _one_client_mean_form()
  for name, piece in form.pieces.items():
    graph_def = piece.concrete_function.graph.as_graph_def()
    ops = {node.op for node in graph_def.node}
    for function in graph_def.library.function:
      ops |= {node.op for node in function.node_def}
    assert not ops & {'RandomUniform', 'RandomUniformInt',
                      'RandomStandardNormal'}, name
