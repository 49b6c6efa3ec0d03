"""Names for the values the encoder interfaces pass, for their type hints.

TensorFlow gives no static type to a dict or a tf.nest tree of tensors, so
these aliases document what a method takes and returns; nothing checks them.
"""

from typing import Any

import tensorflow as tf

# A tensor, or what `tf.convert_to_tensor` takes (a numpy array, a number).
TensorLike = Any
# A tf.nest structure of tensors: nested dicts, lists and tuples of them.
TensorStructure = Any
# A stage's encoded tensors, params, state or state updates: str -> tensor
# (params may also hold Python values, such as a bit width).
TensorDict = dict[str, Any]
# The flat tensors the platform encoders (`SimpleEncoder`, `GatherEncoder`)
# return as a state, params or state update.
TensorTuple = tuple[tf.Tensor, ...]
# An input shape for `decode`: a 1-D int tensor, a list of ints or a fully
# defined `tf.TensorShape` (see `encoding_stage.shape_tensor`).
ShapeLike = tf.Tensor | list[int] | tf.TensorShape
