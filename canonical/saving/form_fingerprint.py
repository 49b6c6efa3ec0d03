"""`fingerprint(form)`: one digest for what a form computes.

Names in a form's graphs are not stable: TensorFlow names traced functions
and Keras names layers by per-process counters (`__inference_step_471`,
`conv2d_1_1/Relu`), and a loaded form's functions carry a suffix of their
content. So the fingerprint hashes what names cannot change: the form's
name, encoders and bits, each piece's signature, and the multiset of its
nodes by op and attributes (constants included; names, wiring, devices and
TensorFlow's private `_` attributes left out). The same process compiled in
two processes, or saved and loaded, has one fingerprint; another learning
rate, initial weight, layer or encoder gives another.
"""

import hashlib

from canonical.saving import graph_piece


def fingerprint(form):
  """The hex SHA-256 of what `form` computes (see the module docstring)."""
  digest = hashlib.sha256()
  _add(digest, form.name, repr(sorted(form.encoders.items())),
       repr((form.broadcast_bits, form.aggregated_bits)))
  for name in sorted(form.pieces):
    piece = form.pieces[name]
    graph = piece.graph_def if isinstance(piece, graph_piece.GraphPiece) \
        else graph_piece.export_piece(piece).graph
    nodes = list(graph.node) + [n for f in graph.library.function
                                for n in f.node_def]
    _add(digest, name, piece.signature(), *sorted(
        _content(node) for node in nodes))
  return digest.hexdigest()


def _add(digest, *parts):
  for part in parts:
    part = part if isinstance(part, bytes) else part.encode()
    digest.update(len(part).to_bytes(8, 'little') + part)


def _content(node):
  """A node's op, input count and public attributes, names blanked."""
  parts = [node.op.encode(), str(len(node.input)).encode()]
  for key in sorted(node.attr):
    if key.startswith('_'):
      continue
    value = type(node.attr[key])()
    value.CopyFrom(node.attr[key])
    _blank_function_names(value)
    parts += [key.encode(), value.SerializeToString(deterministic=True)]
  return b'\0'.join(parts)


def _blank_function_names(value):
  kind = value.WhichOneof('value')
  name_lists = [value.func] if kind == 'func' else (
      list(value.list.func) if kind == 'list' else [])
  for name_list in name_lists:
    name_list.name = ''
    for nested in name_list.attr.values():
      _blank_function_names(nested)
