"""Flat tensors to bytes and back, as files on any storage.

Every value a round moves between stages (server state, broadcast C, client
updates U, accumulators A, client states) is a structure of tensors whose
layout the form's specs already know. So only the flat list of arrays is
written: per tensor its dtype, shape and raw bytes; no pickle anywhere. A
CRC-32 of everything before it ends the bytes: a flipped bit or a truncated
file is an error naming the file, never a silently different model. (Files
of the first format, without the CRC, still read.)
"""

import struct
import zlib

import numpy as np
import tensorflow as tf

from canonical import errors
from canonical import io as storage_lib

_MAGIC = b'FCT2'
_MAGIC_WITHOUT_CRC = b'FCT1'
_CRC = struct.Struct('<I')
_COUNT = struct.Struct('<I')
_LENGTH = struct.Struct('<Q')


def flatten(structure):
  """The tensors of a structure as numpy arrays, in `tf.nest` order."""
  return [np.asarray(x) for x in tf.nest.flatten(structure)]


def pack(spec, arrays, what='value'):
  """Rebuilds the structure `spec` describes from its flat arrays, as tensors."""
  leaves = tf.nest.flatten(spec)
  if len(leaves) != len(arrays):
    raise errors.InvalidValueError(
        f'The {what} has {len(arrays)} tensors, but its type '
        f'has {len(leaves)}.')
  tensors = [tf.convert_to_tensor(a, dtype=s.dtype)
             for s, a in zip(leaves, arrays)]
  return tf.nest.pack_sequence_as(spec, tensors)


def encode(arrays):
  """Bytes of a flat list of arrays: dtype, shape and raw data of each."""
  parts = [_MAGIC, _COUNT.pack(len(arrays))]
  for array in arrays:
    array = np.asarray(array)
    dtype = tf.as_dtype(array.dtype).name.encode()
    parts += [bytes([len(dtype)]), dtype, bytes([array.ndim])]
    parts += [_LENGTH.pack(d) for d in array.shape]
    data = _string_bytes(array) if array.dtype == object else \
        np.ascontiguousarray(array).tobytes()
    parts += [_LENGTH.pack(len(data)), data]
  body = b''.join(parts)
  return body + _CRC.pack(zlib.crc32(body))


def decode(data):
  """The flat list of arrays `encode` wrote; ValueError on corrupt data."""
  try:
    return _decode(memoryview(data))
  except (struct.error, IndexError, TypeError, UnicodeDecodeError) as e:
    raise errors.InvalidValueError(
        f'Truncated or corrupt tensor data: {e}') from e


def _decode(view):
  magic = bytes(view[:4])
  if magic == _MAGIC:
    if len(view) < 8 + _CRC.size:
      raise errors.InvalidValueError('Truncated tensor file.')
    (crc,) = _CRC.unpack_from(view, len(view) - _CRC.size)
    view = view[:len(view) - _CRC.size]
    if zlib.crc32(view) != crc:
      raise errors.InvalidValueError(
          'the file is damaged or truncated (its CRC-32 does '
          'not match its contents)')
  elif magic != _MAGIC_WITHOUT_CRC:
    raise errors.InvalidValueError('Not a tensor file: bad magic bytes.')
  (count,), offset = _COUNT.unpack_from(view, 4), 8
  arrays = []
  for _ in range(count):
    size = view[offset]
    dtype = tf.as_dtype(bytes(view[offset + 1:offset + 1 + size]).decode())
    offset += 1 + size
    ndim = view[offset]
    shape = struct.unpack_from(f'<{ndim}Q', view, offset + 1)
    offset += 1 + 8 * ndim
    (length,) = _LENGTH.unpack_from(view, offset)
    offset += 8
    raw = view[offset:offset + length]
    if len(raw) != length:
      raise errors.InvalidValueError('Truncated tensor file.')
    offset += length
    if dtype == tf.string:
      arrays.append(_strings(raw, shape))
    else:
      arrays.append(np.frombuffer(raw, dtype=dtype.as_numpy_dtype).reshape(
          shape).copy())
  if offset != len(view):
    raise errors.InvalidValueError(
        f'{len(view) - offset} bytes after the last tensor.')
  return arrays


def bits(arrays):
  """Bits that travel: the raw tensor data (strings by their bytes)."""
  total = 0
  for array in arrays:
    array = np.asarray(array)
    if array.dtype == object:
      total += 8 * sum(len(s) for s in array.ravel())
    else:
      total += 8 * array.nbytes
  return total


def _string_bytes(array):
  return b''.join(_LENGTH.pack(len(s)) + s
                  for s in (bytes(x) for x in array.ravel()))


def _strings(raw, shape):
  values, offset = [], 0
  for _ in range(int(np.prod(shape, dtype=np.int64))):
    (length,) = _LENGTH.unpack_from(raw, offset)
    values.append(bytes(raw[offset + 8:offset + 8 + length]))
    offset += 8 + length
  return np.array(values, dtype=object).reshape(shape)


def write_tensors(path, structure, storage=None):
  """Writes a structure's flat tensors (whole or not at all) through
  `storage` (the default if None); returns their bits."""
  arrays = flatten(structure)
  (storage or storage_lib.default()).write_bytes(path, encode(arrays))
  return bits(arrays)


def read_arrays(path, what='value', storage=None):
  """The flat numpy arrays of a file `write_tensors` wrote; NotFound if there
  is none, ValueError (naming the file) if it is corrupt."""
  try:
    return decode((storage or storage_lib.default()).read_bytes(path))
  except ValueError as e:
    raise errors.InvalidValueError(f'The {what} in {path}: {e}') from None


def read_tensors(path, spec, what='value', storage=None):
  """The structure `spec` describes, from a file `write_tensors` wrote;
  errors as `read_arrays`."""
  return pack(spec, read_arrays(path, what, storage), what=f'{what} in {path}')
