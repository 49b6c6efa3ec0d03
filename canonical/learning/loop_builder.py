"""TFF's `tff.learning.LoopImplementation`: how a client loops over its
dataset.

TFF offers a Python `for` over the dataset's iterator (`DATASET_ITERATOR`,
faster in its simulations) or `Dataset.reduce` (`DATASET_REDUCE`, what
TPUs need). Here both mean the same loop: a piece is one pure graph, and a
client's batches are always folded with `Dataset.reduce` (or unrolled over
element lists by the runner). The results are the same either way.
"""

import enum

from canonical import errors


class LoopImplementation(enum.Enum):
  """TFF's choice of client loop; both run as `Dataset.reduce` here."""
  DATASET_ITERATOR = 1
  DATASET_REDUCE = 2


def check_loop_implementation(loop_implementation, who):
  """`loop_implementation`, once known to be a `LoopImplementation`."""
  if not isinstance(loop_implementation, LoopImplementation):
    raise errors.InvalidTypeError(
        f'{who}: loop_implementation must be a tff.learning.'
        'LoopImplementation (DATASET_REDUCE or DATASET_ITERATOR), got '
        f'{loop_implementation!r}.')
  return loop_implementation
