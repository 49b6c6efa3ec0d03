"""TFF 0.87's `save_functional_model` / `load_functional_model`: a
`FunctionalModel` as one self-contained file, loadable and trainable in a
fresh process without the Python that made it.

TFF writes a SavedModel directory; ours is one file in the format of a
saved form (the same envelope, a `fedcanon.Form` message as container,
written through `canonical.io`, so any path it reaches), holding one pure
piece per function of the model, each a GraphDef:

| piece | inputs -> output |
|---|---|
| initial_weights | () -> (trainable, non_trainable) |
| split_batch | (batch) -> (x, y): keeps `input_spec` |
| predict_on_batch_training | (weights, x) -> predictions |
| predict_on_batch_inference | (weights, x) -> predictions |
| loss | (predictions, label) -> loss |
| initialize_metrics_state | () -> state |
| update_metrics_state | (state, label, BatchOutput) -> state |
| finalize_metrics | (state) -> metrics |

Each piece takes and returns flat lists of tensors; the file's description
(JSON) keeps every structure's containers, so a loaded model gives back
OrderedDicts in their order. Loading checks each graph as loading a form
does (the op allowlist, no function outside the file). Unlike TFF's, the
metrics functions are saved too (TFF's loaded model has none); the loss is
saved for `sample_weight=None`, as TFF's.
"""

import collections
import importlib.metadata
import json

import numpy as np
import tensorflow as tf
from google.protobuf import message

from canonical import errors
from canonical import form as form_lib
from canonical import io as storage_lib
from canonical.learning import functional
from canonical.learning.model_weights import ModelWeights
from canonical.saving import canonical_form_pb2
from canonical.saving import envelope
from canonical.saving import graph_checks
from canonical.saving import graph_piece
from canonical.saving import op_allowlist
from canonical.saving import structure_coding

MODEL_NAME = 'tff.learning.models.FunctionalModel'
_FORMAT = 1
_PIECES = ('initial_weights', 'split_batch', 'predict_on_batch_training',
           'predict_on_batch_inference', 'loss', 'initialize_metrics_state',
           'update_metrics_state', 'finalize_metrics')
_NAMED_TUPLES = {'BatchOutput': functional.BatchOutput,
                 'ModelWeights': ModelWeights}


class ModelFileError(errors.Error, ValueError):
  """A file that is not an intact saved functional model; names the file."""


# Structures as JSON: the containers, in their order, with leaves marked.

def _skeleton(structure):
  if isinstance(structure, collections.OrderedDict):
    return {'odict': [[k, _skeleton(v)] for k, v in structure.items()]}
  if isinstance(structure, collections.abc.Mapping):
    return {'dict': [[k, _skeleton(structure[k])] for k in sorted(structure)]}
  fields = getattr(structure, '_fields', None)
  if isinstance(structure, tuple) and fields is not None:
    return {'namedtuple': type(structure).__name__, 'fields': list(fields),
            'items': [_skeleton(v) for v in structure]}
  if isinstance(structure, tuple):
    return {'tuple': [_skeleton(v) for v in structure]}
  if isinstance(structure, list):
    return {'list': [_skeleton(v) for v in structure]}
  return 'leaf'


def _template(skeleton):
  """A structure of `skeleton`'s containers with 0 at each leaf."""
  if skeleton == 'leaf':
    return 0
  if not isinstance(skeleton, dict) or len(skeleton) not in (1, 3):
    raise ModelFileError(f'bad structure {skeleton!r}')
  if 'odict' in skeleton:
    return collections.OrderedDict(
        (k, _template(v)) for k, v in skeleton['odict'])
  if 'dict' in skeleton:
    return {k: _template(v) for k, v in skeleton['dict']}
  if 'tuple' in skeleton:
    return tuple(_template(v) for v in skeleton['tuple'])
  if 'list' in skeleton:
    return [_template(v) for v in skeleton['list']]
  if 'namedtuple' in skeleton:
    name, fields = skeleton['namedtuple'], tuple(skeleton['fields'])
    cls = _NAMED_TUPLES.get(name)
    if cls is None or cls._fields != fields:
      cls = collections.namedtuple(name, fields)
    return cls(*(_template(v) for v in skeleton['items']))
  raise ModelFileError(f'bad structure {skeleton!r}')


def _spec(value):
  if isinstance(value, tf.TensorSpec):
    return tf.TensorSpec(value.shape, value.dtype)
  return tf.TensorSpec.from_tensor(tf.convert_to_tensor(value))


class _Flat:
  """A function of structures as a piece of flat tensor lists."""

  def __init__(self, name, fn, arguments):
    self.name = name
    self.fn = fn
    self.argument_templates = arguments
    self.output_skeleton = None

  def piece(self):
    arguments = self.argument_templates

    def flat_fn(*flat_arguments):
      structured = [tf.nest.pack_sequence_as(t, list(f))
                    for t, f in zip(arguments, flat_arguments)]
      result = self.fn(*structured)
      self.output_skeleton = _skeleton(result)
      return tuple(tf.convert_to_tensor(t) for t in tf.nest.flatten(result))

    input_specs = tuple(tuple(_spec(s) for s in tf.nest.flatten(a))
                        for a in arguments)
    return form_lib.Piece(name=self.name, function=flat_fn,
                          input_specs=input_specs)


def _flat_functions(model):
  """The model's functions as `_Flat`s, traced in order (each one's
  output structure types the next one's arguments)."""
  weights = model.weights_spec
  weights = (weights.trainable, weights.non_trainable)
  batch = functional.split_batch(model.batch_spec)
  x_spec, y_spec = batch

  def traced(flat):
    piece = flat.piece()
    piece.concrete_function  # pylint: disable=pointless-statement
    return piece, flat.output_skeleton

  made = {}

  def add(name, fn, *arguments):
    flat = _Flat(name, fn, arguments)
    piece, skeleton = traced(flat)
    output = tf.nest.map_structure(
        lambda t: tf.TensorSpec(t.shape, t.dtype),
        piece.concrete_function.structured_outputs)
    made[name] = (piece, [_skeleton(a) for a in arguments], skeleton)
    return tf.nest.pack_sequence_as(_template(skeleton), list(output))

  initial = model.initial_model_weights
  add('initial_weights',
      lambda: (tuple(tf.constant(w) for w in initial.trainable),
               tuple(tf.constant(w) for w in initial.non_trainable)))
  add('split_batch', functional.split_batch, model.batch_spec)
  predictions = add(
      'predict_on_batch_training',
      lambda w, x: model.predict_on_batch(w, x, training=True), weights,
      x_spec)
  add('predict_on_batch_inference',
      lambda w, x: model.predict_on_batch(w, x, training=False), weights,
      x_spec)
  loss = add('loss', lambda out, y: model.loss(out, y), predictions, y_spec)
  state = add('initialize_metrics_state', model.initialize_metrics_state)
  batch_output = functional.BatchOutput(
      loss=loss, predictions=predictions,
      num_examples=tf.TensorSpec([], tf.int32))
  add('update_metrics_state',
      lambda s, y, out: model.update_metrics_state(s, y, out), state, y_spec,
      batch_output)
  add('finalize_metrics', model.finalize_metrics, state)
  return made


def _producer_version():
  try:
    return 'fedcanon ' + importlib.metadata.version('fedcanon')
  except importlib.metadata.PackageNotFoundError:
    return 'fedcanon (not installed)'


def save_functional_model(functional_model, path):
  """Writes `functional_model` to the file `path` (local, or any storage
  `canonical.io` reaches), whole or not at all."""
  who = 'save_functional_model'
  if not isinstance(functional_model, functional.FunctionalModel):
    raise errors.InvalidTypeError(
        f'{who}: expected a tff.learning.models.FunctionalModel, got '
        f'{type(functional_model).__name__}.')
  if not isinstance(path, str) or not path:
    raise errors.InvalidValueError(
        f'{who}: path must be a non-empty string, got {path!r}.')
  try:
    made = _flat_functions(functional_model)
  except (form_lib.FormError, errors.FederatedError) as e:
    raise errors.InvalidValueError(f'{who}: {e}') from e
  description = {'format': _FORMAT, 'pieces': {
      name: {'inputs': inputs, 'output': output}
      for name, (_, inputs, output) in made.items()}}
  proto = canonical_form_pb2.Form(
      format_version=envelope.FIRST_VERSION,
      producer_version=_producer_version(),
      tensorflow_version=tf.__version__, name=MODEL_NAME,
      description=json.dumps(description, sort_keys=True),
      pieces=[graph_piece.export_piece(piece)
              for piece, _, _ in made.values()])
  data = envelope.wrap(proto.SerializeToString(deterministic=True))
  return storage_lib.default().write_bytes(path, data, sync=True)


def _load_piece(proto, where):
  what = f'{where}: piece {proto.name!r}'
  refused = op_allowlist.refused_op(proto.graph,
                                    op_allowlist.default_allowed_ops())
  if refused:
    op, node = refused
    raise ModelFileError(f'{what} holds op {op!r} ({node}), which is not in '
                         'the allowlist of pure computation.')
  try:
    input_specs = structure_coding.decode(proto.input_structure)
    output_spec = structure_coding.decode(proto.output_structure)
  except structure_coding.StructureError as e:
    raise ModelFileError(
        f'{what}: bad input or output structure: {e}') from None
  graph_def = tf.compat.v1.GraphDef()
  graph_def.CopyFrom(proto.graph)
  for node in graph_def.node:
    node.device = ''
  for function in graph_def.library.function:
    for node in function.node_def:
      node.device = ''
  try:
    graph_checks.seal(graph_def)
    return graph_piece.GraphPiece(proto.name, graph_def, input_specs,
                                  proto.input_tensors, output_spec,
                                  proto.output_tensors)
  except (graph_checks.GraphCheckError, graph_piece.BindingError) as e:
    raise ModelFileError(f'{what}: {e}.') from None
  except Exception as e:  # TF's importer raises many kinds on a bad graph.
    raise ModelFileError(f'{what}: its graph does not import: '
                         f'{type(e).__name__}: {e}') from None


def _parse(data, where):
  try:
    payload, version = envelope.unwrap(data, where)
  except form_lib.FormError as e:
    raise ModelFileError(str(e).replace('a saved canonical form',
                                        'a saved functional model')) from None
  proto = canonical_form_pb2.Form()
  try:
    proto.ParseFromString(payload)
  except (message.DecodeError, RecursionError, ValueError) as e:
    raise ModelFileError(f'{where}: the file does not parse ({e}).') from None
  if proto.format_version != version or proto.name != MODEL_NAME:
    raise ModelFileError(
        f'{where}: not a saved functional model (it holds {proto.name!r}); '
        'a saved form loads with tff.load.')
  try:
    description = json.loads(proto.description)
  except ValueError as e:
    raise ModelFileError(f'{where}: bad description ({e}).') from None
  if not isinstance(description, dict) or description.get(
      'format') != _FORMAT:
    raise ModelFileError(f'{where}: unknown model format.')
  names = [p.name for p in proto.pieces]
  if sorted(names) != sorted(_PIECES):
    raise ModelFileError(f'{where}: pieces {names}, expected {list(_PIECES)}.')
  return proto, description['pieces']


class _Loaded:
  """One loaded piece, called with and returning structures."""

  def __init__(self, piece, skeletons):
    self._piece = piece
    self._inputs = [_template(s) for s in skeletons['inputs']]
    self._output = _template(skeletons['output'])

  def __call__(self, *arguments):
    flat = tuple(tuple(tf.nest.flatten(a)) for a in arguments)
    result = self._piece(*flat)
    return tf.nest.pack_sequence_as(self._output, list(result))

  @property
  def argument_templates(self):
    return self._inputs


def load_functional_model(path):
  """The `FunctionalModel` saved at `path`, running the saved graphs."""
  who = 'load_functional_model'
  if not isinstance(path, str) or not path:
    raise errors.InvalidValueError(
        f'{who}: path must be a non-empty string, got {path!r}.')
  try:
    data = storage_lib.default().read_bytes(path)
  except storage_lib.NotFound:
    raise ModelFileError(f'{path}: no such file.') from None
  proto, skeletons = _parse(data, path)
  loaded = {}
  for piece_proto in proto.pieces:
    try:
      loaded[piece_proto.name] = _Loaded(_load_piece(piece_proto, path),
                                         skeletons[piece_proto.name])
    except (KeyError, TypeError) as e:
      raise ModelFileError(f'{path}: piece {piece_proto.name!r} has no '
                           f'structure ({e}).') from None
  initial = tf.nest.map_structure(np.asarray, loaded['initial_weights']())
  batch_spec = tf.nest.pack_sequence_as(
      loaded['split_batch'].argument_templates[0],
      list(_input_specs(proto, 'split_batch')[0]))

  def predict_on_batch(model_weights, x, training=True):
    name = ('predict_on_batch_training' if training else
            'predict_on_batch_inference')
    trainable, non_trainable = model_weights
    return loaded[name]((tuple(trainable), tuple(non_trainable)), x)

  def loss(output, label, sample_weight=None):
    if sample_weight is not None:
      raise errors.InvalidValueError(
          f'{path}: a loaded model\'s loss was saved for sample_weight=None '
          'only (as TFF saves it).')
    return loaded['loss'](output, label)

  def update(state, labels, batch_output, sample_weight=None):
    del sample_weight  # Saved without, as TFF's metrics functions take it.
    batch_output = functional.BatchOutput(
        loss=batch_output.loss, predictions=batch_output.predictions,
        num_examples=tf.cast(batch_output.num_examples, tf.int32))
    return loaded['update_metrics_state'](state, labels, batch_output)

  return functional.FunctionalModel(
      initial_weights=initial, predict_on_batch_fn=predict_on_batch,
      loss_fn=loss,
      metrics_fns=(loaded['initialize_metrics_state'], update,
                   loaded['finalize_metrics']),
      input_spec=batch_spec)


def _input_specs(proto, name):
  """The input specs piece `name` of `proto` declares."""
  for piece in proto.pieces:
    if piece.name == name:
      return structure_coding.decode(piece.input_structure)
  raise ModelFileError(f'no piece {name!r}')
