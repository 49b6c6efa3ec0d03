"""What a form file holds, read without importing or running its graphs."""

import collections
import os

from canonical.core import types as ft
from canonical import form as form_lib
from canonical.form import FormError
from canonical.saving import form_file
from canonical.saving import op_allowlist
from canonical.saving import structure_coding


def describe_file(path):
  """A readable account of the form saved at `path`; raises `FormError`."""
  path = os.fspath(path)
  data = form_file.read_bytes(path)
  return describe(form_file.parse(data, path), path, len(data))


def _signature(piece, where):
  try:
    inputs = structure_coding.decode(piece.input_structure)
    output = structure_coding.decode(piece.output_structure)
  except structure_coding.StructureError as e:
    raise FormError(f'{where}: piece {piece.name!r}: bad structure: {e}') from None
  return ('(' + ', '.join(ft.form_text(s) for s in inputs) + ') -> ' +
          ft.form_text(output))


def describe(proto, where, size):
  """The text `describe_file` prints, from a parsed `fedcanon.Form`."""
  lines = [f'{where}: CanonicalForm {proto.name!r}' +
           (f': {proto.description}' if proto.description else ''),
           f'  format version {proto.format_version}, written by '
           f'{proto.producer_version} with TensorFlow '
           f'{proto.tensorflow_version}; {size:,} bytes',
           f'  {"piece":<17} {"ops":>6}  signature']
  allowed = op_allowlist.default_allowed_ops()
  refused = collections.defaultdict(set)
  for piece in proto.pieces:
    ops = list(op_allowlist.ops_of(piece.graph))
    for op, _ in ops:
      if op not in allowed:
        refused[op].add(piece.name)
    lines.append(f'  {piece.name:<17} {len(ops):>6}  '
                 f'{_signature(piece, where)}')

  def bits(field):
    return form_lib._human_bits(  # pylint: disable=protected-access
        getattr(proto, field) if proto.HasField(field) else None)

  lines.append(f'  C (broadcast, per client): {bits("broadcast_bits")}')
  lines.append(f'  U (aggregated, per client): {bits("aggregated_bits")}')
  for number, entry in enumerate(proto.secure_sums):
    lines.append(f'  secure sum {number}: '
                 f'{form_file._secure_sum(entry).describe()}')  # pylint: disable=protected-access
  if proto.encoders:
    lines.append('  encoders:')
    lines.extend(f'    {e.tensor}: {e.encoder}' for e in proto.encoders)
  else:
    lines.append('  encoders: none')
  for op, pieces in sorted(refused.items()):
    lines.append(f'  refused by default: op {op!r} in '
                 f'{", ".join(sorted(pieces))} (load with allow_ops)')
  return '\n'.join(lines)
