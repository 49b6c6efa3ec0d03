"""Seeds for stateless random ops: fresh noise when run directly, pure inside a form.

Stages draw every random number with `tf.random.stateless_*` ops from seeds made
here. Where those seeds come from depends on where the stage runs:

- Run directly (eager, `tf.function`, a TF1 session), as with tensor_encoding:
  `params_seed()` and `encode_seed()` fold in a draw of TF's global generator, so
  every `get_params` and every `encode` gets fresh noise, and the mean of repeated
  stochastic encodes of one input converges to it.
- Inside `pure_randomness()` (entered while the compiler traces a piece of a
  canonical form): no stateful op at all. Shared randomness (a rotation's signs)
  comes from the stage's `seed` and the encoder's round (`noise_round`), and each
  client's noise also folds in a fingerprint of its input, so the same client in
  another round draws new noise and a replayed round gives the same bits.
"""

import contextlib
import contextvars
import numbers

import tensorflow as tf

from encoders import errors

# Enough sampled elements to tell clients' updates apart, few enough to cost nothing.
_FINGERPRINT_SAMPLES = 4096

_INT_OF_WIDTH = {1: tf.uint8, 2: tf.int16, 4: tf.int32, 8: tf.int64}

# Every stateless draw names this generator: the default picks another under
# XLA or on another device, so a stage fused into an XLA computation
# (`xla_fusion`) or run elsewhere would draw other numbers.
ALGORITHM = 'philox'

# None outside a form; inside, the encoder's round (an int64 scalar tensor) or 0.
_PURE_ROUND = contextvars.ContextVar('encoders_pure_round', default=None)
# Set while tracing code that must not hold a stateful op (an XLA cluster run
# directly): `(base [2] int64 tensor, [draws so far])`; fresh draws derive from it.
_FRESH_BASE = contextvars.ContextVar('encoders_fresh_base', default=None)


@contextlib.contextmanager
def pure_randomness():
  """Within: seeds are pure functions of stage seeds, rounds and inputs."""
  token = _PURE_ROUND.set(_PURE_ROUND.get() if is_pure() else 0)
  try:
    yield
  finally:
    _PURE_ROUND.reset(token)


@contextlib.contextmanager
def noise_round(round_number):
  """Within a pure context: shared randomness folds in `round_number`."""
  if not is_pure():
    yield
    return
  token = _PURE_ROUND.set(tf.cast(round_number, tf.int64))
  try:
    yield
  finally:
    _PURE_ROUND.reset(token)


def is_pure():
  return _PURE_ROUND.get() is not None


def check_seed(stage_name, seed):
  """A stage's `seed` argument: None (fresh when run directly) or a Python int."""
  if seed is not None and (isinstance(seed, bool) or
                           not isinstance(seed, numbers.Integral)):
    raise errors.InvalidTypeError(
        f'{stage_name}: seed must be a Python int or None, got '
        f'{seed!r}.')
  return None if seed is None else int(seed)


def initial_seed(seed):
  """The `[2]` int64 seed tensor for a Python integer."""
  return tf.constant([0, int(seed)], dtype=tf.int64)


def params_seed(seed=None):
  """The `[2]` int64 seed a stage's `get_params` hands to its encode and decode.

  Pure: from `seed` (0 when None) and the round. Otherwise fixed by an integer
  `seed`, or drawn afresh on every call when `seed` is None.
  """
  if is_pure():
    return fold_in(initial_seed(seed or 0), _PURE_ROUND.get())
  if seed is not None:
    return initial_seed(seed)
  return _fresh([2])


def encode_seed(seed, x):
  """The seed of one `encode`'s own noise (stochastic rounding, sampling).

  Pure: folds in a fingerprint of `x` and the round, so clients with different
  data draw independent noise, and so does one client in another round.
  Otherwise folds in a fresh draw, so every call differs.
  """
  if is_pure():
    return fold_in(client_seed(seed, x), _PURE_ROUND.get())
  return fold_in(seed, _fresh([]))


def fingerprint(x):
  """An int64 scalar that depends on the bits of (a sample of) `x`."""
  flat = tf.reshape(x, [-1])
  size = tf.size(flat, out_type=tf.int64)
  stride = tf.maximum(size // _FINGERPRINT_SAMPLES, 1)
  sample = tf.strided_slice(flat, [0], [size], [stride])
  if sample.dtype.is_floating or sample.dtype.is_complex:
    sample = tf.bitcast(sample, _INT_OF_WIDTH[sample.dtype.size])
  sample = tf.cast(sample, tf.int64)
  weights = tf.range(1, tf.size(sample, out_type=tf.int64) + 1) * 2654435761
  return tf.reduce_sum(sample * weights) + size


def client_seed(seed, x):
  """Folds a fingerprint of `x` into `seed`: independent noise per input."""
  return fold_in(seed, fingerprint(x))


def next_seed(seed):
  """The seed of the next round, for stages that keep their seed as state."""
  return fold_in(seed, tf.constant(1, tf.int64))


def noise_source():
  """`(pure, tensor)`: where seeds come from here, to hand into a traced function.

  Pure: the round (a tensor, or 0). Otherwise a fresh `[2]` seed drawn now, from
  which `drawing_from` derives every fresh draw made inside the function.
  """
  if is_pure():
    return True, _PURE_ROUND.get()
  return False, _fresh([2])


@contextlib.contextmanager
def drawing_from(pure, tensor):
  """Within: seeds come from `noise_source()`'s result, with no stateful op."""
  if pure:
    with pure_randomness(), noise_round(tensor):
      yield
    return
  token = _FRESH_BASE.set((tensor, [0]))
  try:
    yield
  finally:
    _FRESH_BASE.reset(token)


def _fresh(shape):
  """Int64 values new on every run: from TF's global generator (a stateful op),
  or, within `drawing_from`, stateless draws from its base seed, one per call site.
  """
  source = _FRESH_BASE.get()
  if source is None:
    return tf.random.uniform(shape, minval=tf.int64.min, maxval=tf.int64.max,
                             dtype=tf.int64)
  base, draws = source
  draws[0] += 1
  return tf.random.stateless_uniform(
      shape, seed=fold_in(base, draws[0]), minval=None, maxval=None,
      dtype=tf.int64, alg=ALGORITHM)


def fold_in(seed, data):
  """`seed` ([2] int64) with `data` folded in: a new, independent seed."""
  folded = tf.random.experimental.stateless_fold_in(
      tf.cast(seed, tf.int64), tf.cast(data, tf.int64), alg=ALGORITHM)
  return tf.cast(folded, tf.int64)
