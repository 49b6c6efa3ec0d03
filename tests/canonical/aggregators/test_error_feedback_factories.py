"""Error feedback inside TFF's aggregation API (our extension):
`EncodedSumFactory(encoder_fn, error_feedback=True)` keeps what each client's
lossy encoding dropped as that client's state, and every factory that wraps a
value sum (the means, clipping, zeroing, `as_weighted_aggregator`) passes
that state through. Top-k of small integers is exact in float32, so what was
sent plus what was kept is checked to equal what each client had, exactly.
"""

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff
from canonical import errors
from encoders import encoders as te

aggregators = tff.aggregators
SPEC = tf.TensorSpec([6], tf.float32)
WEIGHT = tf.TensorSpec([], tf.float32)
VALUES = [np.array([1, 2, 3, 4, 5, 6], np.float32),
          np.array([6, -5, 4, 3, 2, 1], np.float32)]


def _top_half(spec):
  return te.as_gather_encoder(te.top_k(0.5), spec)


def _feedback_sum():
  return aggregators.EncodedSumFactory(_top_half, error_feedback=True)


def _zeros(process):
  return [process.client_state_initializer() for _ in VALUES]


def test_an_encoded_sum_keeps_what_each_client_dropped():
  process = _feedback_sum().create(SPEC)
  assert process.has_client_state and not process.is_weighted
  residuals = _zeros(process)
  np.testing.assert_array_equal(residuals[0], np.zeros(6, np.float32))
  state = process.initialize()
  for _ in range(3):
    output = process.next(state, VALUES, residuals)
    assert isinstance(output, tff.templates.MeasuredProcessOutputWithClientState)
    # What reached the server and what stayed at the clients add up to what
    # the clients had, residuals included, to the last bit.
    had = sum(v + r for v, r in zip(VALUES, residuals))
    np.testing.assert_array_equal(
        output.result + sum(output.client_state), had)
    for kept in output.client_state:
      assert np.count_nonzero(kept) == 3  # Top half sent, the rest kept.
    state, residuals = output.state, output.client_state
  # The plain encoded sum drops the rest each round.
  plain = aggregators.EncodedSumFactory(_top_half).create(SPEC)
  assert not plain.has_client_state
  dropped = plain.next(plain.initialize(), VALUES).result
  np.testing.assert_array_equal(dropped, [6, -5, 4, 4, 5, 6])


def test_a_mean_keeps_the_residual_of_the_weighted_value():
  process = aggregators.MeanFactory(_feedback_sum()).create(SPEC, WEIGHT)
  assert process.has_client_state and process.is_weighted
  weights = [1.0, 3.0]
  output = process.next(process.initialize(), VALUES, weights,
                        _zeros(process))
  weighted = [v * w for v, w in zip(VALUES, weights)]
  np.testing.assert_array_equal(output.client_state[1],
                                [0, 0, 0, 9, 6, 3])
  np.testing.assert_allclose(
      output.result * sum(weights) + sum(output.client_state), sum(weighted))


WRAPPED = {
    'unweighted mean': lambda: aggregators.UnweightedMeanFactory(
        _feedback_sum()),
    'as weighted': lambda: aggregators.as_weighted_aggregator(
        aggregators.UnweightedMeanFactory(_feedback_sum())),
    'clipping (not reached)': lambda: aggregators.clipping_factory(
        100.0, aggregators.MeanFactory(_feedback_sum())),
    'zeroing (not reached)': lambda: aggregators.zeroing_factory(
        100.0, aggregators.MeanFactory(_feedback_sum())),
}


@pytest.mark.parametrize('name', sorted(WRAPPED))
def test_wrappers_pass_the_client_state_through(name):
  factory = WRAPPED[name]()
  weighted = isinstance(factory, aggregators.WeightedAggregationFactory)
  process = (factory.create(SPEC, WEIGHT) if weighted else
             factory.create(SPEC))
  assert process.has_client_state
  weights = ([1.0, 1.0],) if weighted else ()
  output = process.next(process.initialize(), VALUES, *weights,
                        _zeros(process))
  np.testing.assert_array_equal(output.client_state[0], [1, 2, 3, 0, 0, 0])
  np.testing.assert_array_equal(output.client_state[1], [0, 0, 0, 3, 2, 1])
  np.testing.assert_allclose(output.result, [3, -2.5, 2, 2, 2.5, 3])


def test_quantize_above_threshold_takes_error_feedback():
  factory = aggregators.EncodedSumFactory.quantize_above_threshold(
      quantization_bits=2, threshold=4, error_feedback=True)
  process = factory.create(SPEC)
  rng = np.random.default_rng(0)
  values = [rng.normal(size=6).astype(np.float32) for _ in range(2)]
  output = process.next(process.initialize(), values, _zeros(process))
  assert any(np.any(r != 0) for r in output.client_state)
  np.testing.assert_allclose(output.result + sum(output.client_state),
                             sum(values), rtol=1e-5, atol=1e-5)
  small = factory.create(tf.TensorSpec([4], tf.float32))  # Not encoded.
  output = small.next(small.initialize(), [v[:4] for v in values],
                      [np.zeros(4, np.float32)] * 2)
  np.testing.assert_array_equal(output.client_state, np.zeros((2, 4)))


def test_only_the_value_sum_may_keep_client_state():
  with pytest.raises(errors.FederatedError,
                     match='weight_sum_factory keeps client state'):
    aggregators.MeanFactory(
        weight_sum_factory=_feedback_sum()).create(SPEC, WEIGHT)
  with pytest.raises(errors.InvalidTypeError, match='error_feedback must be a '
                     'bool'):
    aggregators.EncodedSumFactory(_top_half, error_feedback='yes')


def test_a_process_keeping_client_state_must_say_how_it_starts():
  process = _feedback_sum().create(SPEC)
  with pytest.raises(errors.FederatedError,
                     match='no client_state_initializer was given'):
    tff.templates.AggregationProcess(process.initialize, process.next)
