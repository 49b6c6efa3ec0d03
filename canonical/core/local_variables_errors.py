"""The error of the call-local variable pass, apart so that tracing and
lowering both raise it without depending on each other."""

from canonical import errors


class Unsupported(errors.FederatedError):
  """A call-local variable is used in a way this pass does not lower."""
