"""TFF 0.87's public API as recorded from a real TFF (tests/data/
tff_087_api.json, written by scripts/record_tff_api.py), and what differs
from it here, name by name."""

import enum
import importlib
import inspect
import json
import pathlib
import re
import sys
import types

RECORD = pathlib.Path(__file__).parent.parent / 'data' / 'tff_087_api.json'

sys.path.insert(0, str(pathlib.Path(__file__).parents[2] / 'scripts'))
from record_tff_api import class_parameters  # pylint: disable=g-import-not-at-top,wrong-import-position
from record_tff_api import parameters  # pylint: disable=g-import-not-at-top,wrong-import-position
sys.path.pop(0)


def load():
  """`{dotted name: record}` of every public name TFF 0.87 has."""
  return json.loads(RECORD.read_text())['names']


def resolve(name):
  """Our object for TFF's `tff.a.b` (`canonical.a.b`), or raises
  AttributeError naming the first part missing."""
  parts = name.split('.')
  value = importlib.import_module('canonical')
  for i, part in enumerate(parts[1:], 1):
    try:
      value = getattr(value, part)
    except AttributeError:
      raise AttributeError(
          f'{".".join(parts[:i + 1])} is missing') from None
  return value


_FORMS = {'POSITIONAL_ONLY': {'POSITIONAL_ONLY', 'POSITIONAL_OR_KEYWORD'},
          'POSITIONAL_OR_KEYWORD': {'POSITIONAL_OR_KEYWORD'},
          'KEYWORD_ONLY': {'KEYWORD_ONLY', 'POSITIONAL_OR_KEYWORD'},
          'VAR_POSITIONAL': {'VAR_POSITIONAL'},
          'VAR_KEYWORD': {'VAR_KEYWORD'}}


def parameter_problems(theirs, ours):
  """Why parameters `ours` do not take every argument form `theirs` takes
  (both as `record_tff_api.parameters` writes them): TFF's parameters
  first, in order, each accepting what TFF's accepts, with TFF's default;
  any of ours after them optional."""
  if theirs is None:
    return []
  if ours is None:
    return ['its parameters cannot be read']
  problems = []
  for i, (name, kind, default) in enumerate(theirs):
    if i >= len(ours):
      problems.append(f'lacks parameter {name!r}')
      continue
    our_name, our_kind, our_default = ours[i]
    if our_name != name and kind not in ('VAR_POSITIONAL', 'VAR_KEYWORD'):
      problems.append(f'parameter {i} is {our_name!r}, TFF calls it '
                      f'{name!r}')
    elif our_kind not in _FORMS[kind]:
      problems.append(f'parameter {name!r} is {our_kind}, TFF: {kind}')
    elif our_default != default:
      problems.append(f'parameter {name!r} defaults to '
                      f'{our_default or "nothing"}, TFF: {default or "nothing"}')
  for name, kind, default in ours[len(theirs):]:
    if default is None and kind not in ('VAR_POSITIONAL', 'VAR_KEYWORD'):
      problems.append(f'adds required parameter {name!r}')
  return problems


def _set_in_init(cls, name):
  """Whether some `__init__` of `cls` sets `self.<name>` (an attribute
  read as TFF's property is)."""
  for klass in cls.__mro__:
    init = vars(klass).get('__init__')
    if init is None:
      continue
    try:
      source = inspect.getsource(init)
    except (OSError, TypeError):
      continue
    if re.search(rf'self\.{name}\s*=', source):
      return True
  return False


def _member_problems(entry, value):
  problems = []
  for name, member in entry.get('members', {}).items():
    ours = inspect.getattr_static(value, name, None)
    if ours is None and member['kind'] == 'property' and (
        _set_in_init(value, name) or name in getattr(value, '_fields', ())):
      continue
    if ours is None:
      problems.append(f'lacks {member["kind"]} {name!r}')
      continue
    if member['kind'] == 'property':
      continue  # An attribute or a property: both read the same.
    if isinstance(ours, (classmethod, staticmethod)):
      function = ours.__func__
      params = parameters(function)
      if isinstance(ours, classmethod) and params:
        params = params[1:]
    elif inspect.isfunction(ours):
      params = parameters(ours)
      if member['kind'] == 'method' and params:
        params = params[1:]
    else:
      problems.append(f'{name!r} is not a method')
      continue
    problems += [f'{name}: {p}' for p in parameter_problems(
        member.get('parameters'), params)]
  return problems


def problems(name, entry):
  """Why our `name` is not TFF's (an empty list when it is)."""
  try:
    value = resolve(name)
  except AttributeError as e:
    return [str(e)]
  except ImportError as e:
    return [f'importing it fails: {e}']
  kind = entry['kind']
  if kind == 'module':
    return [] if isinstance(value, types.ModuleType) else ['not a module']
  if kind == 'enum':
    if not (isinstance(value, type) and issubclass(value, enum.Enum)):
      return ['not an enum']
    missing = set(entry['members']) - {m.name for m in value}
    return [f'lacks members {sorted(missing)}'] if missing else []
  if kind == 'exception':
    if not (isinstance(value, type) and issubclass(value, BaseException)):
      return ['not an exception class']
    return []
  if kind == 'constant':
    return [] if repr(value) == entry['value'] else [
        f'is {value!r}, TFF: {entry["value"]}']
  if kind == 'typing':
    return []
  if kind == 'class':
    if not isinstance(value, type):
      return ['not a class (isinstance and subclassing need one)']
    return (parameter_problems(entry['parameters'], class_parameters(value))
            + _member_problems(entry, value))
  if not callable(value):
    return ['not callable']
  return parameter_problems(entry['parameters'], parameters(value))
