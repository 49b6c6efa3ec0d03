"""`save(form, path)` and `load(path)`: a canonical form as a self-contained file.

A saved form runs in any process with TensorFlow, without the Python code
that built it. A form file may come from anywhere, so loading refuses, with a
`FormError` naming the file and the problem: anything that is not an intact
form of a known format version (see envelope.py), ops outside the allowlist
(op_allowlist.py) unless the caller opts in, bindings that do not fit their
graph, and pieces whose types do not connect (CanonicalForm's own check).
"""

import importlib.metadata
import os
from typing import Iterable

import tensorflow as tf
from google.protobuf import message

from canonical import errors
from canonical.core import piece_names
from canonical import form as form_lib
from canonical.form import FormError
from canonical import io as storage_lib
from canonical.core import privacy_releases
from canonical.saving import canonical_form_pb2
from canonical.saving import envelope
from canonical.saving import graph_checks
from canonical.saving import graph_piece
from canonical.saving import op_allowlist
from canonical.saving import structure_coding
from canonical.secagg import sums as secure_sums

REQUIRED_PIECES = piece_names.PIECES
OPTIONAL_PIECES = piece_names.OPTIONAL_PIECES


def _producer_version():
  try:
    return 'fedcanon ' + importlib.metadata.version('fedcanon')
  except importlib.metadata.PackageNotFoundError:
    return 'fedcanon (not installed)'


def to_proto(form):
  """The `fedcanon.Form` message of a `CanonicalForm`."""
  if not isinstance(form, form_lib.CanonicalForm):
    raise FormError(f'save expects a CanonicalForm, got {type(form).__name__}.')
  proto = canonical_form_pb2.Form(
      format_version=_format_version(form),
      producer_version=_producer_version(),
      tensorflow_version=tf.__version__, name=form.name,
      description=form.description,
      pieces=[graph_piece.export_piece(p) for p in form.pieces.values()],
      parameter_labels=form.parameter_labels,
      result_labels=form.result_labels)
  for tensor, encoder in form.encoders.items():
    proto.encoders.add(tensor=str(tensor), encoder=str(encoder))
  for release in form.privacy_releases:
    proto.privacy_releases.add(
        source=release.source, noise_multiplier=release.noise_multiplier,
        mechanism='' if release.mechanism == 'gaussian' else release.mechanism,
        parameters=release.parameters, coefficients=release.coefficients)
  for entry in form.secure_sums:
    proto.secure_sums.add(
        kind=entry.kind, static_parameters=entry.static_parameters or (),
        from_server_state=entry.static_parameters is None,
        client_noise=entry.noise or '')
  if form.broadcast_bits is not None:
    proto.broadcast_bits = form.broadcast_bits
  if form.aggregated_bits is not None:
    proto.aggregated_bits = form.aggregated_bits
  return proto


def _format_version(form):
  if form.has_client_noise:
    return 4
  if any(r.mechanism != 'gaussian' for r in form.privacy_releases):
    return 3
  return 2 if form.privacy_releases else envelope.FIRST_VERSION


def to_bytes(form: form_lib.CanonicalForm) -> bytes:
  """The file contents of `form`: envelope and serialized `fedcanon.Form`;
  the same form gives the same bytes (protobuf maps in a fixed order)."""
  return envelope.wrap(to_proto(form).SerializeToString(deterministic=True),
                       _format_version(form))


def save(form: form_lib.CanonicalForm, path: str,
         storage: storage_lib.Storage | None = None) -> str:
  """Writes `form` to `path` (local, or any storage `canonical.io`
  reaches) whole or not at all; returns the path."""
  return (storage or storage_lib.default()).write_bytes(
      path, to_bytes(form), sync=True)


def parse(data, where='form'):
  """The checked `fedcanon.Form` message of file contents `data`."""
  payload, version = envelope.unwrap(data, where)
  proto = canonical_form_pb2.Form()
  try:
    proto.ParseFromString(payload)
  except (message.DecodeError, RecursionError, ValueError) as e:
    raise FormError(f'{where}: the form does not parse ({e}).') from None
  if proto.format_version != version:
    raise FormError(f'{where}: the form says format version '
                    f'{proto.format_version}, its header {version}.')
  if proto.privacy_releases and version < 2:
    raise FormError(f'{where}: privacy releases in a format version '
                    f'{version} form (they came in version 2).')
  if version < 3 and any(r.mechanism for r in proto.privacy_releases):
    raise FormError(f'{where}: a privacy release other than Gaussian in a '
                    f'format version {version} form (they came in version '
                    '3).')
  if version < 4 and any(s.client_noise for s in proto.secure_sums):
    raise FormError(f'{where}: a secure sum with client noise in a format '
                    f'version {version} form (they came in version 4).')
  names = [p.name for p in proto.pieces]
  for name in names:
    if name not in REQUIRED_PIECES + OPTIONAL_PIECES:
      raise FormError(f'{where}: unknown piece {name!r}.')
    if names.count(name) > 1:
      raise FormError(f'{where}: piece {name!r} appears {names.count(name)} '
                      'times.')
  missing = [name for name in REQUIRED_PIECES if name not in names]
  if missing:
    raise FormError(f'{where}: the form lacks piece(s) {", ".join(missing)}.')
  return proto


def from_bytes(data: bytes, where: str = 'form', allow_ops: Iterable[str] = (),
               allow_any_op: bool = False) -> form_lib.CanonicalForm:
  """The `CanonicalForm` of file contents `data` (see `load`)."""
  proto = parse(data, where)
  allowed = op_allowlist.default_allowed_ops() | frozenset(allow_ops)
  pieces = {p.name: _load_piece(p, where, allowed, allow_any_op)
            for p in proto.pieces}
  try:
    form = form_lib.CanonicalForm(
        name=proto.name, description=proto.description,
        encoders={e.tensor: e.encoder for e in proto.encoders},
        secure_sums=[_secure_sum(s) for s in proto.secure_sums],
        parameter_labels=proto.parameter_labels,
        result_labels=proto.result_labels,
        privacy_releases=[_release(r, where) for r in proto.privacy_releases],
        **pieces)
  except FormError as e:
    raise FormError(f'{where}: {e}') from None
  for what, field, bits in (
      ('C', 'broadcast_bits', form.broadcast_bits),
      ('U', 'aggregated_bits', form.aggregated_bits)):
    stored = getattr(proto, field) if proto.HasField(field) else None
    if stored != bits:
      raise FormError(f'{where}: the file says {what} is {stored} bits per '
                      f'client, its pieces say {bits}.')
  return form


def _release(proto, where):
  try:
    return privacy_releases.Release.of_message(proto)
  except errors.InvalidValueError as e:
    raise FormError(f'{where}: privacy release {proto.source!r}: {e}'
                    ) from None


def _secure_sum(proto):
  return secure_sums.SecureSum(
      proto.kind, None if proto.from_server_state else tuple(
          proto.static_parameters), proto.client_noise or None)


def _load_piece(proto, where, allowed, allow_any_op):
  what = f'{where}: piece {proto.name!r}'
  if not allow_any_op:
    refused = op_allowlist.refused_op(proto.graph, allowed)
    if refused:
      op, node = refused
      raise FormError(
          f'{what} holds op {op!r} ({node}), which is not in the allowlist of '
          'pure computation; load it only if you trust the file, with '
          f'load(..., allow_ops={{{op!r}}}) or allow_any_op=True.')
  try:
    input_specs = structure_coding.decode(proto.input_structure)
    output_spec = structure_coding.decode(proto.output_structure)
  except structure_coding.StructureError as e:
    raise FormError(f'{what}: bad input or output structure: {e}') from None
  arity = form_lib.ARITY[proto.name]
  if not isinstance(input_specs, tuple) or len(input_specs) != arity:
    raise FormError(f'{what}: takes {arity} inputs, the file declares '
                    f'{input_specs!r}.')
  graph_def = tf.compat.v1.GraphDef()
  graph_def.CopyFrom(proto.graph)
  for node in graph_def.node:  # Run where the loader runs, nowhere else.
    node.device = ''
  for function in graph_def.library.function:
    for node in function.node_def:
      node.device = ''
  try:
    graph_checks.seal(graph_def)
  except graph_checks.GraphCheckError as e:
    raise FormError(f'{what}: {e}.') from None
  try:
    return graph_piece.GraphPiece(proto.name, graph_def, input_specs,
                                  proto.input_tensors, output_spec,
                                  proto.output_tensors)
  except graph_piece.BindingError as e:
    raise FormError(f'{what}: {e}.') from None
  except Exception as e:  # TF's importer raises many kinds on a bad graph.
    raise FormError(f'{what}: its graph does not import: '
                    f'{type(e).__name__}: {_first_line(e)}') from None


def _first_line(error):
  text = str(error).strip()
  return text.splitlines()[0] if text else ''


def load(path: str, allow_ops: Iterable[str] = (), allow_any_op: bool = False,
         storage: storage_lib.Storage | None = None) -> form_lib.CanonicalForm:
  """The `CanonicalForm` saved at `path`, runnable without its builder's code.

  Refuses (`FormError`) a file that is not an intact form of a known format
  version, and a graph holding ops outside the default allowlist of pure
  computation: name extra ops in `allow_ops`, or pass `allow_any_op=True`,
  only for a file you trust.
  """
  path = os.fspath(path)
  return from_bytes(read_bytes(path, storage), path, allow_ops=allow_ops,
                    allow_any_op=allow_any_op)


def read_bytes(path, storage=None):
  """The raw contents of a form file (read through `storage`, the default if
  None); an unreadable file is a `FormError`."""
  try:
    return (storage or storage_lib.default()).read_bytes(path)
  except storage_lib.NotFound:
    raise FormError(f'{path}: cannot read the form: No such file or '
                    'directory.') from None
  except OSError as e:
    raise FormError(f'{path}: cannot read the form: {e.strerror or e}.') from None
