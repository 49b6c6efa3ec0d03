"""Checks that any encoding stage keeps the contract the encoders rely on.

`check_stage` runs every applicable check and raises one `AssertionError`
listing each failure: which stage, which check, which input (shape and dtype)
and the first mismatch. Every check is also a function of its own
(`check_round_trip`, `check_separate_traces`, ...) for picking a few, and
`check_stage` returns a report of what it measured (round-trip errors, which
dtypes and special shapes were rejected, the unbiasedness statistics).

Both `EncodingStageInterface` and `AdaptiveEncodingStageInterface` stages are
accepted; an adaptive stage gets its params from
`stage.get_params(stage.initial_state())`. The harness draws its own data from
numpy with fixed seeds and runs stages as inside a compiled form
(`seeds.pure_randomness()`), so every check is reproducible.

Reached through the package, `encoders.testing`, which re-exports its public
names. The checks' helpers live in `_harness_subject` (running the stage,
reporting its failures) and `_harness_values` (data and comparisons).
"""

import functools

import numpy as np
import tensorflow as tf

from encoders.core import encoding_stage
from encoders.core import seeds
from encoders.testing._harness_subject import _aggregate_one
from encoders.testing._harness_subject import _as_arguments
from encoders.testing._harness_subject import _call_in_fresh_trace
from encoders.testing._harness_subject import _dynamic_round_trip
from encoders.testing._harness_subject import _shape_arg
from encoders.testing._harness_subject import _Subject
from encoders.testing._harness_subject import _to_numpy
from encoders.testing._harness_subject import _traced_decode
from encoders.testing._harness_subject import _traced_encode
from encoders.testing._harness_values import _bias_directions
from encoders.testing._harness_values import _case
from encoders.testing._harness_values import _compare_round_trip
from encoders.testing._harness_values import _default_rtol
from encoders.testing._harness_values import _EPS
from encoders.testing._harness_values import _expect_close
from encoders.testing._harness_values import _expect_dict_of_tensors
from encoders.testing._harness_values import _expect_identical
from encoders.testing._harness_values import _expect_same_static_signature
from encoders.testing._harness_values import _f64
from encoders.testing._harness_values import _make_input
from encoders.testing._harness_values import _max_abs
from encoders.testing._harness_values import _random_like
from encoders.testing._harness_values import _shape_key
from encoders.testing._harness_values import _z_scores

FLOAT_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)
DEFAULT_SHAPES = ((37,), (5, 11))
SCALAR_AND_EMPTY_SHAPES = ((), (0,), (4, 0))
UNBIASED_SHAPE = (6, 11)
# The dtype of `num_summands` when a sum is decoded (a Python int's default).
NUM_SUMMANDS_DTYPE = tf.int32
# The params key whose value seeds a stage's randomness, by convention.
SEED_KEY = 'seed'

ALL_CHECKS = ('structure', 'round_trip', 'shape_and_dtype', 'separate_traces',
              'deterministic', 'commutes_with_sum', 'dtypes',
              'scalar_empty_dynamic', 'unbiased')


def _as_in_a_form(check):
  """Checks run stages as a compiled form does: pure randomness (seeds.py).

  Run directly, stages draw fresh noise on every encode; inside a form the same
  input, params and round give the same bits, which is what the checks of
  determinism and separate traces rely on.
  """
  @functools.wraps(check)
  def run_pure(*args, **kwargs):
    with seeds.pure_randomness():
      return check(*args, **kwargs)
  return run_pure


@_as_in_a_form
def check_stage(stage, *, lossless=False, unbiased=False,
                max_relative_error=None, atol=0.0, shapes=DEFAULT_SHAPES,
                dtypes=FLOAT_DTYPES, seed=0, num_trials=200, z_threshold=6.0,
                commute_rtol=None, skip=()):
  """Runs every applicable check on `stage`; returns a report of the results.

  Always: structure, round trip, shape and dtype, separate traces,
  determinism, dtypes, scalar/empty/dynamic inputs. Also commutes-with-sum
  when the stage claims it, and unbiasedness when `unbiased` (a lossless stage
  is trivially unbiased, so that check is skipped for it).

  Args:
    stage: an `EncodingStageInterface` or `AdaptiveEncodingStageInterface`.
    lossless: the stage claims `decode(encode(x)) == x` (within `atol`).
    unbiased: the stage claims `E[decode(encode(x))] == x`.
    max_relative_error: bound on `|decode(encode(x)) - x| / |x|` (L2 norms)
      for float32 inputs of `shapes`; None only reports it.
    atol: absolute tolerance of the lossless comparisons.
    shapes: static input shapes for the main checks.
    dtypes: dtypes that must each work or be rejected with a clear error.
    seed: seeds all the harness's random data.
    num_trials, z_threshold: see `check_unbiased`.
    commute_rtol: see `check_commutes_with_sum`'s `rtol`.
    skip: names from `ALL_CHECKS` not to run.

  Returns:
    A dict: check name -> what it measured.

  Raises:
    AssertionError: listing every failed check.
  """
  unknown = set(skip) - set(ALL_CHECKS)
  if unknown:
    raise ValueError(f'check_stage: unknown checks in skip: {sorted(unknown)}; '
                     f'known: {ALL_CHECKS}')
  if not shapes:
    raise ValueError('check_stage: shapes must name at least one shape.')
  subject = _Subject(stage)
  bounds = dict(lossless=lossless, max_relative_error=max_relative_error,
                atol=atol)
  report, failures = {}, []

  def run(check_name, key, fn, *args, **kwargs):
    """Runs one check; its result goes under `report[check_name][key]`."""
    if check_name in skip:
      return
    try:
      result = fn(*args, **kwargs)
    except AssertionError as e:
      failures.append(str(e))
      return
    if result is None:
      return
    if key is None:
      report[check_name] = result
    else:
      report.setdefault(check_name, {})[key] = result

  run('structure', None, check_structure, stage, shapes[0], seed=seed)
  for shape in shapes:
    key = _shape_key(shape)
    run('round_trip', key, check_round_trip, stage, shape, seed=seed, **bounds)
    run('shape_and_dtype', key, check_shape_and_dtype, stage, shape, seed=seed)
    run('separate_traces', key, check_separate_traces, stage, shape, seed=seed,
        **bounds)
    run('deterministic', key, check_deterministic, stage, shape, seed=seed)
    if subject.adaptive.commutes_with_sum:
      run('commutes_with_sum', key, check_commutes_with_sum, stage, shape,
          rtol=commute_rtol, seed=seed)
  run('dtypes', None, check_dtypes, stage, shapes[0], dtypes=dtypes,
      seed=seed, **bounds)
  run('scalar_empty_dynamic', None, check_scalar_empty_dynamic, stage,
      dynamic_shapes=shapes, seed=seed, **bounds)
  if unbiased and not lossless:
    run('unbiased', None, check_unbiased, stage, UNBIASED_SHAPE,
        num_trials=num_trials, z_threshold=z_threshold, seed=seed)
  if failures:
    raise AssertionError(f'{len(failures)} check(s) failed for '
                         f'{subject.label}:\n' + '\n'.join(
                             f'- {f}' for f in failures))
  return report


def make_input(shape, dtype=tf.float32, seed=0):
  """The harness's data: normal values (mean 0.25, std 1.5) fixed by `seed`."""
  return _make_input(shape, dtype, np.random.default_rng(seed))


# ---------------------------------------------------------------------------
# The checks.


@_as_in_a_form
def check_structure(stage, shape=DEFAULT_SHAPES[0], dtype=tf.float32, *,
                    seed=0):
  """Properties are well typed; encode, params, state are dicts of tensors."""
  subject = _Subject(stage)
  stage = subject.adaptive
  check = 'structure'
  case = _case(shape, dtype)
  if not isinstance(stage.name, str) or not stage.name:
    subject.fail(check, case,
                 f'name must be a non-empty str, got {stage.name!r}')
  keys = stage.compressible_tensors_keys
  if (not isinstance(keys, (list, tuple)) or
      not all(isinstance(k, str) for k in keys)):
    subject.fail(check, case, 'compressible_tensors_keys must be a list of '
                 f'str, got {keys!r}')
  for prop in ('commutes_with_sum', 'decode_needs_input_shape'):
    if not isinstance(getattr(stage, prop), bool):
      subject.fail(check, case,
                   f'{prop} must be a bool, got {getattr(stage, prop)!r}')
  modes = stage.state_update_aggregation_modes
  if not isinstance(modes, dict) or not all(
      isinstance(m, encoding_stage.StateAggregationMode)
      for m in modes.values()):
    subject.fail(check, case, 'state_update_aggregation_modes must be a dict '
                 f'of StateAggregationMode, got {modes!r}')
  x = make_input(shape, dtype, seed)
  with subject.no_error(check, case, 'initial_state, get_params and encode'):
    state = stage.initial_state()
    params = stage.get_params(state)
    if not (isinstance(params, tuple) and len(params) == 2 and
            all(isinstance(p, dict) for p in params)):
      subject.fail(check, case, 'get_params must return a pair of dicts, got '
                   f'{type(params).__name__}')
    result = stage.encode(x, params[0])
  if not (isinstance(result, tuple) and len(result) == 2):
    subject.fail(check, case, 'encode of an adaptive stage must return '
                 '(encoded_tensors, state_update_tensors), got '
                 f'{type(result).__name__}')
  encoded, updates = result
  _expect_dict_of_tensors(subject, check, case, 'initial_state', state)
  _expect_dict_of_tensors(subject, check, case, 'encode', encoded)
  _expect_dict_of_tensors(subject, check, case, 'state update', updates)
  missing = [k for k in keys if k not in encoded]
  if missing:
    subject.fail(check, case, f'compressible_tensors_keys {missing} are not '
                 f'among the encoded keys {sorted(encoded)}')
  if set(updates) != set(modes):
    subject.fail(check, case, f'encode returned state update keys '
                 f'{sorted(updates)} but state_update_aggregation_modes has '
                 f'{sorted(modes)}')
  with subject.no_error(check, case, 'update_state'):
    new_state = stage.update_state(state, _aggregate_one(stage, updates))
  _expect_dict_of_tensors(subject, check, case, 'update_state', new_state)
  old = {k: v.dtype for k, v in state.items()}
  new = {k: v.dtype for k, v in new_state.items()}
  if old != new:
    subject.fail(check, case, f'update_state changed the state from {old} to '
                 f'{new}; the state must keep its keys and dtypes')


@_as_in_a_form
def check_round_trip(stage, shape=DEFAULT_SHAPES[0], dtype=tf.float32, *,
                     lossless=False, max_relative_error=None, atol=0.0, seed=0):
  """Eager encode then decode; returns the relative L2 error.

  Lossless stages must reproduce the input within `atol`; others within
  `max_relative_error` when given. Decoded values must be finite and keep the
  input's shape and dtype.
  """
  subject = _Subject(stage)
  check = 'round trip'
  case = _case(shape, dtype)
  x = make_input(shape, dtype, seed)
  with subject.no_error(check, case, 'encode and decode'):
    encode_params, decode_params = subject.params()
    encoded = subject.encode(x, encode_params)
    y = subject.decode(encoded, decode_params, x.shape)
  return _compare_round_trip(subject, check, case, x, y, lossless,
                             max_relative_error, atol)


@_as_in_a_form
def check_shape_and_dtype(stage, shape=DEFAULT_SHAPES[0], dtype=tf.float32, *,
                          seed=0):
  """Decode keeps the static shape and the dtype of a static-shaped input."""
  subject = _Subject(stage)
  check = 'shape and dtype'
  case = _case(shape, dtype)
  x = make_input(shape, dtype, seed)
  traced = []

  def round_trip(x):
    encode_params, decode_params = subject.params()
    encoded = subject.encode(x, encode_params)
    y = subject.decode(encoded, decode_params, x.shape)
    traced.append(y)
    return y

  with subject.no_error(check, case, 'encode and decode in one tf.function'):
    _call_in_fresh_trace(round_trip, x)
  _expect_same_static_signature(subject, check, case, x, traced[0],
                                'inside tf.function')
  with subject.no_error(check, case, 'encode and decode eagerly'):
    y = round_trip(x)
  _expect_same_static_signature(subject, check, case, x, y, 'eagerly')


@_as_in_a_form
def check_separate_traces(stage, shape=DEFAULT_SHAPES[0], dtype=tf.float32, *,
                          lossless=False, max_relative_error=None, atol=0.0,
                          seed=0):
  """Decode sees nothing but its arguments.

  Encode runs in one tf.function, decode in another that takes only the encoded
  tensors, decode params and (if the stage needs it) the shape; params and
  encoded values cross between them as numpy arrays. Decoding one encoded
  value must give the same result before and after other inputs (another
  shape, scale and dtype) were encoded, traced and eagerly: a stage that keeps
  anything from `encode` on `self` fails here. Returns the relative L2 error
  of the traced round trip.
  """
  subject = _Subject(stage)
  check = 'separate traces'
  case = _case(shape, dtype)
  rng = np.random.default_rng([seed, 1])
  x = _make_input(shape, dtype, rng)
  other_shape = (int(np.prod(shape, dtype=np.int64)) + 3,)
  other_dtype = tf.float64 if dtype != tf.float64 else tf.float32
  others = [_make_input(other_shape, dtype, rng, scale=7.0, offset=3.0),
            _make_input(shape, other_dtype, rng, scale=5.0, offset=-2.0)]
  with subject.no_error(check, case, 'get_params'):
    encode_params, decode_params = _to_numpy(subject.params())

  def encode_others(encode):
    encode(others[0])
    try:
      encode(others[1])
    except Exception:  # pylint: disable=broad-except
      pass  # The stage may reject that dtype; check_dtypes judges how.

  static = []
  with subject.no_error(check, case, 'encode and decode in separate '
                        'tf.functions'):
    encoded = _to_numpy(_traced_encode(subject, x, encode_params))
    before = _traced_decode(subject, encoded, decode_params, x.shape,
                            record=static).numpy()
    encode_others(lambda v: _traced_encode(subject, v, encode_params))
    after = _traced_decode(subject, encoded, decode_params, x.shape).numpy()
  _expect_same_static_signature(subject, check, case, x, static[0],
                                'in its own tf.function')
  _expect_identical(subject, check, case, before, after,
                    'traced decode of one encoded value changed after other '
                    'inputs were encoded (decode depends on state kept from '
                    'encode)')
  error = _compare_round_trip(subject, check, case, x, before, lossless,
                              max_relative_error, atol)

  with subject.no_error(check, case, 'eager encode and decode'):
    encoded = _to_numpy(subject.encode(x, encode_params))
    before = subject.decode(encoded, decode_params, x.shape).numpy()
    encode_others(lambda v: subject.encode(v, encode_params))
    after = subject.decode(encoded, decode_params, x.shape).numpy()
  _expect_identical(subject, check, case, before, after,
                    'eager decode of one encoded value changed after other '
                    'inputs were encoded (decode depends on state kept from '
                    'encode)')
  return error


@_as_in_a_form
def check_deterministic(stage, shape=DEFAULT_SHAPES[0], dtype=tf.float32, *,
                        seed=0):
  """Same input and params give bit-identical encodings, eagerly and traced."""
  subject = _Subject(stage)
  check = 'deterministic'
  case = _case(shape, dtype)
  x = make_input(shape, dtype, seed)
  with subject.no_error(check, case, 'encode'):
    encode_params, decode_params = _to_numpy(subject.params())
    runs = {
        'eager': [_to_numpy(subject.adaptive.encode(
            x, _as_arguments(encode_params))) for _ in range(2)],
        'traced': [_to_numpy(_traced_encode(subject, x, encode_params,
                                            with_updates=True))
                   for _ in range(2)],
    }
  for mode, (first, second) in runs.items():
    for part, a, b in (('encoded tensors', first[0], second[0]),
                       ('state updates', first[1], second[1])):
      for key in sorted(a):
        _expect_identical(
            subject, check, case, a[key], b[key],
            f'two {mode} encodes of the same input gave different {part} '
            f'under key {key!r} (a stateful random op?)')
  encoded = runs['eager'][0][0]
  with subject.no_error(check, case, 'decode'):
    decoded = [subject.decode(encoded, decode_params, x.shape).numpy()
               for _ in range(2)]
  _expect_identical(subject, check, case, decoded[0], decoded[1],
                    'two decodes of the same encoded value differ')


@_as_in_a_form
def check_commutes_with_sum(stage, shape=DEFAULT_SHAPES[0], dtype=tf.float32,
                            *, num_summands=3, rtol=None, seed=0):
  """`decode(sum_i encode(x_i), num_summands=n) == sum_i decode(encode(x_i))`.

  All inputs are encoded with the same params (for adaptive stages, from the
  same state); every encoded tensor is summed in its own dtype, as an
  aggregation would. The sum is decoded in its own tf.function with
  `num_summands` a tensor. Tolerance: `rtol` times the largest magnitude of
  the expected sum (default from the dtype's precision). Returns the largest
  difference.
  """
  subject = _Subject(stage)
  check = 'commutes_with_sum'
  case = _case(shape, dtype) + f', {num_summands} summands'
  rtol = _default_rtol(dtype) if rtol is None else rtol
  rng = np.random.default_rng([seed, 2])
  xs = [_make_input(shape, dtype, rng) for _ in range(num_summands)]
  with subject.no_error(check, case, 'encode and decode each input'):
    encode_params, decode_params = _to_numpy(subject.params())
    encoded = [_to_numpy(subject.encode(x, encode_params)) for x in xs]
    decoded = [subject.decode(e, decode_params, x.shape).numpy()
               for e, x in zip(encoded, xs)]
  signatures = [{k: (v.shape, v.dtype) for k, v in e.items()} for e in encoded]
  for signature in signatures[1:]:
    if signature != signatures[0]:
      subject.fail(check, case, 'encodings of different inputs have different '
                   'keys, shapes or dtypes, so they cannot be summed: '
                   f'{signatures[0]} vs {signature}')
  with subject.no_error(check, case, 'sum the encodings and decode the sum'):
    summed = {k: tf.add_n([tf.constant(e[k]) for e in encoded]).numpy()
              for k in encoded[0]}
    got = _traced_decode(subject, summed, decode_params, xs[0].shape,
                         num_summands=tf.constant(num_summands,
                                                  NUM_SUMMANDS_DTYPE)).numpy()
  expected = np.sum([_f64(d) for d in decoded], axis=0)
  if got.shape != expected.shape or got.dtype != decoded[0].dtype:
    subject.fail(check, case, f'decoding the sum gave {got.dtype} '
                 f'{got.shape}, expected {decoded[0].dtype} {expected.shape}')
  scale = max(_max_abs(expected), _max_abs(np.sum([_f64(x) for x in xs], 0)))
  _expect_close(subject, check, case, _f64(got), expected, rtol * scale,
                'decode(sum of encodings)', 'sum of decodings')
  return _max_abs(_f64(got) - expected)


@_as_in_a_form
def check_unbiased(stage, shape=UNBIASED_SHAPE, dtype=tf.float32, *,
                   num_trials=200, z_threshold=6.0, atol=None, seed=0):
  """The mean decoding error over many random trials is zero.

  Each trial decodes a fresh encoding of `x` (perturbed by a relative 1e-4, or
  a few ulps of a 16-bit dtype, so stages seeded by the data fingerprint draw
  new noise), with the params'
  `SEED_KEY` entry (if any, in encode and decode params alike) replaced by a
  fresh seed, and with an adaptive stage's state advanced by `update_state`.
  The per-trial errors `decode - x` are tested for zero mean with a z-test
  using their observed spread: per coordinate (spread at least the pooled
  spread, so rarely-moving coordinates do not cause false alarms) and along a
  few directions (all ones, x, sign(x), random signs) that catch small
  biases shared by many coordinates. A mean error within `atol` (default: a
  few ulps of the dtype times the RMS of x) is never a failure. Very sparse or
  heavy-tailed stages (keeping ~1 of 50 values) may need more `num_trials`.
  Returns the largest z scores.
  """
  subject = _Subject(stage)
  adaptive = subject.adaptive
  check = 'unbiased'
  dtype = tf.as_dtype(dtype)
  case = _case(shape, dtype) + f', {num_trials} trials'
  if num_trials < 10:
    raise ValueError('check_unbiased: num_trials must be >= 10, got '
                     f'{num_trials}')
  if not np.prod(shape, dtype=np.int64):
    raise ValueError(f'check_unbiased: shape must have elements, got {shape}')
  rng = np.random.default_rng([seed, 3])
  x = _f64(_make_input(shape, dtype, rng))
  n = x.size
  rms = float(np.sqrt(np.mean(x**2)))
  atol = 16 * _EPS[dtype] * rms if atol is None else atol
  relative_noise = max(1e-4, 4 * _EPS[dtype])

  with subject.no_error(check, case, 'initial_state and get_params'):
    state = adaptive.initial_state()
    encode_params, _ = adaptive.get_params(state)
  seed_value = encode_params.get(SEED_KEY) if isinstance(encode_params,
                                                         dict) else None
  if seed_value is not None:
    seed_value = np.asarray(seed_value)

  def trial(x, state, new_seed):
    encode_params, decode_params = adaptive.get_params(state)
    if new_seed is not None:
      encode_params = dict(encode_params, **{SEED_KEY: new_seed})
      if SEED_KEY in decode_params:
        decode_params = dict(decode_params, **{SEED_KEY: new_seed})
    encoded, updates = adaptive.encode(x, encode_params)
    y = adaptive.decode(encoded, decode_params, shape=_shape_arg(adaptive, x))
    return y, adaptive.update_state(state, _aggregate_one(adaptive, updates))

  run_trial = tf.function(trial)
  errors = np.empty((num_trials, x.size))
  with subject.no_error(check, case, 'a trial'):
    for k in range(num_trials):
      noisy = x * (1 + relative_noise * rng.standard_normal(x.shape))
      x_k = tf.cast(tf.constant(noisy), dtype)
      new_seed = (None if seed_value is None else
                  tf.constant(_random_like(seed_value, rng)))
      y, state = run_trial(x_k, state, new_seed)
      errors[k] = (_f64(y) - _f64(x_k)).reshape(-1)
  if not np.all(np.isfinite(errors)):
    subject.fail(check, case, 'decoded values are not finite')

  mean, spread = errors.mean(0), errors.std(0, ddof=1)
  pooled = float(np.sqrt(np.mean(spread**2)))
  per_coordinate = _z_scores(mean, np.maximum(spread, pooled), num_trials, atol)
  worst = int(np.argmax(per_coordinate))
  if per_coordinate[worst] > z_threshold:
    index = np.unravel_index(worst, x.shape)
    subject.fail(check, case, f'coordinate {tuple(int(i) for i in index)} '
                 f'(x={x.flat[worst]:.6g}) has mean error {mean[worst]:.4g} '
                 f'with per-trial std {spread[worst]:.4g} (pooled '
                 f'{pooled:.4g}): z={per_coordinate[worst]:.2f} > '
                 f'{z_threshold}')

  directions = _bias_directions(x, rng)
  projected = errors @ np.stack([d for _, d in directions]).T
  p_mean, p_spread = projected.mean(0), projected.std(0, ddof=1)
  along = _z_scores(p_mean, p_spread, num_trials, atol * np.sqrt(n))
  for (name, _), z, m, s in zip(directions, along, p_mean, p_spread):
    if z > z_threshold:
      subject.fail(check, case, f'the error along the {name} direction has '
                   f'mean {m:.4g} with per-trial std {s:.4g}: z={z:.2f} > '
                   f'{z_threshold} (a bias shared by many coordinates)')
  return {
      'max_z_per_coordinate': float(per_coordinate.max()),
      'max_z_along_directions': float(along.max()),
      'num_trials': num_trials,
  }


@_as_in_a_form
def check_dtypes(stage, shape=DEFAULT_SHAPES[0], *, dtypes=FLOAT_DTYPES,
                 lossless=False, max_relative_error=None, atol=0.0, seed=0):
  """Each dtype round-trips (keeping its dtype) or is rejected clearly.

  A clear rejection is a ValueError or TypeError (or an InvalidArgumentError
  from a runtime check) whose message names the stage; anything else is a
  failure. The error bound for a dtype is `max_relative_error` widened to a
  few ulps of that dtype. Returns dtype name -> relative error or
  'rejected: <message>'.
  """
  subject = _Subject(stage)
  check = 'dtypes'
  results = {}
  for dtype in dtypes:
    dtype = tf.as_dtype(dtype)
    case = _case(shape, dtype)
    x = make_input(shape, dtype, seed)

    def round_trip(x=x):
      encode_params, decode_params = subject.params()
      encoded = subject.encode(x, encode_params)
      return subject.decode(encoded, decode_params, x.shape)

    works, y = subject.works_or_clear_error(check, case, round_trip)
    if not works:
      results[dtype.name] = f'rejected: {y}'
      continue
    bound = (None if max_relative_error is None else
             max(max_relative_error, 8 * _EPS[dtype]))
    results[dtype.name] = _compare_round_trip(subject, check, case, x, y,
                                              lossless, bound, atol)
  return results


@_as_in_a_form
def check_scalar_empty_dynamic(stage, dtype=tf.float32, *,
                               dynamic_shapes=DEFAULT_SHAPES, lossless=False,
                               max_relative_error=None, atol=0.0, seed=0):
  """Scalars, empty tensors and unknown dims work or are rejected clearly.

  Scalar and empty inputs round-trip eagerly and in tf.functions (values
  checked only for lossless stages: a lossy stage may legitimately lose a
  single scalar). Each of `dynamic_shapes` is encoded in a tf.function whose
  input signature has every dim unknown, then decoded in another tf.function
  whose argument specs are the static shapes encode produced (and a shape
  tensor, if the stage needs it); the result must meet the round-trip bounds.
  Returns case -> relative error or 'rejected: <message>'.
  """
  subject = _Subject(stage)
  check = 'scalar/empty/dynamic'
  results = {}
  for shape in SCALAR_AND_EMPTY_SHAPES:
    case = _case(shape, dtype)
    x = make_input(shape, dtype, seed)

    def separate_traces(x=x):
      encode_params, decode_params = _to_numpy(subject.params())
      encoded = _to_numpy(_traced_encode(subject, x, encode_params))
      return _traced_decode(subject, encoded, decode_params, x.shape)

    def eager(x=x):
      encode_params, decode_params = subject.params()
      encoded = subject.encode(x, encode_params)
      return subject.decode(encoded, decode_params, x.shape)

    for mode, fn in (('eager', eager), ('traced', separate_traces)):
      works, y = subject.works_or_clear_error(check, f'{case} ({mode})', fn)
      key = f'{_shape_key(shape)} {mode}'
      if not works:
        results[key] = f'rejected: {y}'
        continue
      results[key] = _compare_round_trip(subject, check, f'{case} ({mode})', x,
                                         y, lossless, None, atol)
  for shape in dynamic_shapes:
    case = _case(shape, dtype) + ' with unknown dims'
    x = make_input(shape, dtype, seed)
    static = []
    works, y = subject.works_or_clear_error(
        check, case, lambda x=x: _dynamic_round_trip(subject, x, static))
    key = f'{_shape_key(shape)} dynamic'
    if not works:
      results[key] = f'rejected: {y}'
      continue
    if not static[0].shape.is_compatible_with([None] * len(shape)):
      subject.fail(check, case, f'decode returned static shape '
                   f'{static[0].shape}, incompatible with rank {len(shape)}')
    results[key] = _compare_round_trip(subject, check, case, x, y, lossless,
                                       max_relative_error, atol)
  return results
