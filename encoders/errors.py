"""The root of every error this project raises (`canonical.errors` builds on
it), here in the bottom layer so that every package can derive from it
without importing upward.

Each error also derives from the built-in kind it always was, so code that
caught a `ValueError` or a `TypeError` still does, and tensor_encoding's own
tests' `assertRaises(ValueError)` hold for the encoders.
"""


class Error(Exception):
  """An error of this project: bad input, or a round that cannot go on; the
  message names what is wrong and where.

  It takes `Exception`'s own constructor: AutoGraph, when an error is raised
  while a `tf.function` traces, raises it again as itself only for the
  built-in kinds and for classes with that constructor; any other becomes a
  `StagingError`, neither a `ValueError` nor an `Error`.
  """
  __init__ = Exception.__init__


class InvalidValueError(Error, ValueError):
  """An argument of the right kind but a wrong value (out of its range, an
  unknown name, a plan over its budget); the message names it."""


class InvalidTypeError(Error, TypeError):
  """An argument of the wrong kind; the message names it and what it takes."""


class StageKeyError(Error, KeyError):
  """`EncoderComposer` was given a key of a stage's output that no stage can
  encode (not one of its compressible tensors keys, or already taken); the
  message names the stage and the key. A `KeyError`, as in tensor_encoding."""
