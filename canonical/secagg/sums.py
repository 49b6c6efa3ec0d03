"""What a secure sum means, and how a runtime computes one.

Each intrinsic's rule (its parameter's range, the modulus of a round, what a
client may send) is in `rules`. A value outside its range is a failure at
that client (`SecureSumError` names the client, the intrinsic and the leaf).
The runtime adds with the masking protocol of `canonical.secagg`
(`masked_sum`), or, as the reference executor's plain meaning, in the clear
(`plain_sum`); both return the same sums. A noised modular sum (distributed
DP) has each client add its own noise, drawn from its own secret
(`client_noise`), before it masks: such sums agree in distribution only.
"""

import dataclasses

import numpy as np
import tensorflow as tf
from tensorflow.python.util import nest

from canonical import secagg
from canonical.core import secure_sum_rules as rules
from canonical.secagg import client_noise
from canonical.secagg import randomness

BITWIDTH = rules.BITWIDTH
MAX_INPUT = rules.MAX_INPUT
MODULAR = rules.MODULAR
KINDS = rules.KINDS
PARAMETER_NAMES = {kind: rule.parameter_name
                   for kind, rule in rules.RULES.items()}
MAX_MODULUS = rules.MAX_MODULUS


SecureSumError = rules.SecureSumError


@dataclasses.dataclass(frozen=True)
class SecureSum:
  """One secure sum of a form, as saved: which intrinsic, and its parameter
  (one int per leaf of the summed value) when fixed at compile time; None
  when the server state supplies it each round. `noise`: the distributed DP
  mechanism each client's own noise is drawn from (`client_noise`), its
  stddev given by the server state each round; None for a plain sum."""
  kind: str
  static_parameters: tuple = None
  noise: str = None

  def describe(self):
    text = rules.RULES[self.kind].describe(self.static_parameters)
    return text + (rules.describe_noise(self.noise) if self.noise else '')


def check_parameter(kind, parameter, where):
  """Raises `SecureSumError` unless `parameter` is in range for `kind`."""
  return rules.RULES[kind].check_parameter(parameter, where)


def modulus(kind, parameter, num_clients):
  """The modulus a round of `num_clients` adds this leaf under."""
  return rules.RULES[kind].modulus(parameter, num_clients)


def client_input(kind, parameters, value, who, noise=None):
  """A client's value as uint64 arrays in [0, modulus), leaf by leaf.

  `parameters` is one int per leaf; `noise`, for a noised sum, is
  `(mechanism, local stddev, the client's secret source)`. Raises
  `SecureSumError` (naming `who`, the intrinsic and the leaf) for a value
  outside its range.
  """
  rule = rules.RULES[kind]
  paths, leaves = zip(*nest.flatten_with_joined_string_paths(value))
  if noise is not None:
    leaves = client_noise.noised(*noise[:2], leaves, noise[2])
  encoded = []
  for path, leaf, parameter in zip(paths, leaves, parameters):
    try:
      encoded.append(rule.encode(np.asarray(leaf), parameter,
                                 f'leaf {path or "<root>"}'))
    except SecureSumError as e:
      raise SecureSumError(f'{who}: {e}') from None
  return tf.nest.pack_sequence_as(value, encoded)


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


def client_inputs(sums, parameters, value, who, names=None, stddevs=None,
                  secret=None):
  """One client's secure part of U (one value per secure sum) as uint64
  structures in [0, modulus); `SecureSumError` names `who` for a value out
  of range. Noised sums add the client's own noise of their round's
  `stddevs`, drawn from `secret` (its secret source, `secagg.randomness`)."""
  inputs = []
  for number, (name, secure_sum, flat, part) in enumerate(
      zip(_names(sums, names), sums, parameters, value)):
    noise = None
    if secure_sum.noise:
      noise = (secure_sum.noise, stddevs[number],
               secret.child('secure sum', number))
    inputs.append(client_input(secure_sum.kind, [int(p) for p in flat],
                               part, f'{name}, {who}', noise))
  return tuple(inputs)


def round_config(specs, moduli, threshold, round_id, neighbors=None):
  """The `secagg.SecAggConfig` every party of a round derives alike."""
  wire_specs = tuple(tf.nest.map_structure(
      lambda s: tf.TensorSpec(s.shape, tf.uint64), spec) for spec in specs)
  return secagg.make_config(wire_specs, moduli, threshold, round_id,
                            neighbors)


def prepare_round(sums, parameters, values, specs, names=None, stddevs=None,
                  seed=None):
  """(every client's inputs, the moduli) for one round of `sums`.

  `parameters` holds one int per tensor for each secure sum; `values` one
  tuple per client, with one value per secure sum; `stddevs` the noised
  sums' local stddevs. Each client's noise comes from the OS, or from
  `seed` (tests). Raises `SecureSumError` naming the secure sum (by
  `names`, if given), the client and the leaf.
  """
  moduli = round_moduli(sums, parameters, len(values), specs, names)
  noise_source = randomness.source(seed).child('client noise')
  inputs = [client_inputs(sums, parameters, value, f'client {client}', names,
                          stddevs, noise_source.child(client))
            for client, value in enumerate(values)]
  return inputs, moduli


def plain_sum(sums, parameters, values, specs, names=None, stddevs=None,
              seed=None):
  """The sums in the clear: the meaning `masked_sum` must reproduce (in
  distribution, for noised sums)."""
  inputs, moduli = prepare_round(sums, parameters, values, specs, names,
                                 stddevs, seed)
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
  """`secure_parameters`' result as Python ints, one list per secure sum,
  for forms whose sums add no client noise (the name code before noised
  sums calls; `round_parameters` reads both)."""
  flat = []
  for entry in parameters:
    leaves = tf.nest.flatten(entry)
    if any(np.asarray(p).dtype.kind == 'f' for p in leaves):
      raise SecureSumError('a noised secure sum\'s parameters hold its '
                           'local stddev: read them with round_parameters.')
    flat.append([int(p) for p in leaves])
  return flat


def round_parameters(sums, parameters):
  """`secure_parameters`' result as Python numbers: `(one list of ints per
  secure sum, one local stddev per secure sum: None for a plain sum)`. A
  noised sum's entry is the pair (its parameters, its stddev)."""
  flat, stddevs = [], []
  for number, (secure_sum, entry) in enumerate(zip(sums, parameters)):
    stddev = None
    if secure_sum.noise:
      entry, stddev = entry
      stddev = client_noise.check_stddev(
          stddev, f'secure sum {number} ({secure_sum.kind}): the server '
          'state\'s local noise stddev')
    flat.append([int(p) for p in tf.nest.flatten(entry)])
    stddevs.append(stddev)
  return flat, stddevs


default_threshold = secagg.graph.majority_threshold


def masked_sum(sums, parameters, values, specs, threshold=None, round_id=0,
               seed=None, neighbors=None, malicious_server=True,
               stddevs=None):
  """The sums through one round of `canonical.secagg`: every client masks
  its inputs (noised sums: plus its own noise of `stddevs`), the
  aggregation adds masked inputs only, and the survivors' shares unmask the
  sums. As on the Beam runner, the clients hold against a malicious server
  by default (signed keys, the consistency check). `seed` fixes every
  secret (tests).

  Returns `(one sum per secure sum in its spec's dtypes,
  secagg.SecureSumResult)`.
  """
  if not values:
    raise SecureSumError('a secure sum needs at least one client.')
  inputs, moduli = prepare_round(sums, parameters, values, specs,
                                 stddevs=stddevs, seed=seed)
  neighbors = secagg.graph.resolve(neighbors, len(values))
  if threshold is None:
    threshold = default_threshold(len(values), neighbors)
  result = secagg.secure_sum_round(dict(enumerate(inputs)), moduli,
                                   threshold, round_id=round_id, seed=seed,
                                   neighbors=neighbors,
                                   malicious_server=malicious_server)
  return as_results(sums, result.sum, specs), result
