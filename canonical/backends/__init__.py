"""Back ends a computation can be lowered to (TFF's `tff.backends`)."""

from canonical.backends import mapreduce
