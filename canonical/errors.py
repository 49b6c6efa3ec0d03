"""The root of every error this project raises, so that a command line catches
one type and prints one `error:` line.

Each error also derives from the built-in kind it always was (`TypeError`,
`ValueError`, `OSError`, ...), so code that caught those still does. Errors
that tensor_encoding's interfaces raise (`encoders`, its `errors`) are of the
built-in kind it raises there, so its own tests' `assertRaises(ValueError)`
still hold.
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


class FederatedError(Error, TypeError):
  """A federated program is ill-typed or cannot be expressed; names where."""


class InvalidValueError(Error, ValueError):
  """An argument of the right kind but a wrong value (out of its range, an
  unknown name, a plan over its budget); the message names it."""


class InvalidTypeError(Error, TypeError):
  """An argument of the wrong kind; the message names it and what it takes."""


class FormError(Error, TypeError):
  """A canonical form is malformed (pieces whose types do not connect), or a
  form file is unusable; the message names the piece or file and the problem.
  (`canonical.FormError`; here so that reading a form file's header needs no
  TensorFlow.)"""
