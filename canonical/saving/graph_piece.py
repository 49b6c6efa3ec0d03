"""A piece as a self-contained GraphDef with bindings, and `GraphPiece`, which runs one.

Exporting replaces every value a piece captured from the Python world (an
eager tensor such as initial weights) by a constant, so the GraphDef needs
nothing else; functions, XLA-compiled ones included, travel in its library.
Importing runs the GraphDef through `tf.compat.v1.wrap_function` and prunes it
to the bound inputs and outputs: a `tf.data.Dataset` is fed by its variant
tensor.
"""

import tensorflow as tf

from canonical.core import types as ft
from canonical.core import unrolled_datasets
from canonical import errors
from canonical import form as form_lib
from canonical.saving import canonical_form_pb2
from canonical.saving import structure_coding


class BindingError(errors.Error, ValueError):
  """A piece's bindings do not fit its graph or its structures."""


def export_piece(piece):
  """The `fedcanon.Piece` of an in-memory piece; raises `FormError`."""
  function = piece.concrete_function
  graph = function.graph
  flat_inputs = structure_coding.flat_specs(piece.input_specs)
  captures = list(graph.captures)
  if len(function.inputs) != len(flat_inputs) + len(captures):
    raise form_lib.FormError(
        f'Piece {piece.name!r}: cannot save it: its graph takes '
        f'{len(function.inputs)} inputs for {len(flat_inputs)} declared '
        f'tensors and {len(captures)} captured values.')
  if getattr(graph, 'deferred_external_captures', None):
    raise form_lib.FormError(
        f'Piece {piece.name!r}: cannot save it: it captures values by '
        'reference (tf.function capture_call_time_value); capture by value.')
  graph_def = graph.as_graph_def()
  try:
    unrolled_datasets.freeze_captures(graph_def, captures)
  except unrolled_datasets.Unsupported as e:
    raise form_lib.FormError(
        f'Piece {piece.name!r}: cannot save it: {e}; pieces must be pure '
        'functions of their inputs.') from None
  outputs = tf.nest.flatten(function.structured_outputs)
  for output in outputs:
    if not tf.is_tensor(output):
      raise form_lib.FormError(
          f'Piece {piece.name!r}: cannot save it: it returns a '
          f'{type(output).__name__}; saved pieces return tensors.')
  try:
    input_structure = structure_coding.encode(tuple(piece.input_specs))
    output_structure = structure_coding.encode(piece.output_spec)
  except Exception as e:  # The coder raises several kinds.
    raise form_lib.FormError(
        f'Piece {piece.name!r}: cannot save its structure '
        f'{piece.signature()}: {type(e).__name__}: {e}') from e
  return canonical_form_pb2.Piece(
      name=piece.name, graph=graph_def, input_structure=input_structure,
      input_tensors=[t.name for t in function.inputs[:len(flat_inputs)]],
      output_structure=output_structure,
      output_tensors=[t.name for t in outputs])


class GraphPiece(form_lib.Piece):
  """A piece loaded from a GraphDef: runs without the code that built it."""

  def __init__(self, name, graph_def, input_specs, input_tensors, output_spec,
               output_tensors):
    super().__init__(name=name, function=None, input_specs=input_specs)
    self.graph_def = graph_def
    self._output_spec = output_spec
    self._bindings = (list(input_tensors), list(output_tensors))
    self._concrete = _import(graph_def, self.input_specs, list(input_tensors),
                             output_spec, list(output_tensors))

  def _call(self, *args):
    values = self.flat_arguments(args)
    flat = [self._feed(spec, value) for spec, value in zip(
        structure_coding.flat_specs(self.input_specs), values)]
    outputs = self._concrete(*flat)
    return tf.nest.pack_sequence_as(self.output_spec, list(outputs))

  def _graph(self):
    return (self.graph_def,) + self._bindings

  def _feed(self, spec, value):
    """The tensor fed for one input: a dataset's variant, or a checked tensor."""
    if isinstance(spec, tf.data.DatasetSpec):
      self.raise_for_mismatch(spec, value)
      return value._variant_tensor  # pylint: disable=protected-access
    return form_lib.tensor_of(self, spec, value)

  def op_count(self):
    return len(self.graph_def.node) + sum(
        len(f.node_def) for f in self.graph_def.library.function)


def _import(graph_def, input_specs, input_tensors, output_spec,
            output_tensors):
  """The pruned function of `graph_def`; raises `BindingError` on a mismatch."""
  flat_inputs = structure_coding.flat_specs(input_specs)
  flat_outputs = structure_coding.flat_specs(output_spec)
  if len(input_tensors) != len(flat_inputs):
    raise BindingError(f'{len(input_tensors)} input tensors bound for '
                       f'{len(flat_inputs)} inputs {_describe(input_specs)}')
  if len(output_tensors) != len(flat_outputs):
    raise BindingError(f'{len(output_tensors)} output tensors bound for '
                       f'{len(flat_outputs)} outputs '
                       f'{ft.form_text(output_spec)}')
  for spec in flat_outputs:
    if not isinstance(spec, tf.TensorSpec):
      raise BindingError(f'an output is {ft.form_text(spec)}; saved pieces '
                         'return tensors')

  def import_graph():
    tf.compat.v1.import_graph_def(graph_def, name='')

  wrapped = tf.compat.v1.wrap_function(import_graph, [])
  graph = wrapped.graph
  feeds = [_tensor(graph, name, 'input') for name in input_tensors]
  fetches = [_tensor(graph, name, 'output') for name in output_tensors]
  for tensor, spec in zip(feeds, flat_inputs):
    if tensor.op.type != 'Placeholder':
      raise BindingError(f'input {tensor.name!r} is a {tensor.op.type}, not '
                         'a Placeholder')
    dtype = tf.variant if isinstance(spec, tf.data.DatasetSpec) else spec.dtype
    _check_tensor(tensor, dtype, getattr(spec, 'shape', None), 'input',
                  ft.form_text(spec))
  for tensor, spec in zip(fetches, flat_outputs):
    _check_tensor(tensor, spec.dtype, spec.shape, 'output', ft.form_text(spec))
  fed = {t.op.name for t in feeds}
  if len(fed) != len(feeds):
    raise BindingError('an input tensor is bound twice')
  for op in graph.get_operations():
    if op.type == 'Placeholder' and op.name not in fed:
      raise BindingError(f'placeholder {op.name!r} is bound to no input')
  # With its signature, a call binds its arguments directly; without, TF
  # first tries an empty signature and formats every argument's values into
  # the error it falls back from (~0.4 ms a call).
  signature = tuple(tf.TensorSpec(t.shape, t.dtype) for t in feeds)
  return wrapped.prune(feeds, fetches, input_signature=(signature, {}))


def _tensor(graph, name, role):
  try:
    return graph.get_tensor_by_name(name)
  except (KeyError, ValueError, TypeError) as e:
    raise BindingError(f'{role} tensor {name!r} is not in the graph: {e}') from e


def _check_tensor(tensor, dtype, shape, role, declared):
  if tensor.dtype != dtype or (
      shape is not None and not tensor.shape.is_compatible_with(shape)):
    raise BindingError(
        f'{role} tensor {tensor.name!r} is {tensor.dtype.name}'
        f'{tensor.shape}, but the piece declares {declared}')


def _describe(input_specs):
  return '(' + ', '.join(ft.form_text(s) for s in input_specs) + ')'
