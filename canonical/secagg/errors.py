"""Errors of secure aggregation: bad input, a failed round, a refusal."""

from canonical import errors


class SecAggError(errors.Error, ValueError):
  """Bad input or a broken message; the text names the client and the leaf."""


class RoundFailedError(SecAggError):
  """Fewer clients than the threshold survived a step (or the survivors'
  masks would not hide their parts): the round has no result.

  Raised instead of returning anything, so that no partial sum ever escapes.
  """

  def __init__(self, step, survivors, threshold, reason=None):
    self.step = step
    self.survivors = survivors
    self.threshold = threshold
    reason = reason or (f'{survivors} client(s) survived, fewer than the '
                        f'threshold {threshold}')
    super().__init__(f'secure aggregation round failed at step {step!r}: '
                     f'{reason}; the round has no result')


class ProtocolViolationError(SecAggError):
  """A request that would break privacy (both secrets of one client, say)."""
