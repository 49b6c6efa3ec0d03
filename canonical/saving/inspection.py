"""What a form file holds, read without importing or running its graphs.

`describe_file` reads a form without TensorFlow where it can
(`tf_free_reader`: an intact local file of the snapshot's TensorFlow
version, whose structures have the shapes the loader writes), so that
`python -m canonical inspect` answers at once; anything else goes through
the loader's own checks (`form_file.parse`), which name what is wrong.
Both render the same text (`describe`).
"""

import collections
import os

from canonical.core import bits_text
from canonical.errors import FormError  # pylint: disable=unused-import  # Named here before.
from canonical.core import privacy_releases
from canonical.saving import op_allowlist
from canonical.saving import tf_free_reader


def describe_file(path):
  """A readable account of the form saved at `path`; raises `FormError`."""
  path = os.fspath(path)
  reading = tf_free_reader.read(path)
  if reading is not None:
    try:
      return describe(reading.proto, path, reading.size, reading.leaves)
    except tf_free_reader.Unsure:
      pass
  from canonical.saving import form_file  # pylint: disable=g-import-not-at-top
  data = form_file.read_bytes(path)
  return describe(form_file.parse(data, path), path, len(data))


class TensorFlowLeaves:
  """How the loader's own modules render a form's parts (imports
  TensorFlow)."""

  def __init__(self):
    from canonical.core import types as ft  # pylint: disable=g-import-not-at-top
    from canonical import form as form_lib  # pylint: disable=g-import-not-at-top
    from canonical.saving import form_file  # pylint: disable=g-import-not-at-top
    from canonical.saving import structure_coding  # pylint: disable=g-import-not-at-top
    self._ft, self._form_lib = ft, form_lib
    self._form_file, self._structure_coding = form_file, structure_coding
    self.allowed_ops = op_allowlist.default_allowed_ops()

  def signature(self, piece, where):
    try:
      inputs = self._structure_coding.decode(piece.input_structure)
      output = self._structure_coding.decode(piece.output_structure)
    except self._structure_coding.StructureError as e:
      raise self._form_lib.FormError(
          f'{where}: piece {piece.name!r}: bad structure: {e}') from None
    if not isinstance(inputs, (tuple, list)):
      raise self._form_lib.FormError(
          f'{where}: piece {piece.name!r}: bad structure: its inputs are a '
          f'{type(inputs).__name__}, not a tuple of arguments')
    text = self._ft.form_text
    return '(' + ', '.join(text(s) for s in inputs) + ') -> ' + text(output)

  def secure_sum(self, entry, where):
    try:
      return self._form_file._secure_sum(entry).describe()  # pylint: disable=protected-access
    except KeyError:
      raise self._form_lib.FormError(
          f'{where}: unknown secure sum {entry.kind!r}.') from None

  def bits(self, bits):
    return bits_text.human_bits(bits)


def describe(proto, where, size, leaves=None):
  """The text `describe_file` prints, from a parsed `fedcanon.Form`;
  `leaves` renders its parts (`TensorFlowLeaves` if None)."""
  leaves = leaves or TensorFlowLeaves()
  lines = [f'{where}: CanonicalForm {proto.name!r}' +
           (f': {proto.description}' if proto.description else ''),
           f'  format version {proto.format_version}, written by '
           f'{proto.producer_version} with TensorFlow '
           f'{proto.tensorflow_version}; {size:,} bytes',
           f'  {"piece":<17} {"ops":>6}  signature']
  refused = collections.defaultdict(set)
  for piece in proto.pieces:
    ops = list(op_allowlist.ops_of(piece.graph))
    for op, _ in ops:
      if op not in leaves.allowed_ops:
        refused[op].add(piece.name)
    lines.append(f'  {piece.name:<17} {len(ops):>6}  '
                 f'{leaves.signature(piece, where)}')

  def bits(field):
    return leaves.bits(getattr(proto, field) if proto.HasField(field)
                       else None)

  lines.append(f'  C (broadcast, per client): {bits("broadcast_bits")}')
  lines.append(f'  U (aggregated, per client): {bits("aggregated_bits")}')
  for number, entry in enumerate(proto.secure_sums):
    lines.append(f'  secure sum {number}: {leaves.secure_sum(entry, where)}')
  if proto.encoders:
    lines.append('  encoders:')
    lines.extend(f'    {e.tensor}: {e.encoder}' for e in proto.encoders)
  else:
    lines.append('  encoders: none')
  for release in proto.privacy_releases:
    lines.append('  differential privacy, each round: ' +
                 privacy_releases.Release.of_message(release).describe())
  for op, pieces in sorted(refused.items()):
    lines.append(f'  refused by default: op {op!r} in '
                 f'{", ".join(sorted(pieces))} (load with allow_ops)')
  return '\n'.join(lines)
