"""Runs a subtree of stages as one XLA computation, so their passes fuse.

Between a parent stage and its child, the parent's output is written to memory
and read back: a quantizer's levels before the packer packs them are 40 MB at
1e7 float32 values, and a buffer that large is also fresh memory the kernel
must page in. Compiled together, XLA fuses the stages' element-wise work, so
encoding reads the input once and writes only the packed words, and decoding
writes only the result.

A subtree is fused when every stage in it declares `xla_compatible` (its ops
compile under XLA once the input's shape is known) and it has at least two
stages. Stages draw fresh noise through `seeds`; inside the computation those
draws derive from one seed drawn outside it (`seeds.noise_source`), since a
stateful op inside XLA would not follow TensorFlow's global seed.
"""

import weakref

import tensorflow as tf

from encoders.core import seeds


def fusible(stages):
  """Whether a subtree of these stages is worth compiling as one computation."""
  return len(stages) >= 2 and all(
      getattr(stage, 'xla_compatible', False) for stage in stages)


class SubtreeFusion:
  """`encode` and `decode` of a subtree, each one XLA computation.

  `encode_stages(x, params)` returns `(encoded, state_updates, shapes)`, where
  `shapes` is a per-node tree `{shape_key: list, tensor or None, children_key:
  {...}}`; `decode_stages(encoded, params, shapes, num_summands, after_sum)`
  its inverse. Shapes known at trace time stay Python lists (decoding then
  keeps static shapes): a compiled function can only return tensors, so those
  are kept aside per traced graph and merged back in.
  """

  def __init__(self, encode_stages, decode_stages, shape_key, children_key):
    self._encode_stages = encode_stages
    self._decode_stages = decode_stages
    self._shape_key = shape_key
    self._children_key = children_key
    self._static_shapes = weakref.WeakKeyDictionary()
    self._encode = tf.function(self._traced_encode, jit_compile=True,
                               autograph=False)
    self._decode = tf.function(decode_stages, jit_compile=True,
                               autograph=False)

  def encode(self, x, params):
    args = (x, params) + seeds.noise_source()
    graph = self._encode.get_concrete_function(*args).graph
    encoded, state_updates, dynamic_shapes = self._encode(*args)
    return (encoded, state_updates,
            self._merged(self._static_shapes[graph], dynamic_shapes))

  def decode(self, encoded, params, shapes, num_summands, after_sum):
    return self._decode(encoded, params, shapes, num_summands, after_sum)

  def _traced_encode(self, x, params, pure, noise):
    with seeds.drawing_from(pure, noise):
      encoded, state_updates, shapes = self._encode_stages(x, params)
    self._static_shapes[tf.compat.v1.get_default_graph()] = self._mapped(
        shapes, lambda shape: None if tf.is_tensor(shape) else shape)
    return encoded, state_updates, self._mapped(
        shapes, lambda shape: shape if tf.is_tensor(shape) else None)

  def _mapped(self, shapes, fn):
    return {self._shape_key: fn(shapes[self._shape_key]),
            self._children_key: {
                key: self._mapped(child, fn)
                for key, child in shapes[self._children_key].items()}}

  def _merged(self, static, dynamic):
    shape = dynamic[self._shape_key]
    return {self._shape_key: static[self._shape_key] if shape is None else shape,
            self._children_key: {
                key: self._merged(child, dynamic[self._children_key][key])
                for key, child in static[self._children_key].items()}}
