"""Names and modules imported on first use: a package's public names
(PEP 562, `declared`), old import paths of moved modules
(`register_old_paths`), and work done when a module is first imported
(`around_import`).

So that `import canonical` or `import beam_runner` imports no TensorFlow or
Beam, and a command line answers `--help` at once. A package declares its
lazy names once, as plain imports under `if typing.TYPE_CHECKING:` in its
`__init__.py`: static checkers, editors and import-graph tools read them as
the package's edges, and `declared` reads the same statements to serve the
names at run time. A name's first use imports its home (or, for a package
that asks, every home in order, as its eager imports did); a submodule is
imported alone; anything else goes to `fallback` (old import paths,
`old_path_attribute`), if the package has one.

Old import paths keep working, with a DeprecationWarning: each package that
moved modules registers, in its `__init__.py`, a table `old name -> new
homes`. Importing an old name imports its new home (the same module object,
so patching it patches the module the code uses); where a module was split,
the old name gathers the public names of its homes, the first home winning.
"""

import ast
import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings


def declared(namespace, load_all=False, fallback=None):
  """`(__getattr__, __dir__)` for the module whose globals are `namespace`,
  serving the names its `if TYPE_CHECKING:` block imports. `load_all`: the
  first use of any of them imports all their homes, in order."""
  spec = namespace['__spec__']  # Its name, also when run as __main__.
  return _getattr_and_dir(
      namespace, _declarations(spec.loader.get_source(spec.name), spec.name),
      load_all, fallback)


def _declarations(source, path):
  """`{name: (home module, name there)}` of the `from X import a as b`
  statements under the module's `if TYPE_CHECKING:`, in order."""
  tree = ast.parse(source, path)
  for node in tree.body:
    if isinstance(node, ast.If) and _is_type_checking(node.test):
      names = {}
      for statement in node.body:
        if not (isinstance(statement, ast.ImportFrom) and
                statement.level == 0):
          raise SyntaxError(f'{path}:{statement.lineno}: a lazy declaration '
                            'is an absolute `from X import a` statement.')
        for alias in statement.names:
          names[alias.asname or alias.name] = (statement.module, alias.name)
      return names
  raise SyntaxError(f'{path}: no `if TYPE_CHECKING:` block declares its '
                    'lazy names.')


def _is_type_checking(test):
  return (isinstance(test, ast.Name) and test.id == 'TYPE_CHECKING') or (
      isinstance(test, ast.Attribute) and test.attr == 'TYPE_CHECKING')


def _import(home, name):
  """`from home import name`: the submodule `home.name` if there is one."""
  module = importlib.import_module(home)
  path = getattr(module, '__path__', None)
  if path is not None and importlib.machinery.PathFinder.find_spec(
      f'{home}.{name}', path) is not None:
    return importlib.import_module(f'{home}.{name}')
  return getattr(module, name)


def _getattr_and_dir(namespace, names, load_all, fallback):
  package = namespace['__name__']
  path = namespace.get('__path__')

  def load(wanted):
    for name, (home, there) in names.items():
      if load_all or name == wanted:
        namespace[name] = _import(home, there)

  def __getattr__(name):  # pylint: disable=invalid-name
    if name in names:
      load(name)
      return namespace[name]
    if name.startswith('_'):  # Tools probing dunders import nothing.
      raise AttributeError(f'module {package!r} has no attribute {name!r}')
    if path is not None and importlib.machinery.PathFinder.find_spec(
        f'{package}.{name}', path) is not None:
      return importlib.import_module(f'{package}.{name}')  # Only it.
    if fallback is not None:
      return fallback(package, name)
    raise AttributeError(f'module {package!r} has no attribute {name!r}')

  def __dir__():  # pylint: disable=invalid-name
    return sorted(set(namespace) | set(names))

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


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
  """Finds the old names in `table` and loads them from their new homes."""

  def __init__(self):
    self.table = {}

  def find_spec(self, name, path=None, target=None):
    del path, target
    if name in self.table:
      return importlib.util.spec_from_loader(
          name, self, is_package=self.is_package(name))
    return None

  def is_package(self, name):
    """Whether an old name had submodules (so they can still be imported)."""
    return any(other.startswith(name + '.') for other in self.table)

  def create_module(self, spec):
    return None  # A plain module; exec_module fills or replaces it.

  def exec_module(self, module):
    name = module.__name__
    homes = self.table[name]
    warnings.warn(f'{name} has moved to {" and ".join(homes)}; import it '
                  'from there.', DeprecationWarning, stacklevel=2)
    if len(homes) == 1 and not self.is_package(name):
      sys.modules[name] = importlib.import_module(homes[0])
      return
    for home in reversed(homes):  # The first home's names win.
      new = importlib.import_module(home)
      module.__dict__.update({k: v for k, v in vars(new).items()
                              if not k.startswith('_')})
    if self.is_package(name):
      module.__path__ = []
      module.__getattr__ = functools.partial(old_path_attribute, name)


_FINDER = _OldPaths()


def register_old_paths(table):
  """Adds `{old name: [new module, ...]}` to the old paths served."""
  _FINDER.table.update(table)
  if _FINDER not in sys.meta_path:
    sys.meta_path.append(_FINDER)


def old_path_attribute(package, name):
  """The old submodule `package.name` as an attribute of its package (for
  `import canonical; canonical.storage`), or AttributeError."""
  full = f'{package}.{name}'
  if full in _FINDER.table:
    return importlib.import_module(full)
  raise AttributeError(f'module {package!r} has no attribute {name!r}')
