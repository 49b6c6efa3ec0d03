"""Invertible Bloom Lookup Tables (IBLTs) of strings, TFF 0.87's layout.

An IBLT of `repetitions` tables of `table_size` cells holds, in every cell,
`num_chunks + 2` integers modulo a prime `field_size`: the sums of the
chunks of the keys hashed there (each times its count), of their counts,
and of their hash checks (times the counts). Inserting a string adds to one
cell per repetition; IBLTs add (and subtract) cell by cell, so clients'
tables sum to the table of everyone's strings.

Decoding peels: a cell holding one key alone gives its chunks (key sum
times the inverse of the count), which the hash check confirms; the key is
then removed from its other cells, which may leave them pure in turn. TFF
peels one cell at a time from a `RandomShuffleQueue` (stateful, its order
random); here `IbltDecoder.get_freq_estimates_tf` peels every pure cell
at once, round after round, in a `tf.while_loop` of pure ops, so it can run
in a canonical form's piece. Peeling reaches the same keys and counts in any
order; only the order of the decoded strings differs from TFF's (which is
random).

Reference: M. T. Goodrich, M. Mitzenmacher, Invertible Bloom Lookup Tables,
arXiv:1101.2245.
"""

from typing import Optional, Union

import tensorflow as tf

from canonical.analytics.heavy_hitters.iblt import chunkers
from canonical.analytics.heavy_hitters.iblt import hyperedge_hashers
from canonical import errors

# Plain TensorFlow, with no Python control flow over tensors: AutoGraph,
# converting user code that calls it, need not convert it too (seconds).
_plain = tf.autograph.experimental.do_not_convert

_CharacterEncoding = chunkers.CharacterEncoding

DEFAULT_FIELD_SIZE = 2**31 - 1
DEFAULT_REPETITIONS = 3
# Table space over capacity by repetitions (Table 1 of arXiv:1101.2245).
_SPACE_OVERHEAD = {3: 1.222, 4: 1.295, 5: 1.425, 6: 1.570}
_RANDOM = 'random'
_COUPLED = 'coupled'
DTYPE = tf.int64


def _internal_parameters(capacity, repetitions, hash_family=None,
                         hash_family_params=None):
  """`(table_size, hash_family, hash_family_params)` as TFF sizes them: a
  table 10% over the theoretical space, plus 10 cells; coupled hashing from
  a capacity of 100000 on."""
  if repetitions < 3:
    raise errors.InvalidValueError(
        f'repetitions must be at least 3, got {repetitions}.')
  if repetitions in _SPACE_OVERHEAD:
    space = _SPACE_OVERHEAD[repetitions] * capacity
  else:
    space = capacity * repetitions / 4
  table_size = int(1.1 * space / repetitions + 10)
  if hash_family is None:
    hash_family = _COUPLED if capacity >= 100000 else _RANDOM
  if hash_family_params is None:
    hash_family_params = ({'rescale_factor': 0.25 * capacity**0.5}
                          if hash_family == _COUPLED else {})
  return table_size, hash_family, hash_family_params


def _hasher(hash_family, hash_family_params, seed, table_size, repetitions):
  if hash_family == _RANDOM:
    return hyperedge_hashers.RandomHyperEdgeHasher(
        seed, table_size, repetitions, **hash_family_params)
  if hash_family == _COUPLED:
    return hyperedge_hashers.CoupledHyperEdgeHasher(
        seed, table_size, repetitions, **hash_family_params)
  raise errors.InvalidValueError(
      f'hash_family must be {_RANDOM!r} or {_COUPLED!r} (or None: chosen by '
      f'capacity), got {hash_family!r}.')


def _hash_check(strings, field_size, seed):
  """`[n]` int64 checks of the strings, in [0, field_size)."""
  return tf.strings.to_hash_bucket_fast(
      tf.strings.join([f'hash_check_{seed}', strings]), field_size)


def inverse_mod(x, p):
  """`x^-1 mod p` elementwise (extended Euclid) for int64 `x` in [0, p)
  coprime to `p`; elements without one (0) give an unspecified value."""
  x = tf.convert_to_tensor(x, DTYPE)
  p = tf.cast(p, DTYPE)
  zero, one = tf.zeros_like(x), tf.ones_like(x)

  def step(old_r, r, old_s, s):
    live = tf.not_equal(r, 0)
    q = tf.math.floordiv(old_r, tf.where(live, r, one))
    return (tf.where(live, r, old_r), tf.where(live, old_r - q * r, r),
            tf.where(live, s, old_s), tf.where(live, old_s - q * s, s))

  _, _, old_s, _ = tf.while_loop(
      lambda old_r, r, old_s, s: tf.reduce_any(tf.not_equal(r, 0)), step,
      (x, tf.fill(tf.shape(x), p), one, zero))
  return tf.math.floormod(old_s, p)


class IbltEncoder:
  """TFF's `IbltEncoder`: strings (with counts) into an IBLT, a tensor of
  shape `iblt_shape = (repetitions, table_size, num_chunks + 2)`."""

  def __init__(self, capacity, string_max_bytes, *,
               encoding: _CharacterEncoding = _CharacterEncoding.UTF8,
               drop_strings_above_max_length=False, seed=0,
               repetitions=DEFAULT_REPETITIONS, hash_family=None,
               hash_family_params=None, field_size=DEFAULT_FIELD_SIZE):
    self.string_max_bytes = string_max_bytes
    self.table_size, hash_family, hash_family_params = _internal_parameters(
        capacity, repetitions, hash_family, hash_family_params)
    self.repetitions = repetitions
    self.seed = seed
    self.field_size = field_size
    self.drop_strings_above_max_length = drop_strings_above_max_length
    self._dtype = DTYPE
    self.chunker = chunkers.create_chunker(
        string_max_bytes=string_max_bytes, encoding=encoding,
        max_chunk_value=field_size, dtype=DTYPE)
    self.num_chunks = self.chunker.get_num_chunks()
    self.iblt_shape = (repetitions, self.table_size, self.num_chunks + 2)
    self.hyperedge_hasher = _hasher(hash_family, hash_family_params, seed,
                                    self.table_size, repetitions)

  @_plain
  def compute_chunks(self, input_strings):
    """`(chunks [n, num_chunks], the strings as the chunks hold them)`."""
    return self.chunker.encode_tensorflow(input_strings)

  def _kept(self, input_strings, *columns):
    """The strings as chunked, their chunks and `columns`, without strings
    that did not fit when `drop_strings_above_max_length`."""
    chunks, trimmed = self.compute_chunks(input_strings)
    if not self.drop_strings_above_max_length:
      return (trimmed, chunks) + columns
    keep = tf.equal(trimmed, input_strings)
    return tuple(tf.boolean_mask(c, keep)
                 for c in (trimmed, chunks) + columns)

  def _cells(self, strings):
    """`[n, repetitions, 2]` (repetition, index) of each string's cells."""
    return self.hyperedge_hasher.get_hash_indices_tf(strings)[:, :, 1:]

  def _table(self, strings, chunks, counts):
    """The IBLT of `strings` (chunked as `chunks`) with int64 `counts`."""
    counts = counts[:, None]
    checks = _hash_check(strings, self.field_size, self.seed)[:, None]
    rows = tf.concat([chunks * counts, counts, checks * counts], axis=1)
    rows = tf.tile(rows[:, None, :], [1, self.repetitions, 1])
    table = tf.scatter_nd(self._cells(strings), rows, self.iblt_shape)
    return tf.math.floormod(table, self.field_size)

  @_plain
  def compute_iblt(self, input_strings, input_counts=None):
    """The IBLT of the rank-1 `input_strings`, each counted once or
    `input_counts` (a rank-1 int64 tensor) times."""
    return as_graph(self, self._compute_iblt)(input_strings, input_counts)

  def _compute_iblt(self, input_strings, input_counts):
    input_strings = rank_one_strings(input_strings, 'compute_iblt')
    if input_counts is None:
      strings, chunks = self._kept(input_strings)
      counts = tf.ones_like(strings, DTYPE)
    else:
      input_counts = tf.convert_to_tensor(input_counts)
      if input_counts.dtype != DTYPE or input_counts.shape.rank != 1:
        raise errors.InvalidTypeError(
            'compute_iblt: input_counts must be a rank-1 int64 tensor, got '
            f'{input_counts.dtype.name} of shape {input_counts.shape}.')
      tf.debugging.assert_equal(
          tf.shape(input_strings), tf.shape(input_counts),
          message='compute_iblt: one count per string')
      strings, chunks, counts = self._kept(input_strings, input_counts)
    return self._table(strings, chunks, counts)


def empty(shape, dtype):
  """A tensor of `shape` with no elements (`tf.zeros` makes a string one a
  Const holding one element, which a saved form's checks refuse)."""
  return tf.fill(shape, tf.zeros([], dtype))


def as_graph(owner, method):
  """`method` as it is inside a graph; called eagerly, traced once (per
  `owner` and method) and run as one graph: op by op, a decoder's loop
  costs seconds."""
  if not tf.executing_eagerly():
    return method
  cache = owner.__dict__.setdefault('_graphs', {})
  name = method.__name__
  if name not in cache:
    cache[name] = tf.function(method, autograph=False, reduce_retracing=True)
  return cache[name]


def rank_one_strings(strings, where):
  strings = tf.convert_to_tensor(strings)
  if strings.dtype != tf.string or strings.shape.rank != 1:
    raise errors.InvalidTypeError(
        f'{where}: expected a rank-1 string tensor, got '
        f'{strings.dtype.name} of shape {strings.shape}.')
  return strings


class IbltDecoder:
  """TFF's `IbltDecoder`: the strings and counts an IBLT holds.

  `get_freq_estimates_tf()` gives `(strings, counts, num_not_decoded)` as
  tensors (pure TensorFlow: it runs in a form's piece);
  `get_freq_estimates()` (eager only, as TFF's) a dict of each decoded
  string (UTF-8, undecodable bytes dropped) to its count, with the key None
  for the number of strings left undecoded, if any.
  """

  def __init__(self, iblt, capacity, string_max_bytes, *,
               encoding: _CharacterEncoding = _CharacterEncoding.UTF8,
               seed: int = 0, repetitions: int = DEFAULT_REPETITIONS,
               hash_family: Optional[str] = None,
               hash_family_params: Optional[dict[str, Union[int, float]]] =
               None, field_size: int = DEFAULT_FIELD_SIZE):
    self._dtype = DTYPE
    self.iblt = iblt
    self.table_size, self.hash_family, self.hash_family_params = (
        _internal_parameters(capacity, repetitions, hash_family,
                             hash_family_params))
    self.field_size = field_size
    self.chunker = chunkers.create_chunker(
        string_max_bytes=string_max_bytes, encoding=encoding,
        max_chunk_value=field_size, dtype=DTYPE)
    self.num_chunks = self.chunker.get_num_chunks()
    self.count = self.num_chunks
    self.check = self.num_chunks + 1
    self.repetitions = repetitions
    self.seed = seed
    self.iblt_shape = (repetitions, self.table_size, self.num_chunks + 2)
    self.hyperedge_hasher = _hasher(self.hash_family, self.hash_family_params,
                                    seed, self.table_size, repetitions)

  @_plain
  def decode_string_from_chunks(self, chunks):
    """The string `num_chunks` chunks hold."""
    return self.chunker.decode_tensorflow(chunks)[0]

  def _pure_cells(self, table):
    """`(pure [R * T] bool, strings [R * T], chunks [R * T, C])`: which cells
    hold one key alone (nonzero count, nonempty string, matching check),
    the string each holds if so, and its chunks."""
    cells = tf.reshape(table, [-1, self.num_chunks + 2])
    counts = cells[:, self.count]
    chunks = tf.math.floormod(
        cells[:, :self.num_chunks] *
        inverse_mod(counts, self.field_size)[:, None], self.field_size)
    strings = self.chunker.decode_tensorflow(chunks)
    checks = tf.math.floormod(
        counts * _hash_check(strings, self.field_size, self.seed),
        self.field_size)
    pure = (tf.not_equal(counts, 0) &
            (tf.strings.length(strings) > 0) &
            tf.equal(cells[:, self.check], checks))
    return pure, strings, chunks

  def _removals(self, strings, chunks, counts):
    """The `(cells [n * R, 2], updates [n * R, C + 2])` that take the keys
    out of the IBLT: each key's row, negated modulo `field_size`."""
    checks = _hash_check(strings, self.field_size, self.seed)
    rows = tf.concat([chunks * counts[:, None], counts[:, None],
                      checks[:, None] * counts[:, None]], axis=1)
    negated = tf.math.floormod(-tf.math.floormod(rows, self.field_size),
                               self.field_size)
    cells = self.hyperedge_hasher.get_hash_indices_tf(strings)[:, :, 1:]
    updates = tf.tile(negated[:, None, :], [1, self.repetitions, 1])
    return (tf.reshape(cells, [-1, 2]),
            tf.reshape(updates, [-1, self.num_chunks + 2]))

  def _peel(self, values=None):
    """Peels the IBLT (and the values tensor beside it, if any) to the end:
    `(table, strings, counts, values_out)`."""
    table = tf.math.floormod(tf.cast(self.iblt, DTYPE), self.field_size)
    table = tf.reshape(table, self.iblt_shape)
    has_values = values is not None
    if has_values:
      values = tf.convert_to_tensor(values)
      value_shape = values.shape[2:]
    else:
      values = tf.zeros([self.repetitions, self.table_size], DTYPE)
      value_shape = tf.TensorShape([])

    def body(table, values, strings, counts, found, _):
      pure, cell_strings, cell_chunks = self._pure_cells(table)
      cell_ids = tf.cast(tf.where(pure)[:, 0], tf.int32)
      unique, index = tf.unique(tf.gather(cell_strings, cell_ids))
      first = tf.math.unsorted_segment_min(cell_ids, index, tf.size(unique))
      cell_counts = tf.reshape(table[:, :, self.count], [-1])
      new_counts = tf.gather(cell_counts, first)
      new_values = tf.gather(
          tf.reshape(values, [-1] + value_shape.as_list()), first)
      cells, updates = self._removals(unique, tf.gather(cell_chunks, first),
                                      new_counts)
      table = tf.math.floormod(
          tf.tensor_scatter_nd_add(table, cells, updates), self.field_size)
      value_updates = tf.repeat(-new_values, self.repetitions, axis=0)
      values = tf.tensor_scatter_nd_add(values, cells, value_updates)
      return (table, values, tf.concat([strings, unique], 0),
              tf.concat([counts, new_counts], 0),
              tf.concat([found, new_values], 0), tf.size(unique) > 0)

    loop_vars = (table, values, empty([0], tf.string), empty([0], DTYPE),
                 empty([0] + value_shape.as_list(), values.dtype),
                 tf.constant(True))
    table, _, strings, counts, found, _ = tf.while_loop(
        lambda *args: args[-1], body, loop_vars,
        shape_invariants=(table.shape, values.shape, tf.TensorShape([None]),
                          tf.TensorShape([None]),
                          tf.TensorShape([None]).concatenate(value_shape),
                          tf.TensorShape([])))
    return table, strings, counts, found if has_values else None

  def _not_decoded(self, table):
    """TFF's count of keys left: the counts left, over the repetitions."""
    return tf.cast(tf.reduce_sum(table[:, :, self.count]) / self.repetitions,
                   DTYPE)

  @_plain
  def get_freq_estimates_tf(self):
    """`(strings [k], counts [k] int64, num_not_decoded int64)`."""
    return as_graph(self, self._freq_estimates)()

  def _freq_estimates(self):
    table, strings, counts, _ = self._peel()
    return strings, counts, self._not_decoded(table)

  def get_freq_estimates(self):
    """`{string: count}` (and `{None: number not decoded}` if any), eager."""
    check_eager('IbltDecoder.get_freq_estimates')
    strings, counts, not_decoded = self.get_freq_estimates_tf()
    result = dict(zip(as_text(strings), counts.numpy().tolist()))
    not_decoded = not_decoded.numpy()
    if not_decoded:
      result[None] = not_decoded
    return result


def check_eager(where):
  if not tf.executing_eagerly():
    raise errors.InvalidValueError(
        f'{where} gives Python values: call it eagerly (in a computation, '
        'use get_freq_estimates_tf).')


def as_text(strings):
  """The decoded strings as text; bytes cut mid-character are dropped (a
  string trimmed to `string_max_bytes` may end in one), as in TFF."""
  return [s.decode('utf-8', 'ignore') for s in strings.numpy().tolist()]


@_plain
def decode_iblt_tf(iblt, capacity: int, string_max_bytes: int, *,
                   encoding: _CharacterEncoding = _CharacterEncoding.UTF8,
                   seed: int = 0, repetitions: int = DEFAULT_REPETITIONS,
                   hash_family: Optional[str] = None,
                   hash_family_params: Optional[dict[str, Union[int, float]]]
                   = None, field_size: int = DEFAULT_FIELD_SIZE):
  """TFF's `decode_iblt_tf`: `(strings, counts, num_not_decoded)` of
  `iblt`, pure TensorFlow."""
  return IbltDecoder(
      iblt=iblt, capacity=capacity, string_max_bytes=string_max_bytes,
      encoding=encoding, seed=seed, repetitions=repetitions,
      hash_family=hash_family, hash_family_params=hash_family_params,
      field_size=field_size).get_freq_estimates_tf()
