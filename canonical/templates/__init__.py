"""Processes: `IterativeProcess` (a round's initialize + next, what the
compiler lowers) and `MeasuredProcess` (a building block a round composes)."""

from canonical.templates.iterative_process import IterativeProcess
from canonical.templates.measured_process import MeasuredProcess

__all__ = ['IterativeProcess', 'MeasuredProcess']
