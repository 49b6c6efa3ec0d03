"""Packages whose public names are imported on first use (PEP 562), and
work done when a module is first imported (`around_import`).

So that `import canonical` or `import beam_runner` imports no TensorFlow or
Beam, and a command line answers `--help` at once. The first use of a public
name imports every module the package names, in order (as its eager imports
did), and binds them all; a submodule is imported alone; anything else goes
to `fallback` (old import paths), if the package has one.
"""

import importlib
import importlib.abc
import importlib.machinery
import sys


def module_getattr(namespace, homes, after=(), fallback=None):
  """`(__getattr__, __dir__)` for the package whose globals are `namespace`:
  `homes` maps each module to the public names it gives; `after` lists
  modules imported with them."""
  package, path = namespace['__name__'], namespace['__path__']
  public = frozenset(name for names in homes.values() for name in names)

  def load():
    for home, names in homes.items():
      module = importlib.import_module(home)
      for name in names:
        namespace[name] = getattr(module, name)
    for module in after:
      importlib.import_module(module)

  def __getattr__(name):  # pylint: disable=invalid-name
    if name in public:
      load()
      return namespace[name]
    if name.startswith('_'):  # Tools probing dunders import nothing.
      raise AttributeError(f'module {package!r} has no attribute {name!r}')
    if importlib.machinery.PathFinder.find_spec(f'{package}.{name}',
                                                path) is not None:
      return importlib.import_module(f'{package}.{name}')  # Only it.
    if fallback is not None:
      return fallback(package, name)
    raise AttributeError(f'module {package!r} has no attribute {name!r}')

  def __dir__():  # pylint: disable=invalid-name
    return sorted(set(namespace) | public)

  return __getattr__, __dir__


class _AroundImport(importlib.abc.MetaPathFinder):
  """Runs `around(load, module)` in place of loading module `name`."""

  def __init__(self, name, around):
    self.name, self.around = name, around

  def find_spec(self, name, path=None, target=None):
    if name != self.name:
      return None
    spec = importlib.machinery.PathFinder.find_spec(name, path, target)
    if spec is None or spec.loader is None:
      return spec
    load = spec.loader.exec_module
    spec.loader.exec_module = lambda module: self.around(load, module)
    return spec


def around_import(name, around):
  """When module `name` is first imported, however it is reached, it loads
  through `around(load, module)` (which must call `load(module)`). Nothing
  happens if it is imported already or `around` is already in place."""
  if name in sys.modules or any(
      isinstance(f, _AroundImport) and (f.name, f.around) == (name, around)
      for f in sys.meta_path):
    return
  sys.meta_path.insert(0, _AroundImport(name, around))
