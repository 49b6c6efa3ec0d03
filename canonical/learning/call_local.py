"""Python that makes `tf.Variable`s, run as a pure function of tensors.

TFF runs a `VariableModel`'s forward pass or a Keras metric's finalizer on
fresh variables at every call. `PureFunction(fn)` does the same anywhere (in
eager code, in any `tf.function`, inside a computation): each structure of
argument types traces `fn` once as a `tf_computation`, whose variables are
lowered into values (`canonical/core/local_variables.py`), and a call runs
that pure graph (in a graph: one call op, differentiable as any other).
"""

from typing import Callable

import tensorflow as tf

from canonical.core import computations


def _spec(value):
  tensor = tf.convert_to_tensor(value)
  return tf.TensorSpec(tensor.shape, tensor.dtype)


class PureFunction:
  """`fn(*args)` on fresh variables, as a pure function of its tensor
  arguments (structures of tensors; a dataset is not one here)."""

  def __init__(self, fn: Callable, name: str):
    self._fn = fn
    self._name = name
    self._traced = {}

  def __call__(self, *args):
    return self.traced(*args).invoke(*args)

  def traced(self, *args) -> computations.TFComputation:
    """The computation that calls on `args` run, traced already (so that
    its variables are made now, not inside what the call is made in)."""
    args = tf.nest.map_structure(tf.convert_to_tensor, args)
    specs = tuple(tf.nest.map_structure(_spec, arg) for arg in args)
    key = repr(specs)
    computation = self._traced.get(key)
    if computation is None:
      computation = computations.TFComputation(self._fn, specs,
                                               name=self._name)
      computation.concrete_function()
      self._traced[key] = computation
    return computation
