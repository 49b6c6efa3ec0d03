"""Where a federated computation runs when Python calls it (TFF's execution
context): `fn(*args)` outside tracing runs `fn` by the executor installed
here, and returns numpy values, as TFF 0.87 does.

The language does not know its executors; `canonical` installs the reference
executor (`canonical.executors.reference.run`) when it is imported.
"""

import tensorflow as tf

from canonical import errors

_executor = None


def set_executor(executor):
  """Calls of federated computations run by `executor(computation, *args)`
  from now on; returns the one it replaces."""
  global _executor
  previous, _executor = _executor, executor
  return previous


def run(computation, *args):
  """Runs `computation` on `args` by the installed executor."""
  if _executor is None:
    raise errors.FederatedError(
        f'{computation.describe_for_error()} was called, but no executor is '
        'installed to run it (import canonical to install the reference '
        'executor).')
  return as_numpy(_executor(computation, *args))


def as_numpy(result):
  """`result` with numpy values for tensors, as TFF 0.87 gives them to
  Python (datasets stay datasets)."""
  if not tf.executing_eagerly():
    return result  # Called while tracing TensorFlow: symbolic tensors.
  return tf.nest.map_structure(
      lambda v: v.numpy() if isinstance(v, tf.Tensor) else v, result)
