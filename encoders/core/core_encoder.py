"""The glue: a tree of encoding stages acting as one `Encoder`.

The root stage encodes the input; a child stage further encodes one of its
parent's compressible outputs. Every structure an `Encoder` returns mirrors the
tree, keyed as in tensor_encoding (`EncoderKeys`): a node's state is
`{STATE: ..., CHILDREN: {key: node}}`, its params `{PARAMS: ..., CHILDREN: ...}`,
its state updates `{TENSORS: ...}`, its input shapes `{SHAPE: ...}`, its
commuting flags `{COMMUTE: ...}`, and its encoded tensors
`{key: tensor or child's encoded}`. Children run in the name scope
`<stage name>/<key>/`, so graph names follow the tree.

Decoding can be split around a sum over clients: a node whose stage, and every
ancestor's stage, commutes with sum is decoded after the sum
(`decode_after_sum`); the rest is decoded before it (`decode_before_sum`).
"""

from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from encoders import errors
from encoders.core import encoding_stage
from encoders.core import xla_fusion
from encoders.core.tensor_types import TensorLike
from encoders.core.tensor_types import TensorStructure


class EncoderKeys:
  """The keys of the per-node structures an `Encoder` returns."""
  STATE = 'state'
  PARAMS = 'params'
  TENSORS = 'tensors'
  SHAPE = 'shape'
  COMMUTE = 'commute'
  CHILDREN = 'children'


CHILDREN = EncoderKeys.CHILDREN
STATE = EncoderKeys.STATE
PARAMS = EncoderKeys.PARAMS
TENSORS = EncoderKeys.TENSORS
SHAPE = EncoderKeys.SHAPE
COMMUTE = EncoderKeys.COMMUTE

# A structure that mirrors an encoder's tree of stages: per node
# `{<EncoderKeys key>: the stage's value, CHILDREN: {key: subtree}}`. The
# encoded tensors are the exception: `{key: tensor or child's encoded}`.
EncoderTree = dict[str, Any]


def _node(key, stage_value, children_values):
  return {key: stage_value, CHILDREN: children_values}


def _split_by_commuting(tree, key, commuting_structure):
  """(Before-sum part, after-sum part) of a per-node tree: each keeps its nodes' values."""
  before, after = {}, {}
  for child_key, child in tree[CHILDREN].items():
    before[child_key], after[child_key] = _split_by_commuting(
        child, key, commuting_structure[CHILDREN][child_key])
  value = tree[key]
  if commuting_structure[COMMUTE]:
    return _node(key, _cleared(value), before), _node(key, value, after)
  return _node(key, value, before), _node(key, _cleared(value), after)


def _cleared(value):
  """`value` with every entry None: a dict keeps its keys."""
  if isinstance(value, dict):
    return {k: None for k in value}
  return None


def split_params_by_commuting_structure(params, commuting_structure):
  """Splits params into those decoding before the sum and those after it."""
  return _split_by_commuting(params, PARAMS, commuting_structure)


def split_shapes_by_commuting_structure(shapes, commuting_structure):
  """Splits input shapes into those decoding before the sum and those after it."""
  return _split_by_commuting(shapes, SHAPE, commuting_structure)


def _static_or_dynamic_shape(x):
  """The shape as a Python list when static, else as a tensor."""
  if x.shape.is_fully_defined():
    return x.shape.as_list()
  return tf.shape(x)


class Encoder:
  """A tree of adaptive encoding stages, built by `EncoderComposer.make()`."""

  def __init__(self, stage: encoding_stage.Stage,
               children: Mapping[str, 'Encoder']):
    self._stage = encoding_stage.as_adaptive_encoding_stage(stage)
    self._children = dict(children)
    self._commutes = None  # Set by `_set_commuting` once the tree is built.
    self._fusion = None  # Set by `_set_fusion` at the root of a fused subtree.

  def _set_commuting(self, parent_commutes):
    self._commutes = bool(parent_commutes and self._stage.commutes_with_sum)
    for child in self._children.values():
      child._set_commuting(self._commutes)

  def _stages(self):
    yield self._stage
    for child in self._children.values():
      yield from child._stages()

  def _set_fusion(self, inside_fusion):
    """Fuses the largest subtrees XLA can compile as a whole (`xla_fusion`)."""
    fuse = not inside_fusion and xla_fusion.fusible(list(self._stages()))
    if fuse:
      self._fusion = xla_fusion.SubtreeFusion(
          self._encode_stages, self._decode_stages, SHAPE, CHILDREN)
    for child in self._children.values():
      child._set_fusion(inside_fusion or fuse)

  @property
  def stage(self) -> encoding_stage.AdaptiveEncodingStageInterface:
    return self._stage

  def __repr__(self) -> str:
    """The tree as `root(key: child, ...)`: `flatten(flattened_values: ...)`."""
    children = ', '.join(f'{key}: {child!r}'
                         for key, child in self._children.items())
    return f'{self._stage.name}({children})' if children else self._stage.name

  @property
  def children(self) -> dict[str, 'Encoder']:
    return dict(self._children)

  @property
  def commuting_structure(self) -> EncoderTree:
    """Per node: whether its decoding may happen after a sum."""
    return _node(COMMUTE, self._commutes, {
        key: child.commuting_structure
        for key, child in self._children.items()
    })

  @property
  def fully_commutes_with_sum(self) -> bool:
    return all(tf.nest.flatten(self.commuting_structure))

  @property
  def state_update_aggregation_modes(self) -> EncoderTree:
    return _node(TENSORS, dict(self._stage.state_update_aggregation_modes), {
        key: child.state_update_aggregation_modes
        for key, child in self._children.items()
    })

  def _children_call(self, call):
    """{key: call(key, child)}, each in the name scope `<stage>/<key>`."""
    if not self._children:
      return {}
    results = {}
    with tf.name_scope(self._stage.name):
      for key, child in self._children.items():
        with tf.name_scope(key):
          results[key] = call(key, child)
    return results

  def initial_state(self, name: str | None = None) -> EncoderTree:
    with tf.name_scope(name or 'encoder_initial_state'):
      return self._initial_state()

  def _initial_state(self):
    return _node(STATE, self._stage.initial_state(), self._children_call(
        lambda key, child: child._initial_state()))

  def update_state(self, state: EncoderTree, state_update_tensors: EncoderTree,
                   name: str | None = None) -> EncoderTree:
    with tf.name_scope(name or 'encoder_update_state'):
      return self._update_state(state, state_update_tensors)

  def _update_state(self, state, state_update_tensors):
    return _node(
        STATE,
        self._stage.update_state(state[STATE], state_update_tensors[TENSORS]),
        self._children_call(lambda key, child: child._update_state(
            state[CHILDREN][key], state_update_tensors[CHILDREN][key])))

  def get_params(self, state: EncoderTree,
                 name: str | None = None) -> tuple[EncoderTree, EncoderTree]:
    """Returns `(encode_params, decode_params)`, structured like the tree."""
    with tf.name_scope(name or 'encoder_get_params'):
      return self._get_params(state)

  def _get_params(self, state):
    encode_params, decode_params = self._stage.get_params(state[STATE])
    children = self._children_call(
        lambda key, child: child._get_params(state[CHILDREN][key]))
    return (_node(PARAMS, encode_params,
                  {k: p[0] for k, p in children.items()}),
            _node(PARAMS, decode_params,
                  {k: p[1] for k, p in children.items()}))

  def encode(
      self, x: TensorLike, encode_params: EncoderTree, name: str | None = None
  ) -> tuple[TensorStructure, EncoderTree, EncoderTree]:
    """Returns `(encoded_tensors, state_update_tensors, input_shapes)`."""
    with tf.name_scope(name or 'encoder_encode'):
      return self._encode(tf.convert_to_tensor(x), encode_params)

  def _encode(self, x, encode_params):
    if self._fusion is not None:
      return self._fusion.encode(x, encode_params)
    return self._encode_stages(x, encode_params)

  def _encode_stages(self, x, encode_params):
    encoded, state_update = self._stage.encode(x, encode_params[PARAMS])
    _check_encoded_keys(self._stage, encoded, self._children)
    encoded = dict(encoded)
    children = self._children_call(lambda key, child: child._encode(
        encoded[key], encode_params[CHILDREN][key]))
    for key, (child_encoded, _, _) in children.items():
      encoded[key] = child_encoded
    shape = (_static_or_dynamic_shape(x)
             if self._stage.decode_needs_input_shape else None)
    return (encoded,
            _node(TENSORS, state_update,
                  {k: c[1] for k, c in children.items()}),
            _node(SHAPE, shape, {k: c[2] for k, c in children.items()}))

  def decode(self, encoded_tensors: TensorStructure, decode_params: EncoderTree,
             shape: EncoderTree, name: str | None = None) -> tf.Tensor:
    """Fully decodes: the inverse of `encode`."""
    with tf.name_scope(name or 'encoder_decode'):
      return self._decode(encoded_tensors, decode_params, shape, None, False)

  def decode_before_sum(self, encoded_tensors: TensorStructure,
                        decode_params: EncoderTree, shape: EncoderTree,
                        name: str | None = None) -> TensorStructure:
    """Decodes the subtrees that do not commute with sum.

    Returns a tensor when the root does not commute, else the encoded structure
    with those subtrees replaced by their decoded tensors: the part to be summed.
    """
    with tf.name_scope(name or 'encoder_decode_before_sum'):
      return self._decode_before_sum(encoded_tensors, decode_params, shape)

  def _decode_before_sum(self, encoded_tensors, decode_params, shape):
    if not self._commutes:
      return self._decode(encoded_tensors, decode_params, shape, None, False)
    part = dict(encoded_tensors)
    part.update(self._children_call(lambda key, child: child._decode_before_sum(
        encoded_tensors[key], decode_params[CHILDREN][key],
        shape[CHILDREN][key])))
    return part

  def decode_after_sum(self, encoded_tensors: TensorStructure,
                       decode_params: EncoderTree, num_summands: TensorLike,
                       shape: EncoderTree,
                       name: str | None = None) -> tf.Tensor:
    """Decodes a sum of `num_summands` outputs of `decode_before_sum`."""
    with tf.name_scope(name or 'encoder_decode_after_sum'):
      return self._decode(encoded_tensors, decode_params, shape, num_summands,
                          True)

  def _decode(self, encoded_tensors, decode_params, shape, num_summands,
              after_sum):
    """Decodes every node, or after a sum only those that commute with it."""
    if after_sum and not self._commutes:
      return encoded_tensors
    if self._fusion is not None:
      return self._fusion.decode(encoded_tensors, decode_params, shape,
                                 num_summands, after_sum)
    return self._decode_stages(encoded_tensors, decode_params, shape,
                               num_summands, after_sum)

  def _decode_stages(self, encoded_tensors, decode_params, shape,
                     num_summands, after_sum):
    encoded = dict(encoded_tensors)
    encoded.update(self._children_call(lambda key, child: child._decode(
        encoded_tensors[key], decode_params[CHILDREN][key],
        shape[CHILDREN][key], num_summands, after_sum)))
    return self._stage.decode(encoded, decode_params[PARAMS],
                              num_summands=num_summands, shape=shape[SHAPE])


def _check_encoded_keys(stage, encoded, children):
  if not isinstance(encoded, dict):
    raise errors.InvalidTypeError(
        f'Stage {stage.name!r}: encode must return a dict of '
        f'tensors, got {type(encoded).__name__}.')
  missing = [key for key in children if key not in encoded]
  if missing:
    raise errors.InvalidValueError(
        f'Stage {stage.name!r}: encode returned no tensor for '
        f'key(s) {missing} that a child stage encodes; it '
        f'returned {sorted(encoded)}.')


class EncoderComposer:
  """Builds a tree of stages: `EncoderComposer(root).add_child(stage, key)...make()`."""

  def __init__(self, stage: encoding_stage.Stage):
    if not isinstance(stage, (encoding_stage.EncodingStageInterface,
                              encoding_stage.AdaptiveEncodingStageInterface)):
      raise errors.InvalidTypeError(
          'EncoderComposer takes an EncodingStageInterface or an '
          'AdaptiveEncodingStageInterface, got '
          f'{type(stage).__name__}.')
    self._stage = stage
    self._children = {}

  def add_child(self, stage: encoding_stage.Stage,
                key: str) -> 'EncoderComposer':
    """Encodes this stage's output `key` with `stage`; returns the child's composer."""
    _check_compressible(self._stage, key)
    if key in self._children:
      raise errors.StageKeyError(
          f'Stage {self._stage.name!r}: key {key!r} already has a child stage '
          f'({self._children[key]._stage.name!r}); each key takes one child.')
    child = EncoderComposer(stage)
    self._children[key] = child
    return child

  def add_parent(self, stage: encoding_stage.Stage,
                 key: str) -> 'EncoderComposer':
    """Makes `stage` the parent of this tree, fed by its output `key`; returns it."""
    parent = EncoderComposer(stage)
    _check_compressible(stage, key)
    parent._children[key] = self
    return parent

  def make(self) -> Encoder:
    """Returns the `Encoder` of the tree rooted here."""
    encoder = self._make()
    encoder._set_commuting(True)
    encoder._set_fusion(False)
    return encoder

  def _make(self):
    return Encoder(self._stage,
                   {key: child._make() for key, child in self._children.items()})


def _check_compressible(stage, key):
  keys = list(stage.compressible_tensors_keys)
  if key not in keys:
    raise errors.StageKeyError(
        f'Stage {stage.name!r}: key {key!r} is not one of its '
        f'compressible tensors keys {keys}, so no stage can '
        'encode it further.')
