"""The language's helpers over member structures (structures of
`tf.TensorSpec` / `tf.data.DatasetSpec`, plain or TFF types) and the values
they type: comparing two, binding an argument's named parts by name, taking a
Python list for a sequence, and naming a dataset that does not fit."""

import collections.abc

import numpy as np
import tensorflow as tf
from tensorflow.python.util import nest

from canonical.core.naming import describe
from canonical import errors

_LEAF_SPECS = (tf.TensorSpec, tf.data.DatasetSpec)


def check_member(member, where):
  """Raises unless `member` is a structure of TensorSpec / DatasetSpec leaves."""
  for leaf in tf.nest.flatten(member):
    if not isinstance(leaf, _LEAF_SPECS):
      raise errors.InvalidTypeError(
          f'{where}: expected a structure of tf.TensorSpec or '
          f'tf.data.DatasetSpec, found {leaf!r}.')
  return member


def spec_of(value):
  """The nameless spec of a tensor, a tensor-like value or a dataset."""
  if isinstance(value, tf.data.Dataset):
    return tf.data.DatasetSpec.from_value(value)
  if isinstance(value, tf.data.DatasetSpec):
    return value
  if isinstance(value, tf.TensorSpec):
    return tf.TensorSpec(value.shape, value.dtype)
  if not tf.is_tensor(value):
    value = tf.convert_to_tensor(value)
  return tf.TensorSpec(value.shape, value.dtype)


def is_fully_defined(member):
  """Whether every tensor of `member` has a known shape (datasets never do)."""
  return all(isinstance(leaf, tf.TensorSpec) and leaf.shape.is_fully_defined()
             for leaf in tf.nest.flatten(member))


def same_member(a, b):
  """Whether two member structures have the same structure and compatible specs.

  Sequences compare by length (a tuple matches a list or namedtuple of the
  same layout), mappings by their keys.
  """
  if isinstance(a, collections.abc.Mapping) or isinstance(
      b, collections.abc.Mapping):
    return (isinstance(a, collections.abc.Mapping) and
            isinstance(b, collections.abc.Mapping) and
            sorted(a.keys()) == sorted(b.keys()) and
            all(same_member(a[k], b[k]) for k in a.keys()))
  if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
    return (isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and
            len(a) == len(b) and all(same_member(x, y)
                                     for x, y in zip(a, b)))
  return _compatible(a, b)


def has_dataset(member):
  return any(isinstance(leaf, tf.data.DatasetSpec)
             for leaf in tf.nest.flatten(member))


def by_name(spec, arg):
  """`arg` in the containers of `spec` (a member structure) where both name
  their parts (a mapping, a namedtuple or an attrs class for a namedtuple,
  say): flattening alone would pair a dict's sorted keys with a namedtuple's
  fields in their declared order. Anything else as it is."""
  names = _part_names(spec)
  if names is None:
    if (isinstance(spec, (list, tuple)) and isinstance(arg, (list, tuple)) and
        _part_names(arg) is None and len(spec) == len(arg)):
      return type(arg)(by_name(s, a) for s, a in zip(spec, arg))
    return arg
  given = _part_names(arg)
  if given is None or sorted(given) != sorted(names):
    return arg
  parts = {name: by_name(_part(spec, name), _part(arg, name))
           for name in names}
  if isinstance(spec, dict):
    return type(spec)((name, parts[name]) for name in names)
  return type(spec)(**parts)


def _part_names(value):
  if isinstance(value, dict):
    return list(value.keys())
  fields = getattr(value, '_fields', None)
  if fields is not None and isinstance(value, tuple):
    return list(fields)
  attributes = getattr(type(value), '__attrs_attrs__', None)
  if attributes is not None:
    return [a.name for a in attributes]
  return None


def _part(value, name):
  return dict.__getitem__(value, name) if isinstance(value, dict) else (
      getattr(value, name))


def with_sequences(member, value):
  """`value` (shaped like `member`) with each Python list where `member`
  has a sequence made a dataset of the list's elements, as TFF accepts a
  list for a sequence; anything else as it is."""
  if not has_dataset(member):
    return value
  try:
    return nest.map_structure_up_to(member, _list_as_dataset, member, value,
                                    check_types=False)
  except (TypeError, ValueError):
    return value  # Not this conversion's business: the checks name it.


def _list_as_dataset(spec, value):
  if not isinstance(spec, tf.data.DatasetSpec) or not isinstance(
      value, (list, tuple)):
    return value

  def column(leaf_spec, *leaves):
    if not leaves:
      shape = [0] + [d or 0 for d in leaf_spec.shape.as_list()]
      return np.zeros(shape, tf.as_dtype(leaf_spec.dtype).as_numpy_dtype)
    return np.asarray(leaves, tf.as_dtype(leaf_spec.dtype).as_numpy_dtype)

  return tf.data.Dataset.from_tensor_slices(
      tf.nest.map_structure(column, spec.element_spec, *value))


def dataset_mismatch(member, value):
  """`(expected, actual)` descriptions for the first dataset of `value` (a
  structure shaped like `member`) whose elements do not fit the member's
  DatasetSpec, or None. TensorFlow itself would fail mid-run on it with
  "Type mismatch: actual int32 vs. expect float", naming no piece."""
  try:
    values = nest.flatten_up_to(member, value, check_types=False)
  except (TypeError, ValueError):
    return None  # Not this check's business: the call itself says why.
  for spec, leaf in zip(tf.nest.flatten(member), values):
    if not isinstance(spec, tf.data.DatasetSpec):
      continue
    if not isinstance(leaf, tf.data.Dataset):
      return describe(spec), type(leaf).__name__
    if not same_member(leaf.element_spec, spec.element_spec):
      return describe(spec), describe(spec_of(leaf))
  return None


def _compatible(a, b):
  if isinstance(a, tf.TensorSpec) and isinstance(b, tf.TensorSpec):
    return a.dtype == b.dtype and a.shape.is_compatible_with(b.shape)
  if isinstance(a, tf.data.DatasetSpec) and isinstance(b, tf.data.DatasetSpec):
    return same_member(a.element_spec, b.element_spec)
  return False
