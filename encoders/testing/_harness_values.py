"""The harness's data and how decoded values are judged against it.

Inputs drawn from numpy, the numerics of the unbiasedness test, and the
comparisons that fail a `_Subject` with the first mismatch: plain numpy work,
apart from the checks in `harness` that decide what to compare.
"""

import numpy as np
import tensorflow as tf

# Machine epsilon of each float dtype the harness feeds stages.
_EPS = {tf.float16: 2.0**-10, tf.bfloat16: 2.0**-7, tf.float32: 2.0**-23,
        tf.float64: 2.0**-52}


def _make_input(shape, dtype, rng, scale=1.5, offset=0.25):
  dtype = tf.as_dtype(dtype)
  if dtype not in _EPS:
    raise ValueError(f'encoders.testing: inputs must be one of '
                     f'{[d.name for d in _EPS]}, got {dtype.name}')
  values = rng.standard_normal(tuple(shape)) * scale + offset
  return tf.cast(tf.constant(values, tf.float64), dtype)


def _random_like(value, rng):
  """Fresh random integers (or floats) of `value`'s shape and dtype."""
  if np.issubdtype(value.dtype, np.integer):
    high = min(np.iinfo(value.dtype).max, 2**31 - 1)
    return rng.integers(0, high, size=value.shape).astype(value.dtype)
  return rng.random(value.shape).astype(value.dtype)


def _bias_directions(x, rng):
  """Unit directions along which a shared bias shows; zero ones are dropped."""
  flat = x.reshape(-1)
  candidates = [('all-ones', np.ones_like(flat)), ('x', flat),
                ('sign(x)', np.sign(flat))]
  candidates += [(f'random-signs-{i}', rng.choice([-1.0, 1.0], flat.size))
                 for i in range(4)]
  return [(name, d / np.linalg.norm(d)) for name, d in candidates
          if np.linalg.norm(d) > 0]


def _z_scores(mean, spread, num_trials, atol):
  """|mean| in standard errors; zero where |mean| <= atol, inf if no spread."""
  stderr = spread / np.sqrt(num_trials)
  with np.errstate(divide='ignore', invalid='ignore'):
    z = np.where(stderr > 0, np.abs(mean) / stderr, np.inf)
  return np.where(np.abs(mean) <= atol, 0.0, z)


def _compare_round_trip(subject, check, case, x, y, lossless,
                        max_relative_error, atol):
  """Checks a decoded value against its input; returns the relative L2 error."""
  _expect_same_static_signature(subject, check, case, x, y, 'decoded value')
  x64, y64 = _f64(x), _f64(y)
  if y64.shape != x64.shape:
    subject.fail(check, case, f'decoded shape {y64.shape} != input shape '
                 f'{x64.shape}')
  bad = ~np.isfinite(y64)
  if bad.any():
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    subject.fail(check, case, f'decoded value is not finite at {index}: '
                 f'{y64[index]} (input {x64[index]})')
  norm = np.linalg.norm(x64)
  error = np.linalg.norm(y64 - x64)
  relative = float(error / norm) if norm > 0 else float(error)
  if lossless:
    _expect_close(subject, check, case, y64, x64, atol, 'decoded', 'input',
                  claim='claimed lossless but ')
  if max_relative_error is not None and relative > max_relative_error:
    subject.fail(check, case, f'relative L2 error {relative:.4g} exceeds '
                 f'max_relative_error {max_relative_error:.4g}')
  return relative


def _expect_same_static_signature(subject, check, case, x, y, where):
  if not tf.is_tensor(y) and not isinstance(y, np.ndarray):
    subject.fail(check, case, f'{where}: decode returned '
                 f'{type(y).__name__}, not a tensor')
  y_dtype = tf.as_dtype(y.dtype)
  if y_dtype != x.dtype:
    subject.fail(check, case, f'{where}: decode returned dtype {y_dtype.name} '
                 f'for a {x.dtype.name} input')
  y_shape = tf.TensorShape(y.shape)
  if y_shape != x.shape:
    subject.fail(check, case, f'{where}: decode returned static shape '
                 f'{y_shape} for an input of shape {x.shape}')


def _expect_dict_of_tensors(subject, check, case, what, value):
  if not isinstance(value, dict):
    subject.fail(check, case, f'{what} must return a dict, got '
                 f'{type(value).__name__}')
  for key, v in value.items():
    if not isinstance(key, str) or not tf.is_tensor(v):
      subject.fail(check, case, f'{what} must return a dict of str -> tensor; '
                   f'key {key!r} holds {type(v).__name__}')


def _expect_identical(subject, check, case, a, b, what):
  """Bitwise equality: same dtype, shape and bytes."""
  a, b = np.asarray(a), np.asarray(b)
  if a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes():
    return
  if a.dtype != b.dtype or a.shape != b.shape:
    subject.fail(check, case,
                 f'{what}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}')
  if a.dtype.kind in 'biu':
    differ = np.argwhere(a != b)
  else:
    a64, b64 = _f64(a), _f64(b)
    differ = np.argwhere(~((a64 == b64) | (np.isnan(a64) & np.isnan(b64))))
  if not differ.size:
    subject.fail(check, case, f'{what}: equal values with different bits '
                 '(signed zeros or NaN payloads)')
  index = tuple(int(i) for i in differ[0])
  subject.fail(check, case, f'{what}: first difference at {index}: '
               f'{_show(a[index])} vs {_show(b[index])}')


def _expect_close(subject, check, case, got, expected, tolerance, got_name,
                  expected_name, claim=''):
  diff = np.abs(got - expected)
  over = diff > tolerance
  if over.any():
    index = tuple(int(i) for i in np.argwhere(over)[0])
    subject.fail(check, case, f'{claim}{got_name} and {expected_name} differ '
                 f'by up to {diff.max():.4g} (tolerance {tolerance:.4g}); '
                 f'first at {index}: {_show(got[index])} vs '
                 f'{_show(expected[index])}')


def _show(value):
  value = np.asarray(value)
  return str(int(value)) if value.dtype.kind in 'biu' else f'{float(value):.9g}'


def _f64(value):
  return np.asarray(value).astype(np.float64)


def _max_abs(a):
  return float(np.max(np.abs(a))) if np.size(a) else 0.0


def _default_rtol(dtype):
  return max(1e-5, 16 * _EPS[tf.as_dtype(dtype)])


def _case(shape, dtype):
  return f'{tf.as_dtype(dtype).name} input of shape {tuple(shape)}'


def _shape_key(shape):
  return 'x'.join(str(d) for d in shape) if shape else 'scalar'
