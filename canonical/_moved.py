"""Old import paths of moved modules keep working, with a DeprecationWarning.

Each package that moved modules registers a table `old name -> new homes`.
Importing an old name imports its new home (the same module object, so
patching it patches the module the code uses); where a module was split, the
old name gathers the public names of its homes, the first home winning.
"""

import functools
import importlib
import importlib.abc
import importlib.util
import sys
import warnings


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
      module.__getattr__ = functools.partial(attribute, name)


_FINDER = _OldPaths()


def register(table):
  """Adds `{old name: [new module, ...]}` to the old paths served."""
  _FINDER.table.update(table)
  if _FINDER not in sys.meta_path:
    sys.meta_path.append(_FINDER)


def attribute(package, name):
  """The old submodule `package.name` as an attribute of its package (for
  `import canonical; canonical.storage`), or AttributeError."""
  full = f'{package}.{name}'
  if full in _FINDER.table:
    return importlib.import_module(full)
  raise AttributeError(f'module {package!r} has no attribute {name!r}')


CANONICAL = {
    'canonical.aggregations': ['canonical.core.intrinsics.registry',
                               'canonical.core.intrinsics.means'],
    'canonical.computations': ['canonical.core.computations'],
    'canonical.dataset_seeds': ['canonical.core.dataset_seeds'],
    'canonical.evaluation': ['canonical.core.evaluation'],
    'canonical.intrinsics': ['canonical.core.intrinsics'],
    'canonical.ir': ['canonical.core.ir', 'canonical.core.naming',
                     'canonical.errors'],
    'canonical.sequences': ['canonical.core.intrinsics.sequences'],
    'canonical.process': ['canonical.templates.iterative_process'],
    'canonical.reference': ['canonical.executors.reference'],
    'canonical.local_runner': ['canonical.executors.local'],
    'canonical.secure_sums': ['canonical.secagg.sums'],
    'canonical.storage': ['canonical.io'],
    'canonical.fedavg': ['canonical.learning.algorithms',
                         'canonical.aggregators',
                         'canonical.learning.framework',
                         'canonical.templates.measured_process'],
    'canonical.fedavg.averaging': ['canonical.learning.algorithms.fedavg'],
    'canonical.fedavg.broadcast': ['canonical.aggregators.broadcast',
                                   'canonical.learning.framework'],
    'canonical.fedavg.mean': ['canonical.aggregators.mean',
                              'canonical.learning.framework'],
    'canonical.fedavg.dp_mean': ['canonical.aggregators.dp_mean',
                                 'canonical.learning.framework'],
    'canonical.fedavg.secure_mean': ['canonical.aggregators.secure_mean',
                                     'canonical.learning.framework'],
    'canonical.fedavg.dp_secure_mean': ['canonical.aggregators.dp_secure_mean',
                                        'canonical.learning.framework'],
    'canonical.fedavg.measured_process': [
        'canonical.templates.measured_process'],
    'canonical.fedavg.specs': ['canonical.core.specs',
                               'canonical.learning.model_fns'],
}
