"""Hierarchical histograms (`build_hierarchical_histogram_process`,
`HierarchicalHistogramDecoder`): without noise or sampling, TFF 0.87's trees
exactly (recorded from a real TFF 0.87 on the same records); with them,
what must hold whatever the draws (TFF draws from the clock, we from a
seed)."""

import numpy as np
import pytest
import tensorflow as tf

import analytics_examples as examples
import canonical as tff
from canonical import errors
from canonical.privacy import discrete_gaussian

build = tff.analytics.build_hierarchical_histogram_process
Decoder = tff.analytics.HierarchicalHistogramDecoder


def _tree(process, records=None):
  state, metrics = process.next(process.initialize(),
                                examples.record_datasets(records))
  assert metrics == ()
  histogram = state.aggregated_hierarchical_histogram
  return (np.asarray(histogram['flat_values']),
          np.asarray(histogram['nested_row_splits'][0]).tolist())


def _layers(flat, splits):
  return [flat[a:b] for a, b in zip(splits[:-1], splits[1:])]


def _assert_consistent(flat, splits, arity):
  layers = _layers(flat, splits)
  for upper, lower in zip(layers[:-1], layers[1:]):
    np.testing.assert_array_equal(upper, lower.reshape(-1, arity).sum(1))


def test_trees_without_noise_are_tffs():
  process = build(0.0, 10.0, 10)
  assert str(process.initialize.type_signature) == (  # TFF 0.87's.
      '( -> <aggregated_hierarchical_histogram=<flat_values=int32[31],'
      'nested_row_splits=<int64[6]>>,round_timestamp=int64>@SERVER)')
  flat, splits = _tree(process)
  assert flat.tolist() == examples.TREE_ARITY_2
  assert splits == examples.SPLITS_ARITY_2
  flat, splits = _tree(build(0.0, 10.0, 10, arity=3, enable_secure_sum=False))
  assert flat.tolist() == examples.TREE_ARITY_3
  assert splits == examples.SPLITS_ARITY_3


@pytest.mark.parametrize('mechanism', ['sub-sampling', 'distinct'])
def test_clipped_trees_keep_their_invariants(mechanism):
  process = build(0.0, 10.0, 5, clip_mechanism=mechanism,
                  max_records_per_user=2, seed=3)
  flat, splits = _tree(process)
  _assert_consistent(flat, splits, 2)
  # Per client, records in range (sub-sampling) or nonempty bins
  # (distinct), at most 2: 2 + 2 + 2 or 2 + 2 + 1.
  assert flat[0] == (6 if mechanism == 'sub-sampling' else 5)
  leaves = _layers(flat, splits)[-1]
  assert leaves[5:].sum() == 0 and (leaves >= 0).all()
  assert flat.tolist() == _tree(process)[0].tolist()  # Seeded: replayable.


def test_central_gaussian_noise():
  exact = build(0.0, 10.0, 10, max_records_per_user=4, enable_secure_sum=False,
                dp_mechanism='central-gaussian', seed=1)
  flat, _ = _tree(exact)
  assert flat.dtype == np.float32 and flat[0] == 9.0  # 4 + 3 + 2 records.
  noisy = build(0.0, 10.0, 10, max_records_per_user=4,
                dp_mechanism='central-gaussian', noise_multiplier=1.0, seed=1)
  noised, splits = _tree(noisy)
  stddev = 4 * np.sqrt(5)  # TFF's L2 bound of a tree of 5 layers, times 1.
  assert 0.5 * stddev < np.std(noised - flat) < 1.6 * stddev
  assert splits == examples.SPLITS_ARITY_2
  other, _ = _tree(build(0.0, 10.0, 10, max_records_per_user=4,
                         dp_mechanism='central-gaussian',
                         noise_multiplier=1.0, seed=2))
  assert not np.array_equal(noised, other)


def test_distributed_discrete_gaussian_noise():
  exact, _ = _tree(build(0.0, 10.0, 10, max_records_per_user=4, bits=16,
                         expected_clients_per_round=3,
                         dp_mechanism='distributed-discrete-gaussian'))
  assert exact.dtype == np.int32 and exact[0] == 9
  noised, _ = _tree(build(0.0, 10.0, 10, max_records_per_user=4, bits=16,
                          expected_clients_per_round=3, noise_multiplier=1.0,
                          dp_mechanism='distributed-discrete-gaussian',
                          seed=4))
  # Three clients' draws of scale ceil(4 sqrt(5) / sqrt(3)) = 6, summed.
  assert noised.dtype == np.int32
  assert 0.5 * 6 * np.sqrt(3) < np.std(noised - exact) < 1.6 * 6 * np.sqrt(3)


def test_discrete_gaussian_draws():
  seed = tf.constant([0, 7], tf.int64)
  draws = discrete_gaussian.sample_discrete_gaussian(3, [20000], seed)
  assert draws.dtype == tf.int32
  assert abs(float(tf.reduce_mean(tf.cast(draws, tf.float64)))) < 0.1
  assert 8.5 < float(tf.math.reduce_variance(tf.cast(draws, tf.float64))) < (
      9.5)
  np.testing.assert_array_equal(
      draws, discrete_gaussian.sample_discrete_gaussian(3, [20000], seed))
  assert not np.any(discrete_gaussian.sample_discrete_gaussian(0, [5], seed))


def test_decoder_answers_as_tffs():
  # Every number below is TFF 0.87's for the same trees.
  tree = tf.RaggedTensor.from_row_splits([10., 4., 6., 1., 3., 2., 4.],
                                         [0, 1, 3, 7])
  noisy = tf.RaggedTensor.from_row_splits(
      [10.5, 3.2, 6.1, 1.4, 2.2, 2.9, 3.6], [0, 1, 3, 7])
  decoder = Decoder(tree, 0.0, 4.0)
  assert [decoder.node_query(1, 1), decoder.node_query(2, 3)] == [6.0, 4.0]
  assert [decoder.range_query(0, 2), decoder.range_query(1, 3),
          decoder.range_query(2, 2)] == [6.0, 9.0, 2.0]
  assert [decoder.quantile_query(q) for q in (0.0, 0.3, 0.5, 1.0)] == [
      (0.0, 1.0), (1.0, 2.0), (2.0, 3.0), (3.0, 4.0)]
  efficient = Decoder(noisy, 0.0, 4.0, use_efficient=True)
  assert [efficient.node_query(0, 0), efficient.node_query(1, 0),
          efficient.node_query(2, 2)] == [
              10.188888880941604, 3.6923077412140675, 2.9960000705718994]
  assert [efficient.range_query(0, 2), efficient.range_query(1, 3)] == [
      6.6883078117859665, 8.888307698934504]
  consistent = Decoder(noisy, 0.0, 4.0)
  with pytest.raises(errors.InvalidValueError, match='enforce_consistency'):
    consistent.quantile_query(0.5)
  consistent.enforce_consistency()
  np.testing.assert_allclose(
      [consistent.node_query(0, 0), consistent.node_query(1, 1),
       consistent.node_query(2, 0)],
      [10.099999989782068, 6.499999943233677, 1.3999999875114058],
      rtol=1e-12)
  assert consistent.quantile_query(0.5) == (2.0, 3.0)
  arity_3 = Decoder(tf.RaggedTensor.from_row_splits(
      [9., 2., 3., 4., 1., 1., 0., 1., 2., 0., 0., 3., 1.], [0, 1, 4, 13]),
                    -1.0, 8.0, use_efficient=True)
  assert [arity_3.node_query(1, 2), arity_3.range_query(2, 7)] == [4.0, 6.0]


def test_decoder_reads_the_process_output():
  flat, splits = _tree(build(0.0, 10.0, 10))
  decoder = Decoder({'flat_values': flat, 'nested_row_splits': (splits,)},
                    0.0, 10.0)
  assert decoder.range_query(0, 9) == 10 and decoder.range_query(2, 3) == 4
  # As TFF's, the decoder's bins are the tree's 16 leaves over [0, 10).
  assert decoder.quantile_query(0.5) == (1.875, 2.5)


def test_bad_arguments_are_refused_by_name():
  with pytest.raises(errors.InvalidValueError, match='dp_mechanism'):
    build(0.0, 1.0, 4, dp_mechanism='laplace')
  with pytest.raises(errors.InvalidValueError, match='enable_secure_sum'):
    build(0.0, 1.0, 4, dp_mechanism='distributed-discrete-gaussian',
          enable_secure_sum=False)
  with pytest.raises(errors.InvalidValueError, match='bits'):
    build(0.0, 1.0, 4, bits=23)
  with pytest.raises(errors.InvalidValueError, match='hierarchical'):
    Decoder([[1.0, 2.0]], 0.0, 1.0)
