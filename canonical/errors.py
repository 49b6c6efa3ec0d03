"""The root of every error this project raises, so that a command line catches
one type and prints one `error:` line.

Each error also derives from the built-in kind it always was (`TypeError`,
`ValueError`, `OSError`, ...), so code that caught those still does. `Error`,
`InvalidValueError` and `InvalidTypeError` are `encoders.errors`' (the bottom
layer's), so the encoders' errors are `canonical.Error`s too.
"""


# The root and the two kinds every layer raises live in the bottom layer.
from encoders.errors import Error
from encoders.errors import InvalidTypeError
from encoders.errors import InvalidValueError


class FederatedError(Error, TypeError):
  """A federated program is ill-typed or cannot be expressed; names where."""


class FormError(Error, TypeError):
  """A canonical form is malformed (pieces whose types do not connect), or a
  form file is unusable; the message names the piece or file and the problem.
  (`canonical.FormError`; here so that reading a form file's header needs no
  TensorFlow.)"""
