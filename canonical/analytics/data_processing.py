"""TFF 0.87's `tff.analytics.data_processing`: the elements of a client's
dataset of string batches (rank-1 string tensors), all, unique, capped or
the most frequent, with their counts; and `to_stacked_tensor`.

Pure TensorFlow (dataset reductions), so they run inside a tf_computation
and in a form's `work`; called eagerly they run at once. Results equal
TFF's, order included: unique elements come in order of first appearance.
"""

from typing import Optional

import tensorflow as tf

from canonical.core import naming
from canonical import errors

# Plain TensorFlow, with no Python control flow over tensors: AutoGraph,
# converting user code that calls it, need not convert it too (seconds).
_plain = tf.autograph.experimental.do_not_convert


def _check_string_batches(dataset, where):
  if not isinstance(dataset, tf.data.Dataset):
    raise errors.InvalidTypeError(
        f'{where}: expected a tf.data.Dataset, got '
        f'{naming.describe_object(dataset)}.')
  spec = dataset.element_spec
  if not isinstance(spec, tf.TensorSpec) or spec.shape.rank != 1:
    raise errors.InvalidValueError(
        f'{where}: the dataset\'s elements must be rank-1 tensors (batches '
        f'of strings), got {spec}.')
  if spec.dtype != tf.string:
    raise errors.InvalidTypeError(
        f'{where}: the dataset\'s elements must be strings, got '
        f'{spec.dtype.name}.')


def _check_string_max_bytes(string_max_bytes, where):
  if string_max_bytes is not None and string_max_bytes < 1:
    raise errors.InvalidValueError(
        f'{where}: string_max_bytes must be at least 1 (or None), got '
        f'{string_max_bytes}.')


def _check_contribution(max_user_contribution, where):
  if max_user_contribution < 1:
    raise errors.InvalidValueError(
        f'{where}: max_user_contribution must be at least 1, got '
        f'{max_user_contribution}.')


def _trimmed(batch, string_max_bytes):
  if string_max_bytes is None:
    return batch
  return tf.strings.substr(batch, 0, string_max_bytes, unit='BYTE')


def _concatenated(dataset, string_max_bytes, unique):
  """Every element of the batches (trimmed), in order; without repeats
  when `unique` (first appearances kept)."""

  def add(elements, batch):
    elements = tf.concat([elements, _trimmed(batch, string_max_bytes)], 0)
    return tf.unique(elements)[0] if unique else elements

  return dataset.reduce(tf.constant([], tf.string), add)


@_plain
def get_all_elements(dataset: tf.data.Dataset,
                     string_max_bytes: Optional[int] = None):
  """Every element of every batch, in order, as one rank-1 tensor; strings
  longer than `string_max_bytes` bytes are cut to it."""
  where = 'get_all_elements'
  _check_string_batches(dataset, where)
  _check_string_max_bytes(string_max_bytes, where)
  return _concatenated(dataset, string_max_bytes, unique=False)


def _capped_dataset(dataset, max_user_contribution, batch_size, where):
  """The first `max_user_contribution // batch_size` batches."""
  _check_string_batches(dataset, where)
  _check_contribution(max_user_contribution, where)
  if batch_size < 1:
    raise errors.InvalidValueError(
        f'{where}: batch_size must be at least 1, got {batch_size}.')
  return dataset.take(max_user_contribution // batch_size)


@_plain
def get_capped_elements(dataset: tf.data.Dataset, max_user_contribution: int,
                        batch_size: int = 1,
                        string_max_bytes: Optional[int] = None):
  """The elements of the first `max_user_contribution // batch_size`
  batches (whole batches only, so possibly fewer than
  `max_user_contribution` elements)."""
  where = 'get_capped_elements'
  _check_string_max_bytes(string_max_bytes, where)
  return get_all_elements(
      _capped_dataset(dataset, max_user_contribution, batch_size, where),
      string_max_bytes)


@_plain
def get_capped_elements_with_counts(dataset: tf.data.Dataset,
                                    max_user_contribution: int,
                                    batch_size: int = 1,
                                    string_max_bytes: Optional[int] = None):
  """`(elements, counts)`: the unique elements of the capped batches (as
  `get_capped_elements` caps them) and how often each appears there."""
  where = 'get_capped_elements_with_counts'
  _check_string_max_bytes(string_max_bytes, where)
  return get_unique_elements_with_counts(
      _capped_dataset(dataset, max_user_contribution, batch_size, where),
      string_max_bytes)


@_plain
def get_unique_elements(dataset: tf.data.Dataset,
                        string_max_bytes: Optional[int] = None):
  """The distinct elements, in order of first appearance."""
  where = 'get_unique_elements'
  _check_string_batches(dataset, where)
  _check_string_max_bytes(string_max_bytes, where)
  return _concatenated(dataset, string_max_bytes, unique=True)


@_plain
def get_unique_elements_with_counts(dataset: tf.data.Dataset,
                                    string_max_bytes: Optional[int] = None
                                    ) -> tuple[tf.Tensor, tf.Tensor]:
  """`(elements, counts)`: the distinct elements in order of first
  appearance, and how often each appears (int64)."""
  where = 'get_unique_elements_with_counts'
  _check_string_batches(dataset, where)
  _check_string_max_bytes(string_max_bytes, where)
  elements, index = tf.unique(get_all_elements(dataset, string_max_bytes))
  counts = tf.math.unsorted_segment_sum(
      tf.ones_like(index, tf.int64), index, tf.size(elements))
  return elements, counts


@_plain
def get_top_elements_with_counts(dataset: tf.data.Dataset,
                                 max_user_contribution: int,
                                 string_max_bytes: Optional[int] = None
                                 ) -> tuple[tf.Tensor, tf.Tensor]:
  """`(elements, counts)` of the `max_user_contribution` most frequent
  distinct elements (all of them if there are no more), not sorted."""
  _check_contribution(max_user_contribution, 'get_top_elements_with_counts')
  elements, counts = get_unique_elements_with_counts(dataset,
                                                     string_max_bytes)

  def top():
    top_counts, indices = tf.math.top_k(counts, max_user_contribution,
                                        sorted=False)
    return tf.gather(elements, indices), top_counts

  return tf.cond(tf.size(elements) > max_user_contribution, top,
                 lambda: (elements, counts))


@_plain
def get_top_elements(dataset: tf.data.Dataset, max_user_contribution: int,
                     string_max_bytes: Optional[int] = None):
  """The `max_user_contribution` most frequent distinct elements, each
  once."""
  return get_top_elements_with_counts(dataset, max_user_contribution,
                                      string_max_bytes)[0]


@_plain
def get_top_multi_elements(dataset: tf.data.Dataset,
                           max_user_contribution: int,
                           string_max_bytes: Optional[int] = None):
  """The `max_user_contribution` most frequent distinct elements, each
  repeated as often as it appears (a multiset)."""
  elements, counts = get_top_elements_with_counts(
      dataset, max_user_contribution, string_max_bytes)
  return tf.repeat(elements, counts)


@_plain
def to_stacked_tensor(ds: tf.data.Dataset):
  """The dataset's elements stacked along a new first axis, structure kept
  (the inverse of `tf.data.Dataset.from_tensor_slices`); every element
  shape must be fully defined."""
  if not isinstance(ds, tf.data.Dataset):
    raise errors.InvalidTypeError(
        f'to_stacked_tensor: expected a tf.data.Dataset, got '
        f'{naming.describe_object(ds)}.')
  specs = tf.nest.flatten(ds.element_spec)
  for spec in specs:
    if not isinstance(spec, tf.TensorSpec) or (
        not spec.shape.is_fully_defined()):
      raise errors.InvalidValueError(
          'to_stacked_tensor: dataset elements must have fully defined '
          f'shapes, got {ds.element_spec}.')
  empty = tf.nest.map_structure(
      lambda s: tf.fill([0] + s.shape.as_list(), tf.zeros([], s.dtype)),
      ds.element_spec)

  def append(stacked, element):
    return tf.nest.map_structure(
        lambda s, x: tf.concat([s, tf.expand_dims(x, 0)], 0), stacked,
        element)

  return ds.reduce(empty, append)
