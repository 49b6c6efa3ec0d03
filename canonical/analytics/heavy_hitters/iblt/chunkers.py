"""Strings as rows of integer chunks, and back: how an IBLT holds its keys.

TFF 0.87's `create_chunker(string_max_bytes=..., encoding=...)` gives one of
two chunkers with TFF's layout, so that IBLT tensors here equal TFF's bit for
bit:

| encoding  | chunker        | a string's row                               |
| UTF8      | `UTF8Chunker`  | its bytes (trimmed, zero-padded to a whole    |
|           |                | number of chunks), `b` bytes per chunk, the   |
|           |                | first byte least significant; zero bytes are  |
|           |                | dropped when decoding                         |
| UNKNOWN   | `BinaryChunker`| its byte length, then its bytes bit-packed    |
|           |                | into chunks of floor(log2(max_chunk_value))   |
|           |                | bits (`encoders.utils.tf_utils.pack_into_int`)|

Encoding and decoding are pure TensorFlow on rank-1 string tensors.
"""

import abc
import enum
import math

import tensorflow as tf

from canonical import errors
from encoders.utils import tf_utils

# Plain TensorFlow, with no Python control flow over tensors: AutoGraph,
# converting user code that calls it, need not convert it too (seconds).
_plain = tf.autograph.experimental.do_not_convert

_DEFAULT_DTYPE = tf.int64
_BITS_PER_BYTE = 8


class CharacterEncoding(enum.Enum):
  """How the strings of an IBLT are encoded: `UTF8` text, or `UNKNOWN`
  (binary data, or text of an unknown encoding)."""
  UNKNOWN = 0
  UTF8 = 1


def _byte_strings(empty_zero):
  """The 256 one-byte strings, indexed by byte value (`b''` at 0 when
  `empty_zero`: zero padding vanishes when joined)."""
  return tf.constant([b'' if empty_zero and i == 0 else bytes([i])
                      for i in range(256)], tf.string)


def _check_dtype(dtype, where):
  if dtype not in (tf.int32, tf.int64):
    raise errors.InvalidValueError(
        f'{where}: dtype must be tf.int32 or tf.int64, got {dtype!r}.')


class Chunker(abc.ABC):
  """Encodes rank-1 string tensors as `[n, get_num_chunks()]` integer rows
  of `dtype`, and decodes such rows."""

  @property
  @abc.abstractmethod
  def dtype(self) -> tf.dtypes.DType:
    """The dtype of the chunks."""

  @abc.abstractmethod
  def get_num_chunks(self) -> int:
    """How many chunks one string takes."""

  @abc.abstractmethod
  def encode_tensorflow(self, input_strings):
    """`(chunks [n, num_chunks], the strings as the chunks hold them)`."""

  @abc.abstractmethod
  def decode_tensorflow(self, encoded_chunks):
    """The `[n]` strings of `[n, num_chunks]` chunks."""


class UTF8Chunker(Chunker):
  """Bytes packed little-endian into chunks; the chunk width is the whole
  bytes `max_chunk_value` holds (the dtype's size by default)."""

  def __init__(self, string_max_bytes, *, max_chunk_value=None,
               dtype=_DEFAULT_DTYPE):
    where = 'UTF8Chunker'
    if string_max_bytes < 1:
      raise errors.InvalidValueError(
          f'{where}: string_max_bytes must be at least 1, got '
          f'{string_max_bytes}.')
    _check_dtype(dtype, where)
    if max_chunk_value is None:
      self._bytes_per_chunk = dtype.size
    else:
      if max_chunk_value < 1 or max_chunk_value > dtype.max:
        raise errors.InvalidValueError(
            f'{where}: max_chunk_value must be in [1, {dtype.max}] (what '
            f'{dtype.name} holds), got {max_chunk_value}.')
      self._bytes_per_chunk = math.floor(
          math.log2(max_chunk_value) / _BITS_PER_BYTE)
    if self._bytes_per_chunk < 1:
      raise errors.InvalidValueError(
          f'{where}: max_chunk_value {max_chunk_value} holds no whole byte.')
    self._dtype = dtype
    self._max_chunk_value = max_chunk_value
    self._num_chunks = math.ceil(string_max_bytes / self._bytes_per_chunk)
    self._max_length = self._num_chunks * self._bytes_per_chunk

  @property
  def dtype(self):
    return self._dtype

  def get_num_chunks(self):
    return self._num_chunks

  def _byte_weights(self):
    return tf.bitwise.left_shift(
        tf.ones([], self._dtype),
        tf.range(self._bytes_per_chunk, dtype=self._dtype) * _BITS_PER_BYTE)

  @_plain
  def encode_tensorflow(self, input_strings):
    """Chunks of the first `num_chunks * bytes_per_chunk` bytes of each
    string, and those bytes as strings (zero bytes dropped)."""
    string_bytes = tf.io.decode_raw(input_strings, tf.uint8,
                                    fixed_length=self._max_length)
    grouped = tf.reshape(tf.cast(string_bytes, self._dtype),
                         [-1, self._num_chunks, self._bytes_per_chunk])
    chunks = tf.reduce_sum(grouped * self._byte_weights(), axis=-1)
    trimmed = tf.strings.reduce_join(
        tf.gather(_byte_strings(empty_zero=True),
                  tf.cast(string_bytes, tf.int32)), axis=1)
    return chunks, trimmed

  @_plain
  def decode_tensorflow(self, encoded_chunks):
    chunks = tf.reshape(tf.cast(encoded_chunks, self._dtype),
                        [-1, self._num_chunks, 1])
    shifts = tf.range(self._bytes_per_chunk,
                      dtype=self._dtype) * _BITS_PER_BYTE
    string_bytes = tf.bitwise.bitwise_and(
        tf.bitwise.right_shift(chunks, shifts), 0xFF)
    string_bytes = tf.reshape(string_bytes, [-1, self._max_length])
    return tf.strings.reduce_join(
        tf.gather(_byte_strings(empty_zero=True),
                  tf.cast(string_bytes, tf.int32)), axis=1)

  def decode_python(self, encoded_chunks):
    """`decode_tensorflow` on a numpy array, giving a numpy array."""
    return self.decode_tensorflow(tf.constant(encoded_chunks)).numpy()


class BinaryChunker(Chunker):
  """A length header chunk, then the bytes bit-packed into chunks of
  floor(log2(max_chunk_value)) bits: any bytes, zeros included."""

  def __init__(self, *, string_max_bytes, max_chunk_value=None,
               dtype=_DEFAULT_DTYPE):
    where = 'BinaryChunker'
    _check_dtype(dtype, where)
    if max_chunk_value is None:
      max_chunk_value = dtype.max
    for name, value in (('string_max_bytes', string_max_bytes),
                        ('max_chunk_value', max_chunk_value)):
      if isinstance(value, bool) or not isinstance(value, int):
        raise errors.InvalidTypeError(
            f'{where}: {name} must be an int, got {value!r}.')
    if not 1 <= string_max_bytes <= max_chunk_value:
      raise errors.InvalidValueError(
          f'{where}: string_max_bytes must be in [1, {max_chunk_value}] '
          f'(max_chunk_value), got {string_max_bytes}.')
    if not tf.uint8.max <= max_chunk_value <= dtype.max:
      raise errors.InvalidValueError(
          f'{where}: max_chunk_value must be in [{tf.uint8.max}, '
          f'{dtype.max}], got {max_chunk_value}.')
    self._string_max_bytes = string_max_bytes
    self._dtype = dtype
    self._max_chunk_value = max_chunk_value
    self._bits_per_chunk = math.floor(math.log2(max_chunk_value))
    self._num_data_chunks = math.ceil(
        string_max_bytes * _BITS_PER_BYTE / self._bits_per_chunk)

  @property
  def dtype(self):
    return self._dtype

  def get_num_chunks(self):
    return self._num_data_chunks + 1

  @_plain
  def encode_tensorflow(self, input_strings):
    trimmed = tf.strings.substr(input_strings, 0, self._string_max_bytes,
                                unit='BYTE')
    lengths = tf.strings.length(trimmed, unit='BYTE')
    string_bytes = tf.cast(
        tf.io.decode_raw(trimmed, tf.uint8,
                         fixed_length=self._string_max_bytes), self._dtype)
    data = tf.map_fn(
        lambda row: tf.reshape(tf_utils.pack_into_int(
            row, _BITS_PER_BYTE, self._bits_per_chunk), [-1]),
        string_bytes,
        fn_output_signature=tf.TensorSpec([self._num_data_chunks],
                                          self._dtype))
    header = tf.cast(lengths, self._dtype)[:, None]
    return tf.concat([header, data], axis=1), trimmed

  @_plain
  def decode_tensorflow(self, encoded_chunks):
    chunks = tf.reshape(tf.cast(encoded_chunks, self._dtype),
                        [-1, self.get_num_chunks()])
    lengths = tf.cast(chunks[:, 0], tf.int32)
    string_bytes = tf.map_fn(
        lambda row: tf_utils.unpack_from_int(
            row, _BITS_PER_BYTE, self._bits_per_chunk,
            [self._string_max_bytes]),
        chunks[:, 1:],
        fn_output_signature=tf.TensorSpec([self._string_max_bytes],
                                          self._dtype))
    padded = tf.strings.reduce_join(
        tf.gather(_byte_strings(empty_zero=False),
                  tf.cast(string_bytes, tf.int32)), axis=1)
    return tf.strings.substr(padded, tf.zeros_like(lengths),
                             tf.clip_by_value(lengths, 0,
                                              self._string_max_bytes),
                             unit='BYTE')


def create_chunker(*, string_max_bytes: int,
                   encoding: CharacterEncoding = CharacterEncoding.UTF8,
                   max_chunk_value: int | None = None,
                   dtype: tf.dtypes.DType = _DEFAULT_DTYPE) -> Chunker:
  """TFF's `create_chunker`: the chunker for strings of `encoding` up to
  `string_max_bytes` bytes, chunk values at most `max_chunk_value` (the
  dtype's maximum by default), of `dtype` (int32 or int64)."""
  if encoding == CharacterEncoding.UTF8:
    return UTF8Chunker(string_max_bytes, max_chunk_value=max_chunk_value,
                       dtype=dtype)
  if encoding == CharacterEncoding.UNKNOWN:
    return BinaryChunker(string_max_bytes=string_max_bytes,
                         max_chunk_value=max_chunk_value, dtype=dtype)
  raise errors.InvalidValueError(
      f'create_chunker: encoding must be a CharacterEncoding, got '
      f'{encoding!r}.')
