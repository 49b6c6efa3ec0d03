"""Writes the record of TensorFlow Federated 0.87's public API that
`tests/canonical/test_tff_087_api.py` holds this project against.

Run it with a real TFF 0.87 (../shared/peers/README.md installs one):

  /work/peers/venv-tff/bin/python scripts/record_tff_api.py \
      > tests/data/tff_087_api.json

A name is public where TFF's own packages make it so: what a package's
`__init__.py` imports (a submodule only when that file imports it by name),
and what a plain module such as `tff.simulation.datasets.emnist` defines.
Each callable's parameters are recorded in order with their kind and
default; a class's public methods and properties with it. Defaults are
written as `describe_default` writes them, which the test shares.
"""

import enum
import inspect
import json
import re
import sys
import types

# The modules issue 36 names; the record walks each one whole.
MODULES = ('learning', 'aggregators', 'templates', 'simulation', 'program',
           'types', 'structure', 'analytics', 'backends.mapreduce')

_SIMPLE = (type(None), bool, int, float, str)


def describe_default(value):
  """A default value as text both sides can compute without TFF: plain
  values as themselves, an enum member as `Class.MEMBER`, a function or a
  class by its name, anything else by its type's name."""
  if value is inspect.Parameter.empty:
    return None
  if isinstance(value, enum.Enum):
    return f'{type(value).__name__}.{value.name}'
  if isinstance(value, _SIMPLE):
    return repr(value)
  if isinstance(value, (tuple, list)) and all(
      isinstance(v, _SIMPLE) for v in value):
    return repr(tuple(value))
  if isinstance(value, (types.FunctionType, type, types.BuiltinFunctionType)):
    return f'<{getattr(value, "__name__", "?")}>'
  if isinstance(value, (dict,)) and not value:
    return '{}'
  return f'<{type(value).__name__} instance>'


def parameters(fn):
  """`[name, kind, default]` for each parameter of `fn`, or None if Python
  cannot tell."""
  try:
    signature = inspect.signature(fn)
  except (TypeError, ValueError):
    return None
  return [[p.name, p.kind.name, describe_default(p.default)]
          for p in signature.parameters.values()]


def _tff_class(cls):
  return cls.__module__.startswith('tensorflow_federated')


def members(cls):
  """A class's public methods (`[kind, parameters]`) and properties, from
  every TFF class in its MRO."""
  out = {}
  for klass in reversed(cls.__mro__):
    if not _tff_class(klass):
      continue
    for name, value in vars(klass).items():
      if name.startswith('_') and name != '__init__':
        continue
      if name == '__init__':
        continue  # The class's own signature records it.
      if isinstance(value, property):
        out[name] = {'kind': 'property'}
      elif isinstance(value, classmethod):
        out[name] = {'kind': 'classmethod',
                     'parameters': parameters(value.__func__)[1:]}
      elif isinstance(value, staticmethod):
        out[name] = {'kind': 'staticmethod',
                     'parameters': parameters(value.__func__)}
      elif inspect.isfunction(value):
        params = parameters(value)
        out[name] = {'kind': 'method',
                     'parameters': params[1:] if params else params}
  return dict(sorted(out.items()))


def class_parameters(cls):
  """A class's constructor parameters; through `__init__` where a
  metaclass's `__call__` hides them (TFF's interned types)."""
  params = parameters(cls)
  if params and [p[1] for p in params] == ['VAR_POSITIONAL', 'VAR_KEYWORD']:
    init = parameters(cls.__init__)
    if init:
      return init[1:]
  return params


def record(value):
  """The record of one public name."""
  if isinstance(value, types.ModuleType):
    return {'kind': 'module'}
  if type(value).__module__ == 'typing':
    return {'kind': 'typing', 'text': str(value).replace(
        'tensorflow_federated.python.', 'tff:')[:200]}
  if isinstance(value, type):
    entry = {'kind': 'class', 'parameters': class_parameters(value),
             'bases': [b.__name__ for b in value.__mro__[1:]
                       if _tff_class(b)]}
    if issubclass(value, enum.Enum):
      entry['kind'] = 'enum'
      entry['members'] = [m.name for m in value]
      entry.pop('parameters')
    elif issubclass(value, BaseException):
      entry['kind'] = 'exception'
      entry.pop('parameters')
    else:
      entry['members'] = members(value)
      fields = getattr(value, '_fields', None)
      if fields is not None:
        entry['fields'] = list(fields)
    return entry
  if callable(value) and not isinstance(value, _SIMPLE):
    params = parameters(value)
    if params is not None or inspect.isroutine(value):
      return {'kind': 'function', 'parameters': params}
  if isinstance(value, _SIMPLE):
    return {'kind': 'constant', 'value': repr(value)}
  return {'kind': 'typing', 'text': str(value).replace(
      'tensorflow_federated.python.', 'tff:')[:200]}


def walk(module, path):
  """`{dotted name: record}` for every public name under `module`."""
  out = {}
  is_package = hasattr(module, '__path__')
  source = inspect.getsource(module) if is_package else ''
  for name in sorted(dir(module)):
    if name.startswith('_'):
      continue
    value = getattr(module, name)
    dotted = f'{path}.{name}'
    if isinstance(value, types.ModuleType):
      if not is_package or not value.__name__.startswith(
          'tensorflow_federated'):
        continue
      if not re.search(rf'import\s+\S+\s+as\s+{name}\b|import\s+{name}\b',
                       source):
        continue  # A submodule Python attached, not one TFF exports.
      out[dotted] = record(value)
      out.update(walk(value, dotted))
      continue
    if not is_package and getattr(value, '__module__', None) != (
        module.__name__):
      continue  # A plain module's imports are not its API.
    out[dotted] = record(value)
  return out


def main():
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  names = {}
  for module_path in MODULES:
    module = tff
    for part in module_path.split('.'):
      module = getattr(module, part)
    names[f'tff.{module_path}'] = {'kind': 'module'}
    names.update(walk(module, f'tff.{module_path}'))
  json.dump({'tff_version': tff.__version__, 'names': names}, sys.stdout,
            indent=1, sort_keys=True)
  sys.stdout.write('\n')


if __name__ == '__main__':
  main()
