"""Runs a benchmark as its users do: `python -m benchmarks.NAME`, from the
repository root, in a process of its own, TensorFlow's log lines off."""

import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '../..'))


def run(name, *flags, timeout=600):
  """The finished process of `benchmarks.<name>` given `flags` (its output
  captured as text)."""
  return subprocess.run(
      [sys.executable, '-m', f'benchmarks.{name}', *map(str, flags)],
      cwd=ROOT, capture_output=True, text=True, timeout=timeout,
      env={**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '2'})
