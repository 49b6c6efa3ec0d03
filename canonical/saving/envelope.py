"""The fixed header around a saved form: magic, format version, length, SHA-256.

A truncated, corrupted or foreign file is recognised here, before a byte of
it reaches the protobuf parser or TensorFlow.
"""

import hashlib
import struct

from canonical.errors import FormError

MAGIC = b'FEDCANON'
# The newest version this loader reads. A form is written at the least
# version that holds all it says: 2 when it has privacy releases (an older
# loader would run it without accounting them), 3 when one is not an
# independent Gaussian (a version-2 loader would account it as one), 4 when
# a secure sum adds client noise (a version-3 loader would sum without it),
# else FIRST_VERSION.
FORMAT_VERSION = 4
FIRST_VERSION = 1
_HEADER = struct.Struct('<8sIQ32s')  # magic, version, payload length, sha256
HEADER_BYTES = _HEADER.size


def wrap(payload, version=FIRST_VERSION):
  """The file contents for a serialized `fedcanon.Form` payload."""
  return _HEADER.pack(MAGIC, version, len(payload),
                      hashlib.sha256(payload).digest()) + payload


def unwrap(data, where):
  """The payload of file contents `data`; `where` names the file in errors.

  Returns `(payload, format_version)`; raises `FormError` for an empty,
  foreign, newer, truncated, over-long or corrupted file.
  """
  if not data:
    raise FormError(f'{where}: the file is empty, not a saved canonical form.')
  if len(data) < HEADER_BYTES or not data.startswith(MAGIC):
    if MAGIC.startswith(data[:len(MAGIC)]) and len(data) < HEADER_BYTES:
      raise FormError(f'{where}: the file is truncated ({len(data)} bytes, '
                      f'shorter than the {HEADER_BYTES}-byte header).')
    raise FormError(f'{where}: not a saved canonical form (it does not start '
                    f'with {MAGIC.decode()!r}; save one with canonical.save).')
  _, version, length, digest = _HEADER.unpack_from(data)
  if version > FORMAT_VERSION:
    raise FormError(f'{where}: format version {version} is newer than this '
                    f'loader reads ({FORMAT_VERSION}); upgrade fedcanon.')
  if version < 1:
    raise FormError(f'{where}: invalid format version {version}.')
  payload = data[HEADER_BYTES:]
  if len(payload) < length:
    raise FormError(f'{where}: the file is truncated: its header promises '
                    f'{length} bytes of form, it holds {len(payload)}.')
  if len(payload) > length:
    raise FormError(f'{where}: {len(payload) - length} unexpected bytes after '
                    'the form (the file is corrupted or was appended to).')
  if hashlib.sha256(payload).digest() != digest:
    raise FormError(f'{where}: the file is corrupted (its SHA-256 checksum '
                    'does not match its contents).')
  return bytes(payload), version
