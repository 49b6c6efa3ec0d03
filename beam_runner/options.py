"""What the command lines share: Beam's pipeline options from the flags a
program does not know, and the flags that shape pipelines but not results.

A library module: `python -m beam_runner` and the pipelines' command lines
import these, never each other's `__main__`. Building a parser imports
nothing heavy; checking Beam's flags imports Beam, never TensorFlow.
"""

from canonical import errors


class UsageError(errors.Error):
  """Bad command line input; the message says which and why."""


def add_engine_arguments(parser):
  """The flags that shape the pipelines, not the results (shared with the
  pipelines' command lines)."""
  parser.add_argument('--rounds-per-pipeline', type=int, default=None,
                      help='rounds chained in one Beam pipeline (default: '
                      'decided by measurement)')
  parser.add_argument('--clients-per-element', type=int, default=None,
                      help='clients one pipeline element runs (default: '
                      'enough elements to keep every worker busy)')


def beam_options(flags, program='beam_runner'):
  """`PipelineOptions` from the flags left over; UsageError on unknown ones
  (`program`: who else did not know them). Imports Beam, not TensorFlow."""
  from apache_beam.runners.dask import dask_runner  # pylint: disable=g-import-not-at-top,unused-import  # Registers --dask_*.
  from canonical import io as storage_lib  # pylint: disable=g-import-not-at-top
  options = storage_lib.pipeline_options(list(flags))
  unknown = set(options.get_all_options(retain_unknown_options=True)) - set(
      options.get_all_options())
  stray = [f for f in flags if f.startswith('-') and not f.startswith('--')]
  if unknown or stray:
    names = sorted('--' + n for n in unknown) + stray
    raise UsageError(f'unknown flag(s) {", ".join(names)}: neither '
                     f'{program} nor Beam\'s PipelineOptions knows them.')
  return options
