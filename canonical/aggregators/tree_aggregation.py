"""DP-FTRL's tree noise over rounds, in pure TensorFlow, and the query of
`DifferentiallyPrivateFactory.tree_aggregation` / `.tree_adaptive`.

The rounds t = 0, 1, ... of a tree are its leaves; node (L, k) covers leaves
[k 2^L, (k+1) 2^L). Each node's noise is drawn statelessly from (the tree's
seed, L, k), so a process keeps only the round within the tree and the seed,
never noise vectors. Node stddev is 1 here; callers scale it by clip * z.

| tree      | a node's noise                        | prefix [0, t]        |
| plain     | n(L, k) ~ N(0, 1), independent        | sum of n over cover  |
| efficient | Honaker's estimate E(L, k), variance  | sum of E over cover  |
|           | 2^L / (2^(L+1) - 1), correlated       |                      |

The cover of [0, t] is the nodes (L, (m >> L) - 1) of the set bits L of
m = t + 1. A round releases the residual prefix(t) - prefix(t - 1), which
is what TFF's `TreeResidualSumQuery` adds to the round's sum: with j the
trailing zeros of m, the cover's new node (j, (m >> j) - 1) minus the j
nodes below it that it replaces (the rest cancel).

The efficient tree (Honaker 2015, tensorflow_privacy's
`EfficientTreeAggregator`) re-estimates each node from its own noisy value
and its subtree's: S(leaf) = n, S(node) = n + (S(left) + S(right)) / 2,
E = S / v_L with v_L = Var S = 2 - 2^-L. It is post-processing of the plain
tree (same privacy), but S depends on the whole subtree, so it is not drawn
node by node. Instead the same joint law is drawn top-down: the subtree
under (L, 1) (leaves [2^L, 2^(L+1))) is independent of all else, so its root
S is drawn from N(0, v_L) and each node's children from two draws given the
node's S (their sum given S, and their difference, independent of S); the
leftmost nodes (L, 0) are built bottom-up from (L - 1, 0) and (L - 1, 1).
A round then costs O(log t) draws instead of a stored buffer of S values.
"""

import collections
import dataclasses
from typing import Any

import tensorflow as tf

from canonical import errors
from canonical.core import privacy_releases
from encoders.core import seeds
from encoders.stages import basic
from encoders.stages import clipping

# What a draw is for: a node's own noise, a subtree root's S, or the sum and
# difference of a node's children's S. Folded into the seed with (L, k).
_OWN, _ROOT, _SUM, _DIFF = range(4)
_I64 = tf.int64


def _draw(seed, what, level, index, size):
  """N(0, 1)^size for (what, node): one fold of the three packed (a level
  is < 64, an index < 2^55), as each stateless op costs tracing time."""
  node = (tf.cast(index, _I64) * 64 + tf.cast(level, _I64)) * 4 + what
  return tf.random.stateless_normal([size], seed=seeds.fold_in(seed, node),
                                    alg=seeds.ALGORITHM)


def _shift(x, n):
  return tf.bitwise.right_shift(x, n)


def _trailing_zeros(m):
  """Of an int64 m > 0."""
  lowest = tf.bitwise.bitwise_and(m, -m)
  return tf.cast(tf.raw_ops.PopulationCount(x=lowest - 1), _I64)


def _bit_length(k):
  """Of an int64 k >= 0: set every bit below its highest, count them."""
  for n in (1, 2, 4, 8, 16, 32):
    k = tf.bitwise.bitwise_or(k, _shift(k, n))
  return tf.cast(tf.raw_ops.PopulationCount(x=k), _I64)


def node_variance(level, efficient):
  """Variance of one node's noise, in units of the node stddev squared."""
  return 2.0**level / (2.0**(level + 1) - 1) if efficient else 1.0


def _v(level):
  """Var S of the efficient tree at `level` (a tensor)."""
  return 2.0 - tf.pow(0.5, tf.cast(level, tf.float32))


def _root(seed, level, size):
  """S(level, 1): the root of a subtree independent of all else."""
  return tf.sqrt(_v(level)) * _draw(seed, _ROOT, level, 1, size)


def _leftmost(seed, level, size):
  """(S(level - 1, 0) (zeros at level 0), S(level, 0)), bottom-up from the
  leftmost leaf."""
  def up(l, below, s):
    own = _draw(seed, _OWN, l, 0, size)
    return l + 1, s, own + 0.5 * (s + _root(seed, l - 1, size))
  _, below, s = tf.while_loop(
      lambda l, below, s: l <= level, up,
      [tf.constant(1, _I64), tf.zeros([size]), _draw(seed, _OWN, 0, 0, size)])
  return below, s


def _split(seed, level, index, s, size):
  """(S(left), S(right)) of node (level, index >= 1) given its S = s."""
  child, parent = _v(level - 1), _v(level)
  total = child / parent * s + tf.sqrt(2 * child - child * child / parent) * (
      _draw(seed, _SUM, level, index, size))
  diff = tf.sqrt(2 * child) * _draw(seed, _DIFF, level, index, size)
  return 0.5 * (total + diff), 0.5 * (total - diff)


def _efficient_s(seed, level, index, size):
  """S(level, index): top-down from its subtree's root (level + M - 1, 1),
  M the bit length of index, choosing a child by each lower bit."""
  def from_root():
    top = _bit_length(index) - 1

    def down(i, s):
      left, right = _split(seed, level + i + 1, _shift(index, i + 1), s, size)
      bit = tf.bitwise.bitwise_and(_shift(index, i), 1)
      return i - 1, tf.where(tf.equal(bit, 1), right, left)
    _, s = tf.while_loop(lambda i, s: i >= 0, down,
                         [top - 1, _root(seed, level + top, size)])
    return s
  return tf.cond(tf.equal(index, 0), lambda: _leftmost(seed, level, size)[1],
                 from_root)


def _node(seed, level, index, size, efficient):
  """A node's noise: n(L, k) (plain) or E(L, k) (efficient)."""
  if not efficient:
    return _draw(seed, _OWN, level, index, size)
  return _efficient_s(seed, level, index, size) / _v(level)


def prefix_noise(seed, round_number, size, efficient):
  """The tree's noise on the prefix sum [0, t] (t = `round_number`): the sum
  over its cover; `[size]` float32, node stddev 1."""
  m = tf.cast(round_number, _I64) + 1

  def add(level, total):
    node = _node(seed, level, _shift(m, level) - 1, size, efficient)
    bit = tf.bitwise.bitwise_and(_shift(m, level), 1)
    return level + 1, total + tf.cast(bit, tf.float32) * node
  _, total = tf.while_loop(lambda level, total: _shift(m, level) > 0, add,
                           [tf.constant(0, _I64), tf.zeros([size])])
  return total


def residual_noise(seed, round_number, size, efficient):
  """prefix_noise(t) - prefix_noise(t - 1) (prefix_noise(0) at t = 0): what
  round t adds to its sum. `[size]` float32, node stddev 1."""
  t = tf.cast(round_number, _I64)
  m = t + 1
  j = _trailing_zeros(m)
  if not efficient:
    def drop(level, total):
      old = _node(seed, level, _shift(t, level) - 1, size, False)
      return level + 1, total - old
    _, total = tf.while_loop(
        lambda level, total: level < j, drop,
        [tf.constant(0, _I64), _node(seed, j, _shift(m, j) - 1, size, False)])
    return total
  return _efficient_residual(seed, t, j, size)


def _efficient_residual(seed, t, j, size):
  """E(new node) - the E of the j left children down its right spine. These
  all lie on the path from leaf t's subtree root (top, 1), top = bit length
  of t - 1, down to leaf t: one walk. When t + 1 = 2^j the new node is the
  leftmost (j, 0), above that root; it and its left child (j - 1, 0) come
  bottom-up. About 2 log2(t) draws; flat loops (no nested control flow)
  keep tracing cheap."""
  leftmost = tf.equal(_shift(t, j), 0)
  below, top_left = _leftmost(seed, tf.where(leftmost, j, 0), size)
  head = tf.cast(leftmost, tf.float32) * (
      top_left / _v(j) - below / _v(tf.maximum(j - 1, 0)))

  top = _bit_length(t) - 1
  start = _root(seed, tf.maximum(top, 0), size)
  on_top = tf.cast(tf.logical_and(tf.equal(top, j), tf.logical_not(leftmost)),
                   tf.float32)

  def down(level, s, total):  # Split (level, t >> level) toward leaf t.
    left, right = _split(seed, level, _shift(t, level), s, size)
    to_right = tf.equal(tf.bitwise.bitwise_and(_shift(t, level - 1), 1), 1)
    child = tf.where(to_right, right, left)
    replaced = tf.cast(level <= j, tf.float32) * left / _v(level - 1)
    new = tf.cast(tf.equal(level - 1, j), tf.float32) * child / _v(j)
    return level - 1, child, total - replaced + new
  _, _, total = tf.while_loop(lambda level, s, total: level > 0, down,
                              [top, start, head + on_top * start / _v(j)])
  return total


def _tree_state(seed, stddev):
  return collections.OrderedDict(round=tf.constant(0, _I64), seed=seed,
                                 stddev=tf.cast(stddev, tf.float32))


@dataclasses.dataclass(frozen=True)
class TreeQuery:
  """What `DifferentiallyPrivateFactory.tree_aggregation` / `tree_adaptive`
  do: clip each record (whole value) to L2 norm C, sum, add the tree's
  residual noise of node stddev C * z, divide by E. Adaptive: also count
  the records at most the clip estimate (centred, sensitivity 1/2) under a
  tree of node stddev `clipped_count_stddev`, move the estimate each round
  as `gaussian_adaptive` does, and adopt it as C only when the trees restart
  (after `restart_warmup` rounds, then every `restart_frequency`), as TFF's
  `RestartQuery(QAdaClipTreeResSumQuery)` does.

  Query state: `numerator_state` (`tree_state` = (round, seed, stddev),
  `clip_value`; adaptive also `noise_multiplier`,
  `quantile_estimator_state` (`current_estimate`, `target_quantile`,
  `learning_rate`, `below_tree_state`)) and `denominator`; the restarts
  count the factory's `noise_round`. The seeds are the noise's secret: keep saved
  states as private as the data. A state carries its tree's seed so that a
  run resumed from it goes on with the same tree (a new seed mid-tree would
  re-noise past rounds and spend their privacy twice).
  """
  initial_clip: float
  value_noise_multiplier: float
  denominator: float
  record_specs: Any
  use_efficient: bool = True
  adaptive: bool = False
  restart_warmup: int = 0
  restart_frequency: int = 0
  target_unclipped_quantile: float = 0.5
  learning_rate: float = 0.2
  clipped_count_stddev: float = 0.0
  seed: int | None = None

  @property
  def round_noise_multiplier(self):
    """The value's and (adaptive) the count's together, as TFF's total."""
    if not self.adaptive:
      return self.value_noise_multiplier
    return privacy_releases.combined_noise_multiplier(
        [self.value_noise_multiplier, 2 * self.clipped_count_stddev])

  def releases(self, source):
    """The value's tree and (adaptive) the count's, both restarted alike."""
    parameters = {'restart_warmup': self.restart_warmup,
                  'restart_frequency': self.restart_frequency}
    made = [privacy_releases.Release(source, self.value_noise_multiplier,
                                     mechanism='tree', parameters=parameters)]
    if self.adaptive:
      made.append(privacy_releases.Release(
          source, 2 * self.clipped_count_stddev, mechanism='tree',
          parameters=parameters))
    return made

  def initial_state(self, noise_seed):
    base = seeds.initial_seed(noise_seed)
    clip = tf.constant(self.initial_clip, tf.float32)
    numerator = collections.OrderedDict(
        tree_state=_tree_state(seeds.fold_in(base, 0),
                               clip * self.value_noise_multiplier),
        clip_value=clip)
    if self.adaptive:
      numerator.update(
          noise_multiplier=tf.constant(self.value_noise_multiplier,
                                       tf.float32),
          quantile_estimator_state=collections.OrderedDict(
              current_estimate=clip,
              target_quantile=tf.constant(self.target_unclipped_quantile,
                                          tf.float32),
              learning_rate=tf.constant(self.learning_rate, tf.float32),
              below_tree_state=_tree_state(seeds.fold_in(base, 1),
                                           self.clipped_count_stddev)))
    return collections.OrderedDict(
        numerator_state=numerator,
        denominator=tf.constant(self.denominator, tf.float32))

  def record_params(self, state):
    """What clients need: the clip (and, adaptive, the clip estimate)."""
    numerator = state['numerator_state']
    if not self.adaptive:
      return numerator['clip_value']
    return (numerator['clip_value'],
            numerator['quantile_estimator_state']['current_estimate'])

  def record(self, params, value):
    self._check_value(value)
    clip, estimate = params if self.adaptive else (params, None)
    clipped, norm = basic.clip_by_global_l2_norm(value, clip)
    if not self.adaptive:
      return clipped
    below = tf.cast(norm <= tf.cast(estimate, norm.dtype), tf.float32)
    return clipped, below - 0.5

  def _check_value(self, value):
    got = [tuple(x.shape) for x in tf.nest.flatten(value)]
    want = [tuple(s.shape) for s in tf.nest.flatten(self.record_specs)]
    if got != want:
      raise errors.InvalidTypeError(
          'DifferentiallyPrivateFactory: record_specs give tensors of shapes '
          f'{want}, but the values aggregated have shapes {got}.')

  def _noise(self, tree, size, efficient):
    return tree['stddev'] * residual_noise(tree['seed'], tree['round'], size,
                                           efficient)

  def noised_result(self, total, state, noise_seed, round_number):
    """(mean, new query state, metrics) from the summed records of round
    `round_number`; the tree keys its noise by its own seed and round (the
    seed in the state, so that a resumed run keeps its tree)."""
    del noise_seed
    if self.adaptive:
      total, below_sum = total
    numerator = state['numerator_state']
    tree = numerator['tree_state']
    flat = tf.nest.flatten(total)
    sizes = [int(x.shape.num_elements()) for x in flat]
    noise = tf.split(self._noise(tree, sum(sizes), self.use_efficient), sizes)
    denominator = state['denominator']
    mean = tf.nest.pack_sequence_as(total, [
        (x + tf.cast(tf.reshape(n, x.shape), x.dtype)) /
        tf.cast(denominator, x.dtype) for x, n in zip(flat, noise)])
    if not self.adaptive:
      new_numerator = collections.OrderedDict(
          numerator, tree_state=collections.OrderedDict(
              tree, round=tree['round'] + 1))
      return mean, collections.OrderedDict(
          numerator_state=new_numerator, denominator=denominator), (
              collections.OrderedDict(
                  tree_agg_dpftrl_clip=numerator['clip_value']))
    estimator = numerator['quantile_estimator_state']
    below_tree = estimator['below_tree_state']
    noised_below = below_sum + self._noise(below_tree, 1, True)[0]
    below = tf.minimum(1.0, tf.maximum(0.0, noised_below / denominator + 0.5))
    estimate = clipping.geometric_quantile_step(
        estimator['current_estimate'], below, estimator['target_quantile'],
        estimator['learning_rate'])
    restart = self._restarts(round_number + 1)
    clip = tf.where(restart, tf.maximum(estimate, 0.0),
                    numerator['clip_value'])
    new_numerator = collections.OrderedDict(
        numerator,
        tree_state=_advanced(tree, restart,
                             clip * numerator['noise_multiplier']),
        clip_value=clip,
        quantile_estimator_state=collections.OrderedDict(
            estimator, current_estimate=estimate,
            below_tree_state=_advanced(below_tree, restart)))
    new_state = collections.OrderedDict(numerator_state=new_numerator,
                                        denominator=denominator)
    return mean, new_state, collections.OrderedDict(current_clip=clip,
                                                    estimate_clip=estimate)

  def _restarts(self, rounds):
    """TFF's `PeriodicRoundRestartIndicator`: after call `rounds`."""
    phase = tf.math.floormod(rounds, self.restart_frequency)
    return tf.equal(phase, self.restart_warmup)


def _advanced(tree, restart, stddev=None):
  """The tree state for the next round: one leaf on, or (restart) a fresh
  tree: round 0 and a new seed, and `stddev` if given."""
  stddev = tree['stddev'] if stddev is None else stddev
  return collections.OrderedDict(
      round=tf.where(restart, tf.constant(0, _I64), tree['round'] + 1),
      seed=tf.where(restart, seeds.next_seed(tree['seed']), tree['seed']),
      stddev=tf.where(restart, tf.cast(stddev, tf.float32), tree['stddev']))
