"""The project's import edges, read from the source alone, and the rules they keep.

Every edge is a statement a static tool can read: an `import` anywhere in a
module, a lazy name declared under `if TYPE_CHECKING:` (served on first use
by `canonical._lazy.declared`), or an old import path in a table a package
registers with `canonical._lazy.register_old_paths`. The guard finds:

- an edge that breaks the layering (`encoders` <- `canonical` <-
  `beam_runner` <- `pipelines`, never upward: the root error is
  `encoders.errors`');
  a module private to a public home (the type classes' modules) is imported
  from its home;
- an edge to nothing: a project module that does not exist, or a name its
  module neither defines, imports nor declares;
- an edge hidden from tools: `importlib.import_module` / `__import__` of a
  name that is not a literal, outside the lazy-import mechanism and the
  command lines that load the user's own module.

Usage: python scripts/import_guard.py   (prints each problem; exit 1 if any)
"""

import ast
import dataclasses
import os
import sys

PACKAGES = ('canonical', 'beam_runner', 'encoders', 'pipelines')
# importer package -> the project modules it may not import (prefixes), or
# the only ones it may.
FORBIDDEN = {'encoders': ('canonical', 'beam_runner', 'pipelines'),
             'canonical': ('beam_runner', 'pipelines'),
             'beam_runner': ('pipelines',)}
# Modules only their public home (and each other) import: the type classes
# are handed their conversions and texts when `canonical.core.types` loads.
PRIVATE = {
    'canonical.core.types': (
        'canonical.core.type_base', 'canonical.core.struct_types',
        'canonical.core.leaf_types', 'canonical.core.federated_types',
        'canonical.core.type_conversions', 'canonical.core.type_texts'),
}
# Where a computed module name is the point: the mechanism itself, and the
# command lines that import the module a user names.
DYNAMIC_IMPORTS = ('canonical/_lazy.py', 'canonical/__main__.py',
                   'beam_runner/__main__.py')


@dataclasses.dataclass(frozen=True)
class Edge:
  where: str      # 'path:line'
  importer: str   # The importing module's dotted name.
  module: str     # The imported module.
  name: str       # `from module import name`; '' for `import module`.
  kind: str       # 'import', 'lazy' or 'old path'.


def _module_name(root, path):
  relative = os.path.relpath(path, root)[:-len('.py')].split(os.sep)
  if relative[-1] == '__init__':
    relative = relative[:-1]
  return '.'.join(relative)


def _sources(root):
  for package in PACKAGES:
    for directory, _, files in os.walk(os.path.join(root, package)):
      for file in sorted(files):
        if file.endswith('.py') and not file.endswith('_pb2.py'):
          yield os.path.join(directory, file)


def _parse(path):
  with open(path, encoding='utf-8') as f:
    return ast.parse(f.read(), path)


def _is_type_checking(test):
  return (isinstance(test, ast.Name) and test.id == 'TYPE_CHECKING') or (
      isinstance(test, ast.Attribute) and test.attr == 'TYPE_CHECKING')


def _absolute(importer, is_package, node):
  if not node.level:
    return node.module
  base = importer.split('.')
  base = base[:len(base) - node.level + (1 if is_package else 0)]
  return '.'.join(base + ([node.module] if node.module else []))


def _old_path_tables(tree):
  """The dict literals a module registers as old import paths."""
  named = {}
  for node in tree.body:
    if (isinstance(node, ast.Assign) and len(node.targets) == 1 and
        isinstance(node.targets[0], ast.Name) and
        isinstance(node.value, ast.Dict)):
      named[node.targets[0].id] = node.value
  for node in ast.walk(tree):
    if (isinstance(node, ast.Call) and
        isinstance(node.func, ast.Attribute) and
        node.func.attr == 'register_old_paths' and node.args):
      table = node.args[0]
      table = named.get(table.id) if isinstance(table, ast.Name) else table
      if isinstance(table, ast.Dict):
        yield node.lineno, ast.literal_eval(table)


def edges_of(root, path, tree):
  """Every import edge of one module."""
  importer = _module_name(root, path)
  is_package = path.endswith('__init__.py')
  where = os.path.relpath(path, root)
  lazy = set()
  for node in tree.body:
    if isinstance(node, ast.If) and _is_type_checking(node.test):
      lazy.update(id(statement) for statement in node.body)
  for node in ast.walk(tree):
    kind = 'lazy' if id(node) in lazy else 'import'
    if isinstance(node, ast.Import):
      for alias in node.names:
        yield Edge(f'{where}:{node.lineno}', importer, alias.name, '', kind)
    elif isinstance(node, ast.ImportFrom):
      module = _absolute(importer, is_package, node)
      for alias in node.names:
        yield Edge(f'{where}:{node.lineno}', importer, module, alias.name,
                   kind)
  for line, table in _old_path_tables(tree):
    for homes in table.values():
      for home in homes:
        yield Edge(f'{where}:{line}', importer, home, '', 'old path')


class _Tree:
  """The project's modules and the names each gives, read statically."""

  def __init__(self, root):
    self.root = root
    self._names = {}

  def path_of(self, module):
    base = os.path.join(self.root, *module.split('.'))
    for path in (base + '.py', os.path.join(base, '__init__.py')):
      if os.path.isfile(path):
        return path
    return None

  def gives(self, module, name):
    """Whether `from module import name` finds something."""
    if self.path_of(f'{module}.{name}'):
      return True  # A submodule.
    names = self._names.get(module)
    if names is None:
      names = self._names[module] = _top_level_names(
          _parse(self.path_of(module)))
    return name in names or '__getattr__' in names


def _top_level_names(tree):
  names = set()

  def visit(statements):
    for node in statements:
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                           ast.ClassDef)):
        names.add(node.name)
      elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [
            node.target]
        for target in targets:
          for leaf in ast.walk(target):
            if isinstance(leaf, ast.Name):
              names.add(leaf.id)
      elif isinstance(node, (ast.Import, ast.ImportFrom)):
        for alias in node.names:
          names.add((alias.asname or alias.name).split('.')[0])
      elif isinstance(node, ast.If):
        visit(node.body)
        visit(node.orelse)
      elif isinstance(node, ast.Try):
        visit(node.body)
        for handler in node.handlers:
          visit(handler.body)
        visit(node.orelse)
        visit(node.finalbody)

  visit(tree.body)
  return names


def _private_problem(edge):
  for home, private in PRIVATE.items():
    if (edge.module in private and edge.importer != home and
        edge.importer not in private):
      return (f'{edge.where}: {edge.importer} imports {edge.module} '
              f'({edge.kind}): import it from {home}.')
  return None


def _layering_problem(edge):
  importer = edge.importer.split('.')[0]
  target = edge.module
  top = target.split('.')[0]
  if top not in PACKAGES or top == importer:
    return None
  if any(target == p or target.startswith(p + '.')
         for p in FORBIDDEN.get(importer, ())):
    return (f'{edge.where}: {edge.importer} imports {target} ({edge.kind}): '
            f'{importer} must not import {top}.')
  return None


def _hidden_imports(root, path, tree):
  where = os.path.relpath(path, root)
  if where.replace(os.sep, '/') in DYNAMIC_IMPORTS:
    return
  for node in ast.walk(tree):
    if not isinstance(node, ast.Call):
      continue
    func = node.func
    called = (func.attr if isinstance(func, ast.Attribute) else
              func.id if isinstance(func, ast.Name) else '')
    if called in ('import_module', '__import__') and not (
        node.args and isinstance(node.args[0], ast.Constant)):
      yield (f'{where}:{node.lineno}: {called} of a computed name hides an '
             'import edge from tools; import it, or declare it lazily under '
             '`if TYPE_CHECKING:` (canonical._lazy.declared).')


def problems(root):
  """Every problem of the tree at `root`, as lines naming file and line."""
  tree_index = _Tree(root)
  found = []
  for path in _sources(root):
    tree = _parse(path)
    found.extend(_hidden_imports(root, path, tree))
    for edge in edges_of(root, path, tree):
      if edge.module.split('.')[0] not in PACKAGES:
        continue
      if edge.name and tree_index.path_of(f'{edge.module}.{edge.name}'):
        edge = dataclasses.replace(  # `from package import submodule`.
            edge, module=f'{edge.module}.{edge.name}', name='')
      for problem in (_layering_problem(edge), _private_problem(edge)):
        if problem:
          found.append(problem)
      if tree_index.path_of(edge.module) is None:
        found.append(f'{edge.where}: {edge.importer} imports {edge.module} '
                     f'({edge.kind}), which does not exist.')
      elif edge.name and edge.name != '*' and not tree_index.gives(
          edge.module, edge.name):
        found.append(f'{edge.where}: {edge.importer} imports {edge.name!r} '
                     f'from {edge.module} ({edge.kind}), which neither '
                     'defines, imports nor declares it.')
  return found


def main():
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  found = problems(root)
  for line in found:
    print(line)
  print(f'import guard: {len(found)} problem(s).', file=sys.stderr)
  return 1 if found else 0


if __name__ == '__main__':
  sys.exit(main())
