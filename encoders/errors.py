"""The errors `encoders` raises: `canonical.errors`' own (so a command line
catches `canonical.Error`, also when one is raised while a `tf.function`
traces a stage), each of the built-in kind tensor_encoding raises there (so
its tests' `assertRaises(ValueError)` hold).
"""

from canonical import errors
from canonical.errors import InvalidTypeError  # pylint: disable=unused-import
from canonical.errors import InvalidValueError  # pylint: disable=unused-import


class StageKeyError(errors.Error, KeyError):
  """`EncoderComposer` was given a key of a stage's output that no stage can
  encode (not one of its compressible tensors keys, or already taken); the
  message names the stage and the key. A `KeyError`, as in tensor_encoding."""
