"""TensorFlow Federated's rotation factories: each client rotates every tensor
of its value by a random orthogonal map before an inner aggregation, and the
server rotates the aggregate back. A rotation spreads a tensor's mass over
its coordinates, so a quantizer or a modular sum inside sees a small,
predictable range; being linear and shared by every client, it commutes
with the sum.

| factory                           | per tensor, flattened to float32    |
| HadamardTransformFactory          | zero-padded to a power of two;      |
|                                   | random signs, then the normalized   |
|                                   | Walsh-Hadamard transform            |
| DiscreteFourierTransformFactory   | zero-padded to an even size; halves |
|                                   | as the real and imaginary parts of  |
|                                   | complex values, random phases, then |
|                                   | the unitary DFT                     |

`num_repeats` repeats the random step and the transform with fresh
randomness. The inner factory (`SumFactory` by default) aggregates float32
vectors; the server inverts the steps, drops the padding, restores shapes
and (integers, rounded) dtypes.

The randomness is TFF's, in pure pieces: stateless draws seeded by a
`[2]` int64 seed kept in the state, `(inner state, seed)`. Tensor i of a
round draws from `seed + (0, i * num_repeats)`, its repeats adding 1 to
both words, and each round advances the seed's second word by
`num_repeats * number of tensors`. With the same seed in the state, the
results are TFF 0.87's draw for draw. TFF starts the seed from a timestamp
at each `initialize`; here its first word is a secret drawn at `create()`
(or the `seed` given), so a compiled form and its saved copy hold it and
rounds replay. The measurements are `OrderedDict(hd=...)` / `(dft=...)`
around the inner process's. The Walsh-Hadamard transform is the encoders'
(`encoders.stages.rotation.hadamard_rows`).
"""

import collections
import math
import secrets

import numpy as np
import tensorflow as tf

from canonical.aggregators import factory
from canonical.aggregators import sum_factory
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import specs
from canonical.core import types as ft
from canonical import errors
from canonical.templates import aggregation_process
from canonical.templates import measured
from encoders.core import seeds
from encoders.stages import rotation

SEED_SPEC = tf.TensorSpec([2], tf.int64)
ROTATED_DTYPE = tf.float32


def padded_power_of_two(size):
  """TFF's padded length, 2 ** ceil(log(size) / log(2)) in float32 (one
  power of two too many at 8192 and 2**26 - 1 or 2**26, as TFF's), or the
  next power of two where float32 rounds below `size` (from 2**21 + 1 on,
  where TFF's fails)."""
  log2 = np.log(np.float32(size)) / np.float32(math.log(2.0))
  padded = int(np.float32(2.0) ** np.ceil(log2))
  return padded if padded >= size else 1 << (size - 1).bit_length()


def _rademacher(shape, seed):
  """+1 or -1 per element, as TFF draws them."""
  uniform = tf.random.stateless_uniform(shape, seed=seed,
                                        alg=seeds.ALGORITHM)
  return tf.sign(uniform - 0.5)


def _phases(shape, seed, inverse):
  """exp(i theta), theta uniform in [0, 2 pi) as TFF draws it; conjugated
  when `inverse`."""
  theta = tf.random.stateless_uniform(shape, seed=seed, minval=0, maxval=2,
                                      alg=seeds.ALGORITHM) * math.pi
  if inverse:
    theta = -theta
  return tf.exp(tf.complex(tf.zeros_like(theta), theta))


def _tensor_seeds(seed, count, stride):
  """One seed per tensor: the seed's second word advanced by `stride`."""
  return [tf.stack([seed[0], seed[1] + i * stride]) for i in range(count)]


def _flat_padded(x, size):
  flat = tf.reshape(tf.cast(x, ROTATED_DTYPE), [-1])
  return tf.pad(flat, [[0, size - flat.shape[0]]])


def _restored(x, spec):
  x = tf.reshape(x[:spec.shape.num_elements()], spec.shape)
  if spec.dtype.is_integer:
    x = tf.round(x)
  return tf.cast(x, spec.dtype)


def _hadamard(x):
  return rotation.hadamard_rows(x[None])[0]


class _Hadamard:
  """Random signs, then the Walsh-Hadamard transform."""
  name = 'hd'

  @staticmethod
  def padded_size(size):
    return padded_power_of_two(size)

  @staticmethod
  def forward(x, seed):
    return _hadamard(x * _rademacher(tf.shape(x), seed))

  @staticmethod
  def inverse(x, seed):
    return _hadamard(x) * _rademacher(tf.shape(x), seed)


class _Fourier:
  """Random phases, then the unitary DFT of the halves as complex values."""
  name = 'dft'

  @staticmethod
  def padded_size(size):
    return size + size % 2

  @staticmethod
  def forward(x, seed):
    halves = tf.reshape(x, [2, -1])
    z = tf.complex(halves[0], halves[1])
    z = tf.signal.fft(z * _phases(tf.shape(z), seed, inverse=False))
    x = tf.concat([tf.math.real(z), tf.math.imag(z)], 0)
    return x / tf.cast(tf.sqrt(tf.size(x) / 2), ROTATED_DTYPE)

  @staticmethod
  def inverse(x, seed):
    x = x * tf.sqrt(tf.size(x, out_type=x.dtype) / 2.0)
    halves = tf.reshape(x, [2, -1])
    z = tf.signal.ifft(tf.complex(halves[0], halves[1]))
    z = z * _phases(tf.shape(z), seed, inverse=True)
    return tf.concat([tf.math.real(z), tf.math.imag(z)], 0)


def _check_value_type(value_type, where):
  value_type = factory.value_type_of(value_type, where)
  dtypes = [s.dtype for s in tf.nest.flatten(value_type)]
  if not (all(d.is_floating for d in dtypes) or
          all(d.is_integer for d in dtypes)):
    raise errors.InvalidTypeError(
        f'{where}: the tensors of value_type must be all floats or all '
        f'integers, got {ft.describe(value_type)}.')
  return value_type


class _RotationFactory(factory.UnweightedAggregationFactory):
  """Rotates each tensor by `_transform` around an inner factory."""

  _transform = None

  def __init__(self, inner_agg_factory=None, num_repeats=1, seed=None):
    where = type(self).__name__
    if inner_agg_factory is None:
      inner_agg_factory = sum_factory.SumFactory()
    self._inner = factory.check_factory(
        inner_agg_factory, (factory.UnweightedAggregationFactory,), where,
        'inner_agg_factory')
    if isinstance(num_repeats, bool) or not isinstance(
        num_repeats, int) or num_repeats < 1:
      raise errors.InvalidValueError(
          f'{where}: num_repeats must be a positive int, got '
          f'{num_repeats!r}.')
    if seed is not None and (isinstance(seed, bool) or
                             not isinstance(seed, int)):
      raise errors.InvalidTypeError(
          f'{where}: seed must be an int or None, got {seed!r}.')
    self._num_repeats = num_repeats
    self._seed = seed

  def create(self, value_type):
    where = f'{type(self).__name__}.create'
    value_type = _check_value_type(value_type, where)
    transform, repeats = self._transform, self._num_repeats
    specs_flat = tf.nest.flatten(value_type)
    sizes = [transform.padded_size(s.shape.num_elements())
             for s in specs_flat]

    def rotate(value, seed):
      flat = [_flat_padded(x, size)
              for x, size in zip(tf.nest.flatten(value), sizes)]
      rotated = []
      for x, tensor_seed in zip(flat, _tensor_seeds(seed, len(flat),
                                                    repeats)):
        for _ in range(repeats):
          x = transform.forward(x, tensor_seed)
          tensor_seed = tensor_seed + 1
        rotated.append(x)
      return tf.nest.pack_sequence_as(value_type, rotated)

    client_rotate = specs.tf_computation(rotate, value_type, SEED_SPEC)
    rotated_type = specs.plain(client_rotate.result_spec)

    def rotate_back(value, seed):
      flat = tf.nest.flatten(value)
      restored = []
      for x, tensor_seed, spec in zip(
          flat, _tensor_seeds(seed, len(flat), repeats), specs_flat):
        tensor_seed = tensor_seed + (repeats - 1)
        for _ in range(repeats):
          x = transform.inverse(x, tensor_seed)
          tensor_seed = tensor_seed - 1
        restored.append(_restored(x, spec))
      return tf.nest.pack_sequence_as(value_type, restored)

    server_rotate_back = specs.tf_computation(rotate_back, rotated_type,
                                              SEED_SPEC)
    stride = repeats * len(specs_flat)
    next_seed = specs.tf_computation(
        lambda seed: tf.stack([seed[0], seed[1] + stride]), SEED_SPEC)
    first_word = secrets.randbits(62) if self._seed is None else self._seed
    initial_seed = specs.tf_computation(
        lambda: tf.constant([first_word, 0], tf.int64))
    inner = self._inner.create(rotated_type)

    @computations.federated_computation()
    def init_fn():
      return intrinsics.federated_zip(
          (inner.initialize(),
           intrinsics.federated_eval(initial_seed, ft.SERVER)))

    @computations.federated_computation(init_fn.type_signature.result,
                                        ft.clients(value_type))
    def next_fn(state, value):
      inner_state, seed = state
      rotated = intrinsics.federated_map(
          client_rotate, (value, intrinsics.federated_broadcast(seed)))
      output = inner.next(inner_state, rotated)
      result = intrinsics.federated_map(server_rotate_back,
                                        (output.result, seed))
      new_state = intrinsics.federated_zip(
          (output.state, intrinsics.federated_map(next_seed, seed)))
      measurements = intrinsics.federated_zip(collections.OrderedDict(
          [(transform.name, output.measurements)]))
      return measured.MeasuredProcessOutput(new_state, result, measurements)

    return aggregation_process.AggregationProcess(init_fn, next_fn)


class HadamardTransformFactory(_RotationFactory):
  """TFF's `HadamardTransformFactory(inner_agg_factory=None,
  num_repeats=1)`: each tensor padded to a power of two, random signs and
  the fast Walsh-Hadamard transform, `num_repeats` times. `seed` (ours):
  the rotation seed's first word (default: drawn at each `create()`)."""
  _transform = _Hadamard


class DiscreteFourierTransformFactory(_RotationFactory):
  """TFF's `DiscreteFourierTransformFactory(inner_agg_factory=None,
  num_repeats=1)`: each tensor padded to an even size, packed as complex
  values, random phases and the FFT, `num_repeats` times. `seed` (ours):
  the rotation seed's first word (default: drawn at each `create()`)."""
  _transform = _Fourier
