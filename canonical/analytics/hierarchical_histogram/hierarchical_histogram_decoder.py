"""TFF's `HierarchicalHistogramDecoder`: node, range and quantile queries on
a hierarchical histogram, at the server in Python (numpy).

With DP noise the tree's layers disagree; two of TFF's remedies are here:
`enforce_consistency` (the least-squares leaves whose tree is nearest,
Cormode, Kulkarni and Srivastava) and `use_efficient` (each node estimated
from its subtree and from the rest of the tree, weighted by their
variances, Honaker's "Efficient Use of Differentially Private Binary
Trees").
"""

import math

import numpy as np
import tensorflow as tf

from canonical import errors


def _layers(hierarchical_histogram):
  """The tree as a list of layers (lists), root first, from a
  `tf.RaggedTensor`, the process's `{'flat_values', 'nested_row_splits'}`,
  or nested lists."""
  value = hierarchical_histogram
  if isinstance(value, tf.RaggedTensor):
    return value.to_list()
  if isinstance(value, dict) and set(value) == {'flat_values',
                                                'nested_row_splits'}:
    flat = np.asarray(value['flat_values']).tolist()
    splits = np.asarray(value['nested_row_splits'][0]).tolist()
    return [flat[a:b] for a, b in zip(splits[:-1], splits[1:])]
  return [list(np.asarray(layer).tolist()) for layer in value]


def _check_shape(layers):
  """A root alone on top, and every layer `arity` times the one above."""
  invalid = errors.InvalidValueError(
      'HierarchicalHistogramDecoder: not a hierarchical histogram (a root, '
      'then layers each arity times as wide as the one above).')
  if not layers or len(layers[0]) != 1:
    raise invalid
  if len(layers) > 1:
    arity = len(layers[1]) / len(layers[0])
    for upper, lower in zip(layers[1:-1], layers[2:]):
      if len(lower) % len(upper) or len(lower) / len(upper) != arity:
        raise invalid


def tree_of_leaves(leaves, arity):
  """The layers (root first) of the complete tree over `leaves`."""
  depth = math.ceil(math.log(len(leaves), arity)) + 1
  layer = np.pad(np.asarray(leaves, np.float64),
                 (0, arity**(depth - 1) - len(leaves)))
  layers = [layer.tolist()]
  for _ in range(depth - 1):
    layer = layer.reshape(-1, arity).sum(axis=1)
    layers.insert(0, layer.tolist())
  return layers


class HierarchicalHistogramDecoder:
  """Queries on a hierarchical histogram of data in
  `[lower_bound, upper_bound)`; `use_efficient` estimates nodes from the
  whole tree (for noisy trees)."""

  def __init__(self, hierarchical_histogram, lower_bound: float,
               upper_bound: float, use_efficient: bool = False):
    self._hierarchical_histogram = _layers(hierarchical_histogram)
    _check_shape(self._hierarchical_histogram)
    self._lower_bound = lower_bound
    self._upper_bound = upper_bound
    layers = self._hierarchical_histogram
    self._arity = 2 if len(layers) == 1 else len(layers[1]) // len(layers[0])
    self._size = len(layers[-1])
    self._num_layers = math.ceil(math.log(self._size, self._arity)) + 1
    self._use_efficient = use_efficient

  def _leaves_under(self, layer, index):
    """`(leftmost, rightmost)` leaf under node `(layer, index)`."""
    width = self._arity**(self._num_layers - 1 - layer)
    return index * width, (index + 1) * width - 1

  def _children(self, index):
    return range(index * self._arity, (index + 1) * self._arity)

  def _is_consistent(self):
    layers = self._hierarchical_histogram
    for layer in range(self._num_layers - 1):
      for index in range(self._arity**layer):
        children = sum(layers[layer + 1][c] for c in self._children(index))
        if not np.isclose(layers[layer][index], children):
          return False
    return True

  def enforce_consistency(self):
    """Replaces the tree by the consistent one nearest to it (least
    squares over the leaves); turns `use_efficient` off, which would then
    add nothing."""
    self._use_efficient = False
    if self._is_consistent():
      return
    leaves = self._arity**(self._num_layers - 1)
    rows = []
    for layer in range(self._num_layers):
      for index in range(self._arity**layer):
        left, right = self._leaves_under(layer, index)
        row = np.zeros(leaves)
        row[left:right + 1] = 1
        rows.append(row)
    values = np.concatenate([np.asarray(layer, np.float64) for layer in
                             self._hierarchical_histogram[:self._num_layers]])
    solution = np.linalg.lstsq(np.array(rows), values, rcond=None)[0]
    self._hierarchical_histogram = tree_of_leaves(solution, self._arity)

  def _check_index(self, layer, index):
    if not 0 <= layer < self._num_layers:
      raise errors.InvalidValueError(
          f'layer {layer} is out of range [0, {self._num_layers}).')
    if not 0 <= index < self._arity**layer:
      raise errors.InvalidValueError(
          f'index {index} is out of range [0, {self._arity**layer}) of layer '
          f'{layer}.')

  def _relative_depth(self, layer):
    return self._arity**(layer - self._num_layers + 1)

  def _from_below(self, layer, index):
    """The node's value, averaged with its children's estimates."""
    value = self._hierarchical_histogram[layer][index]
    if layer == self._num_layers - 1:
      return value
    below = sum(self._from_below(layer + 1, c) for c in self._children(index))
    weight = self._arity / (self._arity + 1)
    return weight * value + (1 - weight) * below

  def _siblings_removed(self, layer, index):
    """The parent's estimate from above, less the node's siblings'."""
    parent = index // self._arity
    above = self._from_above(layer - 1, parent)
    for sibling in self._children(parent):
      if sibling != index:
        above -= self._from_below(layer, sibling)
    return above

  def _from_above(self, layer, index):
    """The node's value, averaged with what the rest of the tree says."""
    value = self._hierarchical_histogram[layer][index]
    if layer == 0:
      return value
    weight = 1 / (3 - self._relative_depth(layer))
    return weight * value + (1 - weight) * self._siblings_removed(layer,
                                                                  index)

  def node_query(self, layer: int, index: int) -> float:
    """The value of node `index` of layer `layer` (0 is the root)."""
    self._check_index(layer, index)
    if not self._use_efficient:
      return self._hierarchical_histogram[layer][index]
    below = self._from_below(layer, index)
    if layer == 0:
      return below
    above = self._siblings_removed(layer, index)
    below_variance = 1 / (2 - self._relative_depth(layer))
    above_variance = 1 / (3 - self._relative_depth(layer))
    weight = (1 / below_variance) / (
        1 / below_variance + 1 / (below_variance + above_variance))
    return weight * below + (1 - weight) * above

  def _range_sum(self, left, right, layer, index):
    first, last = self._leaves_under(layer, index)
    if left > last or right < first or left > right:
      return 0
    if left <= first and right >= last:
      return self.node_query(layer, index)
    total = 0
    for child in self._children(index):
      child_first, child_last = self._leaves_under(layer + 1, child)
      total += self._range_sum(max(left, child_first),
                               min(right, child_last), layer + 1, child)
    return total

  def range_query(self, left: int, right: int) -> float:
    """The sum of the bins `left` to `right`, both included."""
    if left < 0 or right >= self._size:
      raise errors.InvalidValueError(
          f'[{left}, {right}] is outside the bins [0, {self._size}).')
    if left > right:
      raise errors.InvalidValueError(
          f'left ({left}) must be at most right ({right}).')
    return self._range_sum(left, right, 0, 0)

  def _quantile_bin(self, weight, layer, index):
    """The leftmost bin under node `(layer, index)` whose bins up to it
    weigh at least `weight`."""
    if layer == self._num_layers - 1:
      return index
    before = 0.0
    children = list(self._children(index))
    for child in children:
      through = before + self.node_query(layer + 1, child)
      if through == weight:
        return self._leaves_under(layer + 1, child)[1]
      if through > weight:
        return self._quantile_bin(weight - before, layer + 1, child)
      before = through
    return self._leaves_under(layer + 1, children[-1])[1]

  def quantile_query(self, q) -> tuple[float, float]:
    """`(low, high)` of the bin where the `q`-quantile of the data lies;
    the tree must be consistent (`enforce_consistency` first)."""
    if not self._is_consistent():
      raise errors.InvalidValueError(
          'quantile_query needs a consistent hierarchical histogram: call '
          'enforce_consistency first.')
    if not 0 <= q <= 1:
      raise errors.InvalidValueError(f'q must be in [0, 1], got {q}.')
    total = self.range_query(0, self._size - 1)
    index = self._quantile_bin(q * total, 0, 0)
    width = (self._upper_bound - self._lower_bound) / self._size
    low = self._lower_bound + index * width
    return low, low + width
