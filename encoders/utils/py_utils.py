"""Python-side helpers shared by encoders: nothing here adds ops to a graph.

Same names and behaviour as tensor_encoding's `utils.py_utils`, so code that
imports them only needs a new import line.
"""

import collections.abc
import enum
import functools

import numpy as np
import tensorflow as tf

from encoders import errors


@functools.total_ordering
class OrderedEnum(enum.Enum):
  """An `Enum` whose members compare by value, but only with their own class.

  Unlike `IntEnum`, members stay apart from plain numbers and from members
  of other enums: `Grade.A < 3` is a TypeError, not silently True.
  """

  def __lt__(self, other):
    if type(other) is not type(self):
      return NotImplemented
    return self.value < other.value


def static_or_dynamic_shape(value):
  """The shape of a tensor or numpy array, as static as it can be known.

  A fully known shape comes back as a Python shape object, so callers can
  branch on it while building a graph; otherwise as the `tf.shape` tensor.
  """
  if tf.is_tensor(value):
    if value.shape.is_fully_defined():
      return value.shape
    return tf.shape(value)
  if isinstance(value, np.ndarray):
    return value.shape
  raise errors.InvalidTypeError(
      'static_or_dynamic_shape expects a Tensor or a numpy array, '
      f'got {type(value).__name__}: {value!r}')


def _check_dict(name, value):
  if not isinstance(value, dict):
    raise errors.InvalidTypeError(
        f'{name} must be a dict, got {type(value).__name__}: '
        f'{value!r}')


def split_dict_py_tf(dictionary):
  """Splits a nested dict into `(python_values, tensor_values)`.

  Both halves keep every nested dict (possibly empty), so `merge_dicts` can
  put them back together: the Python half goes into a graph as constants
  known at trace time, the tensor half as real inputs.
  """
  _check_dict('split_dict_py_tf argument', dictionary)
  python_part, tensor_part = {}, {}
  for key, value in dictionary.items():
    if isinstance(value, dict):
      python_part[key], tensor_part[key] = split_dict_py_tf(value)
    elif tf.is_tensor(value):
      tensor_part[key] = value
    else:
      python_part[key] = value
  return python_part, tensor_part


def merge_dicts(dict1, dict2):
  """Joins two dicts of matching structure, the inverse of `split_dict_py_tf`.

  A key may appear in both only when both values are dicts (merged
  recursively); a dict value must appear under its key in both, and any
  other key in exactly one. Anything else means the two halves did not come
  from one split, which is a ValueError.
  """
  _check_dict('merge_dicts first argument', dict1)
  _check_dict('merge_dicts second argument', dict2)
  merged = {}
  for key in list(dict1) + [k for k in dict2 if k not in dict1]:
    merged[key] = _merged_value(key, dict1, dict2)
  return merged


def _merged_value(key, dict1, dict2):
  in1, in2 = key in dict1, key in dict2
  value1, value2 = dict1.get(key), dict2.get(key)
  if in1 and in2:
    if isinstance(value1, dict) and isinstance(value2, dict):
      return merge_dicts(value1, value2)
    raise errors.InvalidValueError(
        f'Key {key!r} is in both dicts, which is allowed only '
        f'when both values are dicts; got {value1!r} and '
        f'{value2!r}.')
  value = value1 if in1 else value2
  if isinstance(value, dict):
    raise errors.InvalidValueError(
        f'Key {key!r} holds a dict in only one of the dicts; the '
        'dicts must have the same nested-dict structure.')
  return value


def _children(structure):
  """`(path_component, child)` pairs in the order `tf.nest.flatten` uses."""
  if isinstance(structure, collections.abc.Mapping):
    return [(key, structure[key]) for key in sorted(structure)]
  fields = getattr(type(structure), '_fields', None)  # namedtuple
  if isinstance(structure, tuple) and fields is not None:
    return list(zip(fields, structure))
  attrs = getattr(type(structure), '__attrs_attrs__', None)
  if attrs is not None:
    return [(a.name, getattr(structure, a.name)) for a in attrs]
  return list(enumerate(structure))


def _paths_and_leaves(structure, path):
  if not tf.nest.is_nested(structure):
    yield path, structure
    return
  for component, child in _children(structure):
    yield from _paths_and_leaves(child, path + (component,))


def flatten_with_joined_string_paths(structure, separator='/'):
  """`[(path, leaf)]` for every leaf, in `tf.nest.flatten` order.

  A path joins the dict keys, namedtuple field names and sequence indices
  leading to its leaf, so it names the leaf readably (e.g. `'b/c'`, `'0/2'`).
  This stands in for the `tf.nest` function of that name that TF dropped.
  """
  return [(separator.join(str(c) for c in path), leaf)
          for path, leaf in _paths_and_leaves(structure, ())]


def _describe(value):
  if hasattr(value, 'dtype') and hasattr(value, 'shape'):
    return f'{type(value).__name__} of dtype {value.dtype} and shape {value.shape}'
  return repr(value)


def assert_compatible(spec, value):
  """Raises unless `value` matches `spec`, a structure of `tf.TensorSpec`s.

  TypeError when `spec` holds anything but `tf.TensorSpec`s (a bug in the
  caller); ValueError, naming the first mismatching leaf, when `value` has a
  different structure or a leaf of the wrong dtype or shape.
  """
  spec_leaves = flatten_with_joined_string_paths(spec)
  for path, leaf in spec_leaves:
    if not isinstance(leaf, tf.TensorSpec):
      where = f' at {path!r}' if path else ''
      raise errors.InvalidTypeError(
          f'spec must hold only tf.TensorSpec objects; found '
          f'{type(leaf).__name__}{where}: {leaf!r}')
  try:
    tf.nest.assert_same_structure(spec, value)
  except (TypeError, ValueError) as e:
    raise errors.InvalidValueError(
        f'value does not have the structure of spec: {e}') from e
  value_leaves = [leaf for _, leaf in flatten_with_joined_string_paths(value)]
  for (path, leaf_spec), leaf in zip(spec_leaves, value_leaves):
    if not leaf_spec.is_compatible_with(leaf):
      where = f' at {path!r}' if path else ''
      raise errors.InvalidValueError(
          f'value{where} is not compatible with {leaf_spec}: '
          f'got {_describe(leaf)}')
