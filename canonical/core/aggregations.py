"""Every aggregation intrinsic as (client part, zero, accumulate, merge, report).

The client part is what a client puts in U; the rest run in the aggregation
tier. Built-ins reduce to these four functions like `federated_aggregate`.
"""

import dataclasses

import tensorflow as tf


@dataclasses.dataclass
class Aggregation:
  """How one aggregation op runs in the canonical form."""
  client_part: object     # the op's input values at a client -> its part of U
  zero: object            # () -> accumulator
  accumulate: object      # (accumulator, U part) -> accumulator
  merge: object           # (accumulator, accumulator) -> accumulator
  report: object          # accumulator -> result
  accumulator_spec: object


def _map2(fn, a, b):
  # A tuple and a list (or namedtuple) of the same layout are the same value.
  return tf.nest.map_structure(fn, a, b, check_types=False)


def _extreme(spec, largest):
  dtype = spec.dtype
  if dtype.is_floating:
    value = float('inf') if largest else float('-inf')
  else:
    value = dtype.max if largest else dtype.min
  return tf.fill(spec.shape, tf.constant(value, dtype))


def _identity(x):
  return x


def _first(args):
  return args[0]


def of(op, value_spec):
  """The `Aggregation` of aggregation op `op` on values of `value_spec`."""
  kind = op.kind
  if kind == 'federated_aggregate':
    a = op.attrs
    return Aggregation(
        _first, a['zero'].invoke, a['accumulate'].invoke, a['merge'].invoke,
        a['report'].invoke, a['accumulator_spec'])
  zeros = lambda: tf.nest.map_structure(  # pylint: disable=g-long-lambda
      lambda s: tf.zeros(s.shape, s.dtype), value_spec)
  add = lambda x, y: _map2(tf.add, x, y)
  if kind == 'federated_sum':
    return Aggregation(_first, zeros, add, add, _identity, value_spec)
  if kind in ('federated_min', 'federated_max'):
    is_min = kind == 'federated_min'
    reduce = tf.minimum if is_min else tf.maximum
    return Aggregation(  # The zero of a minimum is the largest value.
        _first,
        lambda: tf.nest.map_structure(lambda s: _extreme(s, is_min),
                                      value_spec),
        lambda x, y: _map2(reduce, x, y), lambda x, y: _map2(reduce, x, y),
        _identity, value_spec)
  if kind == 'federated_mean':
    client_part = _first
    total_dtype = tf.float32  # A count of clients: exact up to 2**24.
    weighted = lambda u: (u, tf.constant(1.0))
  elif kind == 'federated_weighted_mean':
    client_part = tuple
    total_dtype = weight_total_dtype(op.inputs[1].member.dtype)
    # Each weight is cast to each value tensor's own dtype.
    weighted = lambda u: (tf.nest.map_structure(
        lambda v: v * tf.cast(u[1], v.dtype), u[0]), tf.cast(u[1], total_dtype))
  else:
    raise ValueError(f'{op.describe()} is not an aggregation.')

  def accumulate(acc, u):
    total, weight = weighted(u)
    return add(acc[0], total), acc[1] + weight

  def report(acc):
    return tf.nest.map_structure(lambda t: t / tf.cast(acc[1], t.dtype),
                                 acc[0])

  return Aggregation(client_part,
                     lambda: (zeros(), tf.zeros([], total_dtype)),
                     accumulate, lambda x, y: (add(x[0], y[0]), x[1] + y[1]),
                     report, (value_spec, tf.TensorSpec([], total_dtype)))


def weight_total_dtype(weight_dtype):
  """The dtype the total weight is summed in: the weight's own float dtype,
  int64 for integer weights (exact; an int32 total could overflow)."""
  return weight_dtype if weight_dtype.is_floating else tf.int64


def secure_parameters(op, given):
  """A secure sum op's parameters, one int64 scalar per tensor of its value:
  constants fixed at compile time, or `given` (the SERVER value it was
  handed: one scalar per tensor, or one for all)."""
  value = op.inputs[0].member
  if 'parameters' in op.attrs:
    flat = [tf.constant(p, tf.int64) for p in op.attrs['parameters']]
  else:
    flat = [tf.cast(p, tf.int64) for p in tf.nest.flatten(given)]
    if not op.attrs['per_leaf']:
      flat *= len(tf.nest.flatten(value))
  return tf.nest.pack_sequence_as(value, flat)
