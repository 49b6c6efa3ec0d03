"""IBLTs (`tff.analytics.heavy_hitters.iblt`): tables equal TFF 0.87's bit
for bit (digests recorded from a real TFF 0.87 on the same strings and
seeds), and the pure peeling decoder finds what TFF's finds."""

import hashlib

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff
from canonical.core import computations
from canonical import errors

iblt = tff.analytics.heavy_hitters.iblt
UTF8, UNKNOWN = iblt.CharacterEncoding.UTF8, iblt.CharacterEncoding.UNKNOWN
STRINGS = [b'hello', b'hey', b'hi', b'caf\xc3\xa9', b'a longer string here',
           b'x\x00y']
COUNTS = [3, 1, 2, 5, 1, 1]


def _digest(array):
  array = np.asarray(array)
  return hashlib.sha256(array.astype(array.dtype.newbyteorder('<')).tobytes()
                        ).hexdigest()[:16]


# TFF 0.87: IbltEncoder(capacity, 10, encoding=..., seed=..., hash_family=...)
# .compute_iblt(STRINGS, COUNTS): (shape, sha256 prefix, sum % 1000003).
TFF_TABLES = {
    (UTF8, 0, 10, None): ([3, 14, 6], '48188f280532bc0f', 125877),
    (UTF8, 7, 50, 'coupled'): ([3, 32, 6], 'e2bf7f00f7b7b9d4', 656974),
    (UNKNOWN, 0, 10, None): ([3, 14, 6], '2d8c8b8f4f328b41', 716298),
    (UNKNOWN, 7, 50, 'coupled'): ([3, 32, 6], 'cab468da8cdc4d3a', 993436),
}


@pytest.mark.parametrize('encoding,seed,capacity,family', sorted(
    TFF_TABLES, key=str))
def test_tables_are_tffs_bit_for_bit(encoding, seed, capacity, family):
  encoder = iblt.IbltEncoder(capacity, 10, encoding=encoding, seed=seed,
                             hash_family=family)
  table = encoder.compute_iblt(tf.constant(STRINGS),
                               tf.constant(COUNTS, tf.int64)).numpy()
  shape, digest, total = TFF_TABLES[encoding, seed, capacity, family]
  assert [list(table.shape), _digest(table), int(table.sum() % 1000003)] == [
      shape, digest, total]
  decoder = iblt.IbltDecoder(table, capacity, 10, encoding=encoding,
                             seed=seed, hash_family=family)
  strings, counts, not_decoded = decoder.get_freq_estimates_tf()
  kept = 12 if encoding == UTF8 else 10  # UTF-8: whole 3-byte chunks.
  expected = {s[:kept].replace(b'\x00', b'') if encoding == UTF8 else
              s[:kept]: c for s, c in zip(STRINGS, COUNTS)}
  assert dict(zip(strings.numpy().tolist(), counts.numpy().tolist())) == (
      expected)
  assert not_decoded.numpy() == 0


def test_tensor_tables_are_tffs():
  encoder = iblt.IbltTensorEncoder((2,), 10, 8, seed=3)
  values = tf.constant(np.arange(1, 13).reshape(6, 2), tf.int64)
  table, value_table = encoder.compute_iblt(tf.constant(STRINGS), values)
  # TFF 0.87's digests of both tensors.
  assert _digest(table.numpy()) == '3112c0e400e9b064'
  assert _digest(value_table.numpy()) == 'eb9a9f5ae7964f84'
  assert value_table.shape == (3, 14, 2)
  decoder = iblt.IbltTensorDecoder(table, value_table, (2,), 10, 8, seed=3)
  counts, summed = decoder.get_freq_estimates()
  assert counts == {'hello': 1, 'hey': 1, 'hi': 1, 'café': 1,
                    'a longer ': 1, 'xy': 1}  # 9 bytes: 3 chunks of 3.
  assert summed['hello'] == [1, 2] and summed['xy'] == [11, 12]


def test_chunks_and_hash_indices_are_tffs():
  chunks, trimmed = iblt.create_chunker(string_max_bytes=5).encode_tensorflow(
      tf.constant([b'abcdefghij', b'z']))
  # TFF 0.87: 8 bytes a chunk (int64), so 5 bytes take one chunk of 8.
  assert chunks.numpy().tolist() == [[7523094288207667809], [122]]
  assert trimmed.numpy().tolist() == [b'abcdefgh', b'z']
  binary = iblt.create_chunker(string_max_bytes=5, encoding=UNKNOWN,
                               max_chunk_value=2**16 - 1, dtype=tf.int32)
  chunks, trimmed = binary.encode_tensorflow(tf.constant([b'abcdefghij',
                                                          b'z\x00']))
  assert chunks.numpy().tolist() == [[5, 25185, 18630, 405], [2, 122, 0, 0]]
  assert trimmed.numpy().tolist() == [b'abcde', b'z\x00']
  assert binary.decode_tensorflow(chunks).numpy().tolist() == [
      b'abcde', b'z\x00']
  words = tf.constant([b'a', b'bc'])
  assert iblt.RandomHyperEdgeHasher(4, 17, 3).get_hash_indices_tf(
      words).numpy()[:, :, 2].tolist() == [[14, 15, 2], [16, 14, 15]]
  assert iblt.CoupledHyperEdgeHasher(4, 100, 4, 3.0).get_hash_indices_tf(
      words).numpy()[:, :, 2].tolist() == [[41, 39, 27, 23], [15, 22, 11, 24]]


def test_an_overfull_table_decodes_what_tffs_does():
  strings = tf.constant([f'string{i}'.encode() for i in range(40)])
  table = iblt.IbltEncoder(10, 10, seed=1).compute_iblt(strings)
  found, counts, not_decoded = iblt.decode_iblt_tf(table, 10, 10, seed=1)
  # TFF 0.87 decodes these six and leaves 34.
  assert sorted(found.numpy().tolist()) == [
      b'string10', b'string12', b'string13', b'string28', b'string4',
      b'string8']
  assert counts.numpy().tolist() == [1] * 6 and not_decoded.numpy() == 34
  assert iblt.IbltDecoder(table, 10, 10, seed=1).get_freq_estimates()[
      None] == 34


def test_summed_tables_decode_summed_counts():
  encoder = iblt.IbltEncoder(20, 6, seed=2)
  first = encoder.compute_iblt(tf.constant([b'a', b'b', b'a']))
  second = encoder.compute_iblt(tf.constant([b'b', b'ccc']),
                                tf.constant([4, 2], tf.int64))
  decoder = iblt.IbltDecoder(first + second, 20, 6, seed=2)
  assert decoder.get_freq_estimates() == {'a': 2, 'b': 5, 'ccc': 2}
  assert decoder.decode_string_from_chunks(
      encoder.compute_chunks(tf.constant([b'ccc']))[0][0]).numpy() == b'ccc'


def test_decoding_is_pure():
  spec = tf.TensorSpec([3, 14, 6], tf.int64)
  decode = computations.tf_computation(
      lambda table: iblt.decode_iblt_tf(table, 10, 10), spec)
  decode.check_pure()
  table = iblt.IbltEncoder(10, 10).compute_iblt(tf.constant([b'x', b'y']))
  assert sorted(decode(table.numpy())[0].tolist()) == [b'x', b'y']


def test_bad_parameters_are_refused_by_name():
  with pytest.raises(errors.InvalidValueError, match='repetitions'):
    iblt.IbltEncoder(10, 10, repetitions=2)
  with pytest.raises(errors.InvalidValueError, match='hash_family'):
    iblt.IbltEncoder(10, 10, hash_family='other')
  with pytest.raises(errors.InvalidValueError, match='rescale_factor'):
    iblt.CoupledHyperEdgeHasher(0, 10, 3, 20.0)
  with pytest.raises(errors.InvalidValueError, match='string_max_bytes'):
    iblt.create_chunker(string_max_bytes=0)
  with pytest.raises(ValueError):  # TFF's kind of error too.
    iblt.IbltFactory(capacity=0, string_max_bytes=5, repetitions=3)
