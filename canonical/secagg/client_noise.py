"""Distributed DP's noise, drawn by the runtime's secure-sum client from a
secret only that client holds, just before it masks its input.

The form's pieces are pure and public: noise they drew would be a function
of the form's seeds and the client's value, which a server holding the form
could recompute and subtract. So a noised secure sum
(`federated_secure_modular_sum_with_client_noise`) hands its client the
mechanism and the round's local stddev, and the client adds
  - 'distributed_skellam': Skellam draws Poisson(s**2/2) - Poisson(s**2/2),
  - 'distributed_dgauss': discrete Gaussian draws of scale ceil(s)
    (integer scales, as TFF's sampler takes),
seeded by 16 bytes of its own secret randomness (the Beam client's stored
secret and the round id; the OS elsewhere). Taken modulo the sum's modulus,
this equals TFF's noise added before its modular clipping.
"""

import numpy as np
import tensorflow as tf

from canonical.core import secure_sum_rules
from canonical.privacy import discrete_gaussian

MECHANISMS = secure_sum_rules.NOISE_MECHANISMS
SecureSumError = secure_sum_rules.SecureSumError


def _skellam(shape, stddev, seed):
  lam = 0.5 * tf.square(tf.cast(stddev, tf.float64))
  pair = tf.random.stateless_poisson(tf.concat([shape, [2]], 0), seed,
                                     tf.stack([lam, lam]), dtype=tf.int64)
  return pair[..., 0] - pair[..., 1]


def _dgauss(shape, stddev, seed):
  return discrete_gaussian.sample_discrete_gaussian(
      tf.math.ceil(tf.cast(stddev, tf.float64)), shape, seed, dtype=tf.int64)


# Traced once per mechanism: shapes, stddevs and seeds are tensors.
_SAMPLERS = {'distributed_skellam': tf.function(_skellam),
             'distributed_dgauss': tf.function(_dgauss)}


def check_stddev(local_stddev, where):
  """The stddev as a float; `SecureSumError` naming `where` unless it is
  finite and >= 0."""
  stddev = float(local_stddev)
  if not 0 <= stddev < float('inf'):
    raise SecureSumError(f'{where} must be finite and >= 0, got {stddev}')
  return stddev


def draw(mechanism, local_stddev, shape, rng):
  """int64 noise of `shape` for one leaf, from the secret source `rng`
  (`secagg.randomness`); zeros at stddev 0."""
  if mechanism not in _SAMPLERS:
    raise SecureSumError(f'unknown noise mechanism {mechanism!r}; expected '
                         f'one of {list(_SAMPLERS)}')
  check_stddev(local_stddev, 'the local noise stddev')
  seed = np.frombuffer(rng.random_bytes(16), np.int64)
  noise = _SAMPLERS[mechanism](tf.constant(shape, tf.int64),
                               tf.constant(local_stddev, tf.float64),
                               tf.constant(seed, tf.int64))
  return noise.numpy()


def noised(mechanism, local_stddev, leaves, rng):
  """`leaves` (a client's integer arrays) plus its own noise, as int64; each
  leaf's draws from an independent child of `rng`."""
  return [np.asarray(leaf).astype(np.int64) +
          draw(mechanism, local_stddev, np.shape(leaf), rng.child('leaf', k))
          for k, leaf in enumerate(leaves)]

