"""Command line: compile a process into a form file, and inspect form files.

  python -m canonical compile MODULE:FUNCTION -o form.pb [--name N] [--description D]
  python -m canonical inspect form.pb

FUNCTION takes no arguments and returns an IterativeProcess (compiled here) or
a CanonicalForm. MODULE is a module name importable from the current folder,
or a path to a .py file. Bad input gets a one-line error and exit code 1 (2
for bad usage). `--help`, bad usage and `inspect` of an intact form answer
without importing TensorFlow.
"""

import argparse
import importlib
import importlib.util
import os
import sys

from canonical import errors
from canonical import quiet


class CommandError(errors.Error):
  """Bad input to a command: printed as is, exit code 1."""


def _import_module(name):
  if name.endswith('.py'):
    if not os.path.isfile(name):
      raise CommandError(f'no such file {name!r}.')
    module_name = os.path.splitext(os.path.basename(name))[0]
    spec = importlib.util.spec_from_file_location(module_name, name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
  if os.getcwd() not in sys.path and '' not in sys.path:
    sys.path.insert(0, os.getcwd())
  try:
    return importlib.import_module(name)
  except ModuleNotFoundError as e:
    if e.name and (name == e.name or name.startswith(e.name + '.')):
      raise CommandError(f'cannot import module {name!r}: no module named '
                         f'{e.name!r} (run from the folder that holds it, '
                         'or give a path to a .py file).') from None
    raise


def _build(target):
  """The CanonicalForm that `MODULE:FUNCTION` builds."""
  import canonical  # pylint: disable=g-import-not-at-top
  module_name, sep, function_name = target.rpartition(':')
  if not sep or not module_name or not function_name:
    raise CommandError(f'expected MODULE:FUNCTION, got {target!r}.')
  try:
    module = _import_module(module_name)
  except CommandError:
    raise
  except Exception as e:  # The user's module failed while importing.
    raise CommandError(f'importing {module_name!r} failed: '
                       f'{type(e).__name__}: {e}') from e
  function = getattr(module, function_name, None)
  if function is None:
    raise CommandError(f'module {module_name!r} has no {function_name!r}.')
  if not callable(function):
    raise CommandError(f'{target} is a {type(function).__name__}, not a '
                       'function.')
  try:
    built = function()
  except Exception as e:
    raise CommandError(f'{target}() raised {type(e).__name__}: {e}') from e
  if isinstance(built, canonical.IterativeProcess):
    try:
      return canonical.compile(built)
    except (canonical.FederatedError, canonical.FormError) as e:
      raise CommandError(f'compiling the process of {target} failed: '
                         f'{e}') from e
  if isinstance(built, canonical.CanonicalForm):
    return built
  raise CommandError(f'{target}() returned a {type(built).__name__}; it must '
                     'return a canonical.IterativeProcess or a '
                     'canonical.CanonicalForm.')


def compile_command(args):
  import canonical  # pylint: disable=g-import-not-at-top
  form = _build(args.target)
  if args.name:
    form.name = args.name
  if args.description:
    form.description = args.description
  try:
    canonical.save(form, args.output)
  except canonical.FormError as e:
    raise CommandError(str(e)) from e
  except OSError as e:
    raise CommandError(f'cannot write {args.output}: '
                       f'{e.strerror or e}.') from e
  form.summary()
  print(f'wrote {args.output} ({os.path.getsize(args.output):,} bytes)')


def inspect_command(args):
  from canonical.saving import inspection  # pylint: disable=g-import-not-at-top
  print(inspection.describe_file(args.form))  # A FormError is an errors.Error.


def main(argv=None):
  quiet.environment()
  parser = argparse.ArgumentParser(
      prog='python -m canonical', description=__doc__.splitlines()[0])
  commands = parser.add_subparsers(dest='command', required=True)
  compile_parser = commands.add_parser(
      'compile', help='build a process and write its canonical form')
  compile_parser.add_argument('target', metavar='MODULE:FUNCTION')
  compile_parser.add_argument('-o', '--output', required=True,
                              help='the form file to write')
  compile_parser.add_argument('--name', help='the form\'s name')
  compile_parser.add_argument('--description', help='the form\'s description')
  compile_parser.set_defaults(run=compile_command)
  inspect_parser = commands.add_parser(
      'inspect', help='print the pieces, encoders and bits of a form file')
  inspect_parser.add_argument('form', help='a form file')
  inspect_parser.set_defaults(run=inspect_command)
  args = parser.parse_args(argv)
  quiet.third_party()
  try:
    args.run(args)
  except errors.Error as e:
    print(f'python -m canonical {args.command}: error: {e}', file=sys.stderr)
    return 1
  return 0


if __name__ == '__main__':
  sys.exit(main())
