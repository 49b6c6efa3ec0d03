"""Where a test's marked lines are, for errors that must name the user's line."""

import functools
import os


def marked_line(path, name):
  """`file:line` of the line of `path` that ends with `# line:<name>`."""
  with open(path) as f:
    for number, text in enumerate(f, 1):
      if text.rstrip().endswith(f'# line:{name}'):
        return f'{os.path.basename(path)}:{number}'
  raise AssertionError(f'no line marked {name} in {path}')


def finder(path):
  """`where(name)` for the test file at `path` (pass `__file__`)."""
  return functools.partial(marked_line, path)
