"""Errors of secure aggregation: bad input, a failed round, a refusal."""


class SecAggError(ValueError):
  """Bad input or a broken message; the text names the client and the leaf."""


class RoundFailedError(SecAggError):
  """Fewer clients than the threshold survived a step: the round has no result.

  Raised instead of returning anything, so that no partial sum ever escapes.
  """

  def __init__(self, step, survivors, threshold):
    self.step = step
    self.survivors = survivors
    self.threshold = threshold
    super().__init__(
        f'secure aggregation round failed at step {step!r}: {survivors} '
        f'client(s) survived, fewer than the threshold {threshold}; the round '
        'has no result')


class ProtocolViolationError(SecAggError):
  """A request that would break privacy (both secrets of one client, say)."""
