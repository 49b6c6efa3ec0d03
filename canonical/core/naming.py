"""How the language names things in its messages: types, objects, and the
user's source line.

Errors name the user's line (`user_location`: the innermost frame outside the
library) and describe values by type and computations by name and line, never
by a repr that shows a memory address.
"""

import collections.abc
import dataclasses
import linecache
import os
import sys
import sysconfig

import tensorflow as tf


def dims(shape):
  """'2,?' for a shape [2, None]; '...' for an unknown rank."""
  if shape.rank is None:
    return '...'
  return ','.join('?' if d is None else str(d) for d in shape.as_list())


def describe(member, sorted_keys=False):
  """A member structure (or placed type, or structure of them) as TensorFlow
  Federated prints types: `float32`, `int32[?,2]`, `<x=float32,y=int32>`,
  `float32*` for a sequence, `{float32}@CLIENTS`. Mappings keep their order
  unless `sorted_keys` (a form's texts: a loaded form's dicts come back in
  any order)."""

  def leaf(spec):
    if isinstance(spec, tf.data.DatasetSpec):
      element = describe(spec.element_spec, sorted_keys)
      return f'{element}*'
    if isinstance(spec, tf.TensorSpec):
      # TFF 0.87 names dtypes as numpy does: tf.string is numpy's str.
      name = 'str' if spec.dtype == tf.string else spec.dtype.name
      if spec.shape.rank == 0:
        return name
      return f'{name}[{dims(spec.shape)}]'
    return str(spec)  # A placed type, or a function type.

  if isinstance(member, collections.abc.Mapping):
    keys = sorted(member) if sorted_keys else list(member)
    return '<' + ','.join(f'{k}={describe(member[k], sorted_keys)}'
                          for k in keys) + '>'
  fields = getattr(member, '_fields', None)
  if fields is not None and isinstance(member, tuple):
    return '<' + ','.join(f'{k}={describe(v, sorted_keys)}'
                          for k, v in zip(fields, member)) + '>'
  if isinstance(member, (list, tuple)):
    return '<' + ','.join(describe(v, sorted_keys) for v in member) + '>'
  return leaf(member)


def form_text(member):
  """`describe` with mapping keys sorted: what a form's texts (signatures,
  summaries, fingerprints) say, the same after a save and load, whose dicts
  come back in any order."""
  return describe(member, sorted_keys=True)


@dataclasses.dataclass(frozen=True)
class Location:
  filename: str
  lineno: int

  def __str__(self):
    line = linecache.getline(self.filename, self.lineno).strip()
    where = f'{os.path.basename(self.filename)}:{self.lineno}'
    return f'{where} ({line})' if line else where


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The language and what runs it: a frame here is never the user's line.
_LIBRARY_DIRS = tuple(os.path.join(_PACKAGE_DIR, d) + os.sep for d in (
    'core', 'compiler', 'templates', 'executors'))
_STDLIB_DIR = os.path.abspath(sysconfig.get_paths()['stdlib'])


def is_library_file(filename):
  """Whether a frame in `filename` is library code rather than the user's.

  The language and what runs it (`canonical`'s own modules and its `core`,
  `compiler`, `templates` and `executors`), installed packages (TensorFlow,
  Keras), the standard library and AutoGraph's generated files are library;
  everything else, `canonical.learning` and `canonical.aggregators`
  included, is user code.
  """
  if not filename or filename.startswith('<'):
    return True
  path = os.path.abspath(filename)
  parts = path.split(os.sep)
  return (os.path.dirname(path) == _PACKAGE_DIR or
          path.startswith(_LIBRARY_DIRS) or
          'site-packages' in parts or 'dist-packages' in parts or
          path.startswith(_STDLIB_DIR + os.sep) or
          os.path.basename(path).startswith('__autograph_generated_file'))


def user_location():
  """The innermost stack frame outside the library: the user's line."""
  frame = sys._getframe(1)  # pylint: disable=protected-access
  while frame is not None:
    if not is_library_file(frame.f_code.co_filename):
      return Location(frame.f_code.co_filename, frame.f_lineno)
    frame = frame.f_back
  return Location('<unknown>', 0)


def location_of_tf_op(op):
  """The user's line that created TF op `op` (AutoGraph lines mapped back)."""
  for frame in reversed(list(getattr(op, 'traceback', None) or ())):
    if not is_library_file(frame.filename):
      return Location(frame.filename, frame.lineno)
  return None


def describe_object(obj):
  """A short name for `obj` in an error message: computations and functions
  by their names and lines, never by a repr that shows a memory address."""
  describe = getattr(obj, 'describe_for_error', None)
  if callable(describe) and not isinstance(obj, type):
    return describe()
  if isinstance(obj, type):
    return f'the class {obj.__qualname__}'
  code = getattr(obj, '__code__', None)
  if code is not None:
    where = Location(code.co_filename, code.co_firstlineno)
    return (f'the Python function {getattr(obj, "__qualname__", "?")!r} '
            f'defined at {where}')
  if isinstance(obj, tf.data.Dataset):
    return f'a dataset {describe(tf.data.DatasetSpec.from_value(obj))}'
  if tf.is_tensor(obj):
    return f'a tensor {obj.dtype.name}[{dims(obj.shape)}]'
  text = repr(obj)
  if ' at 0x' in text or ' object at ' in text:
    return f'a {type(obj).__name__} object'
  return text if len(text) <= 80 else text[:77] + '...'
