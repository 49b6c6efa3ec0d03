"""`count_distinct`, `data_processing`, `differential_privacy` and
`histogram_processing` of `tff.analytics`: TFF 0.87's numbers (recorded
from a real TFF 0.87 on the same data)."""

import collections

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff
from canonical import errors

analytics = tff.analytics
HASHES = [0, 1, 2**27 - 1, 2**27, 5 * 2**27 + 3, 2**32 - 1, 123456789]
BATCHES = [[b'a', b'bb', b'a'], [b'ccc', b'a', b'dddd'], [b'bb', b'eeeeeeeee']]


def _words():
  return [tf.data.Dataset.from_tensor_slices(
      [f'w{i}'.encode() for i in range(k, k + 40)]) for k in (0, 25, 50, 300)]


def _batches():
  return tf.data.Dataset.from_generator(
      lambda: iter(BATCHES), output_signature=tf.TensorSpec([None],
                                                            tf.string))


def _plain(value):
  if isinstance(value, tuple):
    return [_plain(v) for v in value]
  return [v.decode() if isinstance(v, bytes) else int(v)
          for v in np.asarray(value).tolist()]


@pytest.mark.parametrize('use_secagg', [False, True])
def test_hyperloglog_estimates_are_tffs(use_secagg):
  comp = analytics.count_distinct.create_federated_hyperloglog_computation(
      use_secagg=use_secagg)
  assert comp(_words()) == 111  # TFF 0.87, both ways (130 distinct words).


def test_sketches_and_secure_max_are_tffs():
  sketch = analytics.count_distinct.build_client_hyperloglog_computation()
  assert sketch(tf.data.Dataset.from_tensor_slices(
      np.array(HASHES, np.int64))).tolist() == [28, 28] + [0] * 3 + [26] + [
          0] * 25 + [1]  # TFF 0.87's.
  secure_max = (
      analytics.count_distinct.build_federated_secure_max_computation())
  sketches = [np.arange(32, dtype=np.int64) % 29,
              np.arange(32, dtype=np.int64) * 7 % 28]
  # TFF 0.87's: a register of 28 one-hot encodes to nothing, so counts 0.
  assert np.asarray(secure_max(sketches)).tolist() == [
      0, 7, 14, 21, 4, 7, 14, 21, 8, 9, 14, 21, 12, 13, 14, 21, 16, 17, 18,
      21, 20, 21, 22, 23, 24, 25, 26, 27, 0, 7, 14, 21]


def test_data_processing_is_tffs():
  dp = analytics.data_processing
  # Each TFF 0.87's result on the same batches.
  assert _plain(dp.get_all_elements(_batches(), string_max_bytes=3)) == [
      'a', 'bb', 'a', 'ccc', 'a', 'ddd', 'bb', 'eee']
  assert _plain(dp.get_unique_elements(_batches())) == [
      'a', 'bb', 'ccc', 'dddd', 'eeeeeeeee']
  assert _plain(dp.get_unique_elements_with_counts(
      _batches(), string_max_bytes=2)) == [['a', 'bb', 'cc', 'dd', 'ee'],
                                           [3, 2, 1, 1, 1]]
  assert _plain(dp.get_capped_elements(_batches(), 5, batch_size=2)) == [
      'a', 'bb', 'a', 'ccc', 'a', 'dddd']
  assert _plain(dp.get_capped_elements_with_counts(
      _batches(), 7, batch_size=3)) == [['a', 'bb', 'ccc', 'dddd'],
                                        [3, 1, 1, 1]]
  assert _plain(dp.get_top_elements_with_counts(_batches(), 2)) == [
      ['bb', 'a'], [2, 3]]
  assert _plain(dp.get_top_elements(_batches(), 3)) == ['ccc', 'bb', 'a']
  assert _plain(dp.get_top_multi_elements(_batches(), 2)) == [
      'bb', 'bb', 'a', 'a', 'a']
  stacked = dp.to_stacked_tensor(tf.data.Dataset.from_tensor_slices(
      collections.OrderedDict(a=[[1, 2], [3, 4], [5, 6]],
                              b=[b'x', b'y', b'z'])))
  assert stacked['a'].numpy().tolist() == [[1, 2], [3, 4], [5, 6]]
  assert _plain(stacked['b']) == ['x', 'y', 'z']


def test_data_processing_refuses_what_tff_refuses():
  dp = analytics.data_processing
  scalars = tf.data.Dataset.from_tensor_slices([b'a'])
  with pytest.raises(errors.InvalidValueError, match='rank-1'):
    dp.get_all_elements(scalars)
  with pytest.raises(errors.InvalidTypeError, match='strings'):
    dp.get_unique_elements(tf.data.Dataset.from_tensor_slices([[1]]))
  with pytest.raises(errors.InvalidValueError, match='max_user_contribution'):
    dp.get_top_elements(_batches(), 0)
  with pytest.raises(errors.InvalidValueError, match='fully defined'):
    dp.to_stacked_tensor(_batches())


def test_analytic_gauss_stddev_is_tffs():
  stddev = analytics.differential_privacy.analytic_gauss_stddev
  assert [stddev(1.0, 1e-5, 1.0), stddev(0.1, 1e-6, 3.0),
          stddev(5.0, 0.5, 2.0), stddev(2.0, 1e-3, 1.0, tol=1e-6)] == [
              3.730631634944469, 108.91407569734407, 0.5784663412254937,
              1.4452438731428772]  # TFF 0.87's, to the last bit.
  with pytest.raises(errors.InvalidValueError, match='delta'):
    stddev(1.0, 1.0, 1.0)


def test_threshold_histogram_is_tffs():
  keys, values = analytics.histogram_processing.threshold_histogram(
      tf.constant([b'a', b'b', b'c']), tf.constant([1.0, 5.0, 3.0]), 3.0)
  assert _plain(keys) == ['b', 'c'] and values.numpy().tolist() == [5, 3]
