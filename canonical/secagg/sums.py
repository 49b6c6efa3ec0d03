"""What a secure sum means, and how a runtime computes one.

The three secure-sum intrinsics (TFF's names) differ only in the modulus their
integers are added under and in what a client may send:

| intrinsic                       | parameter p | a client sends    | result        |
| federated_secure_sum_bitwidth   | bitwidth    | [0, 2**p - 1]     | the exact sum |
| federated_secure_sum            | max_input   | [0, p]            | the exact sum |
| federated_secure_modular_sum    | modulus     | any (taken mod p) | sum mod p     |

For the exact sums the modulus is chosen per round from the number of clients,
large enough that the modular sum is the sum. A value outside its range is a
failure at that client (`SecureSumError` names the client, the intrinsic and
the leaf). The runtime adds with the masking protocol of `canonical.secagg`
(`masked_sum`), or, as the reference executor's plain meaning, in the clear
(`plain_sum`); both return the same sums.
"""

import dataclasses
import math

import numpy as np
import tensorflow as tf
from tensorflow.python.util import nest

from canonical import errors
from canonical import secagg

BITWIDTH = 'federated_secure_sum_bitwidth'
MAX_INPUT = 'federated_secure_sum'
MODULAR = 'federated_secure_modular_sum'
KINDS = (BITWIDTH, MAX_INPUT, MODULAR)
PARAMETER_NAMES = {BITWIDTH: 'bitwidth', MAX_INPUT: 'max_input',
                   MODULAR: 'modulus'}

# Masks and sums travel as uint64; an exact sum must come back as an int64.
MAX_MODULUS = 2**63
# The smallest parameter each intrinsic accepts.
_MINIMUM = {BITWIDTH: 1, MAX_INPUT: 1, MODULAR: 2}


class SecureSumError(errors.Error, ValueError):
  """A secure sum cannot be computed: a parameter out of range, a client's
  value out of its range, or a sum that does not fit its dtype."""


@dataclasses.dataclass(frozen=True)
class SecureSum:
  """One secure sum of a form, as saved: which intrinsic, and its parameter
  (one int per leaf of the summed value) when fixed at compile time; None
  when the server state supplies it each round."""
  kind: str
  static_parameters: tuple = None

  def describe(self):
    name = PARAMETER_NAMES[self.kind]
    if self.static_parameters is None:
      return f'{self.kind}, {name} from the server state'
    values = sorted(set(self.static_parameters))
    shown = values[0] if len(values) == 1 else list(self.static_parameters)
    return f'{self.kind}, {name} {shown}'


def check_parameter(kind, parameter, where):
  """Raises `SecureSumError` unless `parameter` is in range for `kind`."""
  parameter = int(parameter)
  smallest = _MINIMUM[kind]
  largest = {BITWIDTH: 62, MAX_INPUT: MAX_MODULUS // 2,
             MODULAR: MAX_MODULUS}[kind]
  if not smallest <= parameter <= largest:
    raise SecureSumError(f'{where}: {PARAMETER_NAMES[kind]} {parameter} is '
                         f'out of range [{smallest}, {largest}].')
  return parameter


def modulus(kind, parameter, num_clients):
  """The modulus a round of `num_clients` adds this leaf under."""
  if kind == MODULAR:
    return parameter
  largest_input = 2**parameter - 1 if kind == BITWIDTH else parameter
  needed = largest_input * max(num_clients, 1) + 1  # Sums are in [0, needed).
  if kind == BITWIDTH:  # A power of two, as a bitwidth promises.
    needed = 2**max(parameter, math.ceil(math.log2(needed)))
  if needed > MAX_MODULUS:
    raise SecureSumError(
        f'{kind}: the sum of {num_clients} values up to {largest_input} '
        f'needs a modulus of {needed}, more than 2**63.')
  return needed


def client_input(kind, parameters, value, who):
  """A client's value as uint64 arrays in [0, modulus), leaf by leaf.

  `parameters` is one int per leaf. Raises `SecureSumError` (naming `who`,
  the intrinsic and the leaf) for a value outside its range.
  """
  flat = nest.flatten_with_joined_string_paths(value)
  leaves = []
  for (path, leaf), parameter in zip(flat, parameters):
    array = np.asarray(leaf)
    if kind == MODULAR:  # Projected into [0, modulus), negatives too.
      wide = np.uint64 if array.dtype == np.uint64 else np.int64
      leaves.append(np.mod(array.astype(wide), wide(parameter)).astype(
          np.uint64))
      continue
    largest = 2**parameter - 1 if kind == BITWIDTH else parameter
    bad = np.flatnonzero((array < 0) | (array > largest))
    if bad.size:
      index = tuple(int(i) for i in np.unravel_index(bad[0], array.shape))
      raise SecureSumError(
          f'{who}: values must be in [0, {largest}] '
          f'({PARAMETER_NAMES[kind]} {parameter}), leaf '
          f'{path or "<root>"} has {array.reshape(-1)[bad[0]]} at index '
          f'{index}.')
    leaves.append(array.astype(np.uint64))
  return tf.nest.pack_sequence_as(value, leaves)


def as_results(sums, totals, specs, names=None):
  """The uint64 sums in the specs' dtypes; an exact sum must fit them."""
  results = []
  for name, total, spec in zip(_names(sums, names), totals, specs):
    leaves = []
    for (path, array), leaf_spec in zip(
        nest.flatten_with_joined_string_paths(total), tf.nest.flatten(spec)):
      dtype = np.dtype(leaf_spec.dtype.as_numpy_dtype)
      if array.size and int(array.max()) > np.iinfo(dtype).max:
        raise SecureSumError(
            f'{name}: the sum of leaf {path or "<root>"} '
            f'reaches {int(array.max())}, more than its dtype {dtype.name} '
            'holds; sum a wider integer dtype.')
      leaves.append(array.astype(dtype))
    results.append(tf.nest.pack_sequence_as(spec, leaves))
  return tuple(results)


def _names(sums, names):
  return names or [f'secure sum {number} ({secure_sum.kind})'
                   for number, secure_sum in enumerate(sums)]


def round_moduli(sums, parameters, num_clients, specs, names=None):
  """The moduli of a round of `num_clients`: one structure like each
  secure sum's value (`specs`), an int per tensor."""
  moduli = []
  for name, secure_sum, flat, spec in zip(_names(sums, names), sums,
                                          parameters, specs):
    for parameter in flat:
      check_parameter(secure_sum.kind, parameter, name)
    moduli.append(tf.nest.pack_sequence_as(
        spec, [modulus(secure_sum.kind, int(p), num_clients) for p in flat]))
  return tuple(moduli)


def client_inputs(sums, parameters, value, who, names=None):
  """One client's secure part of U (one value per secure sum) as uint64
  structures in [0, modulus); `SecureSumError` names `who` for a value out
  of range."""
  return tuple(
      client_input(secure_sum.kind, [int(p) for p in flat], part,
                   f'{name}, {who}')
      for name, secure_sum, flat, part in zip(_names(sums, names), sums,
                                              parameters, value))


def round_config(specs, moduli, threshold, round_id, neighbors=None):
  """The `secagg.SecAggConfig` every party of a round derives alike."""
  wire_specs = tuple(tf.nest.map_structure(
      lambda s: tf.TensorSpec(s.shape, tf.uint64), spec) for spec in specs)
  return secagg.make_config(wire_specs, moduli, threshold, round_id,
                            neighbors)


def prepare_round(sums, parameters, values, specs, names=None):
  """(every client's inputs, the moduli) for one round of `sums`.

  `parameters` holds one int per tensor for each secure sum; `values` one
  tuple per client, with one value per secure sum. Raises `SecureSumError`
  naming the secure sum (by `names`, if given), the client and the leaf.
  """
  moduli = round_moduli(sums, parameters, len(values), specs, names)
  inputs = [client_inputs(sums, parameters, value, f'client {client}', names)
            for client, value in enumerate(values)]
  return inputs, moduli


def plain_sum(sums, parameters, values, specs, names=None):
  """The sums in the clear: the meaning `masked_sum` must reproduce."""
  inputs, moduli = prepare_round(sums, parameters, values, specs, names)
  totals = [[np.zeros(leaf.shape, np.uint64) for leaf in tf.nest.flatten(spec)]
            for spec in specs]
  flat_moduli = [tf.nest.flatten(m) for m in moduli]
  for value in inputs:
    for total, part, leaf_moduli in zip(totals, value, flat_moduli):
      for k, (leaf, m) in enumerate(zip(tf.nest.flatten(part), leaf_moduli)):
        total[k] = np.asarray(
            (total[k].astype(object) + leaf.astype(object)) % m, np.uint64)
  totals = [tf.nest.pack_sequence_as(spec, total)
            for spec, total in zip(specs, totals)]
  return as_results(sums, totals, specs, names)


def flat_parameters(parameters):
  """`secure_parameters`' result as Python ints: one list per secure sum."""
  return [[int(p) for p in tf.nest.flatten(entry)] for entry in parameters]


default_threshold = secagg.graph.majority_threshold


def masked_sum(sums, parameters, values, specs, threshold=None, round_id=0,
               seed=None, neighbors=None):
  """The sums through one round of `canonical.secagg`: every client masks
  its inputs, the aggregation adds masked inputs only, and the survivors'
  shares unmask the sums.

  Returns `(one sum per secure sum in its spec's dtypes,
  secagg.SecureSumResult)`.
  """
  if not values:
    raise SecureSumError('a secure sum needs at least one client.')
  inputs, moduli = prepare_round(sums, parameters, values, specs)
  neighbors = secagg.graph.resolve(neighbors, len(values))
  if threshold is None:
    threshold = default_threshold(len(values), neighbors)
  result = secagg.secure_sum_round(dict(enumerate(inputs)), moduli,
                                   threshold, round_id=round_id, seed=seed,
                                   neighbors=neighbors)
  return as_results(sums, result.sum, specs), result
