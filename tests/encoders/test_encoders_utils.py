"""encoders.utils: behaviour beyond what tensor_encoding's own tests pin down."""

import collections
import enum

import numpy as np
import pytest
import scipy.linalg
import tensorflow as tf

from encoders.utils import py_utils
from encoders.utils import tf_utils


# --- fast_walsh_hadamard_transform ---------------------------------------


@pytest.mark.parametrize('dim', [1, 2, 8, 64])
def test_hadamard_is_the_normalized_sylvester_matrix(dim):
  # Transforming the identity gives the matrix itself, row by row.
  matrix = tf_utils.fast_walsh_hadamard_transform(tf.eye(dim, dtype=tf.float64))
  expected = scipy.linalg.hadamard(dim) / np.sqrt(dim)
  np.testing.assert_allclose(matrix.numpy(), expected, atol=1e-12)
  np.testing.assert_allclose(matrix.numpy() @ matrix.numpy().T, np.eye(dim),
                             atol=1e-12)


def test_hadamard_with_shape_known_only_at_run_time():
  transform = tf.function(
      tf_utils.fast_walsh_hadamard_transform,
      input_signature=[tf.TensorSpec([None, None], tf.float32)])
  x = np.random.default_rng(0).normal(size=(3, 32)).astype(np.float32)
  expected = x @ scipy.linalg.hadamard(32) / np.sqrt(32)
  np.testing.assert_allclose(transform(x).numpy(), expected, atol=1e-5)
  assert transform(np.zeros((0, 4), np.float32)).shape == (0, 4)
  with pytest.raises(tf.errors.InvalidArgumentError, match='power of two'):
    transform(np.zeros((2, 6), np.float32))


def test_hadamard_rejects_integer_input():
  with pytest.raises(TypeError, match='int32'):
    tf_utils.fast_walsh_hadamard_transform(tf.ones([2, 4], tf.int32))


# --- pack_into_int / unpack_from_int -------------------------------------


@pytest.mark.parametrize('dtype,target', [(tf.int32, 28), (tf.int32, 31),
                                          (tf.int64, 28), (tf.int64, 63)])
@pytest.mark.parametrize('bits', [1, 3, 5, 8, 13, 16])
def test_pack_unpack_round_trip(bits, target, dtype):
  rng = np.random.default_rng(bits * 100 + target)
  for shape in [(0,), (1,), (7,), (4, 25)]:
    values = rng.integers(0, 2**bits, size=shape)
    values[..., -1:] = 2**bits - 1  # All bits set, across word boundaries.
    packed = tf_utils.pack_into_int(tf.constant(values, dtype), bits, target)
    num_words = -(-values.size * bits // target)
    assert packed.shape == (num_words, 1)
    assert packed.dtype == dtype
    assert np.all(packed.numpy() >= 0)
    unpacked = tf_utils.unpack_from_int(packed, bits, target, shape)
    np.testing.assert_array_equal(unpacked.numpy(), values)


def test_pack_puts_a_straddling_value_in_two_words():
  # 3 values of 5 bits in 8-bit words: the second value's low 3 bits end
  # word 0, its high 2 bits start word 1.
  packed = tf_utils.pack_into_int(tf.constant([1, 0b10110, 3]), 5, 8)
  assert packed.numpy().ravel().tolist() == [1 | 0b110 << 5, 0b10 | 3 << 2]


def test_pack_rejects_bad_arguments():
  with pytest.raises(ValueError, match='target_bitrange'):
    tf_utils.pack_into_int(tf.constant([1]), 2, 32)
  with pytest.raises(ValueError, match='input_bitrange'):
    tf_utils.pack_into_int(tf.constant([1]), 0, 28)
  with pytest.raises(TypeError, match='float32'):
    tf_utils.pack_into_int(tf.constant([1.0]), 2, 28)


# --- stateless random values ---------------------------------------------


def test_random_signs_depend_only_on_the_seed():
  seed = tf.constant([7, 11], tf.int64)
  first = tf_utils.random_signs(500, seed).numpy()
  np.testing.assert_array_equal(first, tf_utils.random_signs(500, seed).numpy())
  other = tf_utils.random_signs(500, tf.constant([7, 12], tf.int64)).numpy()
  assert not np.array_equal(first, other)
  assert set(np.unique(first)) == {-1.0, 1.0}
  assert 200 < np.sum(first > 0) < 300


def test_random_signs_reject_unsigned_dtype():
  with pytest.raises(TypeError, match='uint8'):
    tf_utils.random_signs(3, tf.constant([1, 2], tf.int64), tf.uint8)


# --- CMWC ----------------------------------------------------------------

_MASK64 = 2**64 - 1


def _reference_cmwc(num_elements, seed):
  """The generator exactly as tf_utils documents it, in plain Python."""
  a, b, lanes = 1799596406, 2**32 - 1, 1024

  def splitmix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)

  states = []
  for lane in range(lanes):
    mixed = splitmix64((seed + (lane + 1) * 0x9E3779B97F4A7C15) & _MASK64)
    states.append([(mixed & 0xFFFFFFFF) % b, (mixed >> 32) % a])
  words = []
  while len(words) < num_elements:
    for state in states:
      t = a * state[0] + state[1]
      state[0], state[1] = (b - 1) - t % b, t // b
      words.append(state[0])
  return np.array(words[:num_elements], np.float64) / 2**32


@pytest.mark.parametrize('seed', [0, 123, -5, 2**63 - 1])
def test_cmwc_matches_a_plain_python_reference(seed):
  # 2100 values: three steps of every lane, the last one partial.
  got = tf_utils._cmwc_random_sequence(2100, tf.constant(seed, tf.int64))
  np.testing.assert_array_equal(got.numpy(), _reference_cmwc(2100, seed))


def test_cmwc_shorter_sequence_is_a_prefix():
  seed = tf.constant(42, tf.int64)
  long = tf_utils._cmwc_random_sequence(5000, seed).numpy()
  short = tf_utils._cmwc_random_sequence(1500, seed).numpy()
  np.testing.assert_array_equal(long[:1500], short)


def test_cmwc_floats_stay_below_one():
  seed = tf.constant(3, tf.int64)
  for dtype in (tf.float32, tf.float64):
    floats = tf_utils.random_floats_cmwc(20000, seed, dtype).numpy()
    assert floats.min() >= 0.0 and floats.max() < 1.0


def test_cmwc_rejects_non_scalar_seed():
  with pytest.raises(ValueError, match='scalar'):
    tf_utils._cmwc_random_sequence(3, tf.constant([1, 2], tf.int64))


# --- py_utils ------------------------------------------------------------


def test_ordered_enum_does_not_compare_across_enums():
  class Size(py_utils.OrderedEnum):
    SMALL = 1
    LARGE = 2

  class Other(py_utils.OrderedEnum):
    ONE = 1

  assert Size.SMALL < Size.LARGE and Size.LARGE >= Size.SMALL
  assert sorted([Size.LARGE, Size.SMALL]) == [Size.SMALL, Size.LARGE]
  with pytest.raises(TypeError):
    _ = Size.SMALL < Other.ONE
  with pytest.raises(TypeError):
    _ = Size.SMALL < 2
  assert not isinstance(Size.SMALL, enum.IntEnum)


def test_split_then_merge_keeps_empty_nested_dicts():
  tensor = tf.constant(1.0)
  original = {'x': {'py': 1, 'tf': tensor}, 'only_py': {'a': 'b'}, 'empty': {}}
  python_part, tensor_part = py_utils.split_dict_py_tf(original)
  assert tensor_part == {'x': {'tf': tensor}, 'only_py': {}, 'empty': {}}
  assert py_utils.merge_dicts(python_part, tensor_part) == original


def test_merge_dicts_error_names_the_key():
  with pytest.raises(ValueError, match="'k'"):
    py_utils.merge_dicts({'k': 1}, {'k': 2})


def test_flatten_paths_follow_tf_nest_order():
  point = collections.namedtuple('Point', ['y', 'x'])
  structure = {'b': [1, point(y=2, x=3)], 'a': (4,)}
  flat = py_utils.flatten_with_joined_string_paths(structure, separator='.')
  assert flat == [('a.0', 4), ('b.0', 1), ('b.1.y', 2), ('b.1.x', 3)]
  assert [leaf for _, leaf in flat] == tf.nest.flatten(structure)


def test_assert_compatible_names_the_mismatching_leaf():
  spec = {'w': tf.TensorSpec([2], tf.float32), 'b': tf.TensorSpec([], tf.int32)}
  value = {'w': tf.zeros([3]), 'b': tf.constant(1)}
  with pytest.raises(ValueError, match="'w'"):
    py_utils.assert_compatible(spec, value)
  with pytest.raises(ValueError, match='structure'):
    py_utils.assert_compatible(spec, {'w': tf.zeros([2])})
  with pytest.raises(TypeError, match="'b'"):
    py_utils.assert_compatible({'b': 1.0}, {'b': 1.0})
