"""The secure sums, with TFF's names: integers at the clients added under
masks, so that no aggregator sees a client's value. Each spec carries its
rule (`core.secure_sum_rules`: the parameter's range, the modulus, what a
client may send); the runtimes add them with the masking protocol
(`canonical.secagg.sums`).

The parameter (bitwidth, max_input or modulus) is an int, a structure of ints
like the value (one per tensor), or an integer SERVER value, one scalar for
all tensors or one per tensor: then the form's `secure_parameters` piece
computes it from the server state every round.

`federated_secure_modular_sum_with_client_noise` (ours, for distributed DP)
is the modular sum with noise each client's runtime adds from a secret only
it holds (`canonical.secagg.client_noise`): its op carries the mechanism,
and its last input is the round's local stddev, a SERVER value that
`secure_parameters` hands on beside the modulus.
"""

import numpy as np
import tensorflow as tf

from canonical.core.intrinsics import checks
from canonical.core.intrinsics import registry
from canonical.core import ir
from canonical.core import naming
from canonical.core import secure_sum_rules
from canonical.core import types as ft
from canonical.core.intrinsics import values
from canonical.secagg import sums


def federated_secure_sum_bitwidth(value, bitwidth):
  """The exact sum at the SERVER of integers in [0, 2**bitwidth - 1] at the
  clients, added under pairwise masks so that no aggregator sees a client's
  value. `bitwidth`: an int, or a structure of ints like `value` (one per
  tensor), or an integer SERVER value (from the server state)."""
  return _secure_sum(BITWIDTH, value, bitwidth)


def federated_secure_sum(value, max_input):
  """The exact sum at the SERVER of integers in [0, max_input] at the
  clients, securely (see `federated_secure_sum_bitwidth`)."""
  return _secure_sum(MAX_INPUT, value, max_input)


def federated_secure_modular_sum(value, modulus):
  """SUM(value) % modulus at the SERVER, securely; client values are taken
  modulo `modulus` first (negatives too)."""
  return _secure_sum(MODULAR, value, modulus)


def federated_secure_modular_sum_with_client_noise(value, modulus, mechanism,
                                                   local_stddev):
  """As `federated_secure_modular_sum`, with each client adding its own
  noise before it masks: `mechanism` 'distributed_dgauss' or
  'distributed_skellam', of stddev `local_stddev` (a float SERVER value, or
  a number), drawn by the runtime from the client's own secret, so that no
  party, the server holding the form included, can take it off a client's
  value. Not TFF's: TFF's distributed DP draws noise in the client's work."""
  name = MODULAR.name
  if mechanism not in sums.client_noise.MECHANISMS:
    checks.fail(name, f'the client noise mechanism must be one of '
                      f'{list(sums.client_noise.MECHANISMS)}, got '
                      f'{naming.describe_object(mechanism)}.')
  if not isinstance(local_stddev, ir.Value):
    try:
      stddev = sums.client_noise.check_stddev(local_stddev,
                                              'the local stddev')
    except (TypeError, ValueError) as e:
      checks.fail(name, str(e))
    local_stddev = values.federated_value(np.float32(stddev), ft.SERVER)
  return _secure_sum(MODULAR, value, modulus, (mechanism, local_stddev))


def _secure_sum(spec, value, parameter, noise=None):
  name, rule = spec.name, spec.secure_rule
  value = checks.as_value(name, value)
  noise_inputs, noise_attrs = [], {}
  if noise is not None:
    mechanism, stddev = noise
    noise_inputs, noise_attrs = [stddev], {'noise': mechanism}
  what = rule.parameter_name
  if isinstance(parameter, ir.Unplaced):
    checks.fail(name, f'the {what} {naming.describe_object(parameter)} is '
                      'unplaced: place it with federated_value(..., SERVER), '
                      'or compute it from the server state with '
                      'federated_map.')
  if isinstance(parameter, ir.Value) or (
      tf.nest.flatten(parameter) and
      all(isinstance(p, ir.Value) for p in tf.nest.flatten(parameter))):
    parameter = checks.as_value(name, parameter)
    per_leaf = len(tf.nest.flatten(parameter.member)) == len(
        tf.nest.flatten(value.member))  # Else one for all (the type rule).
    return spec.bind([value, parameter] + noise_inputs,
                     {'per_leaf': per_leaf, **noise_attrs})
  try:
    flat = _parameter_leaves(name, what, parameter, value)
    flat = [rule.check_parameter(_python_int(name, what, p), f'the {what}')
            for p in flat]
  except sums.SecureSumError as e:
    checks.fail(name, str(e))
  if len(flat) == 1:
    flat = flat * len(tf.nest.flatten(value.member))
  return spec.bind([value] + noise_inputs,
                   {'parameters': tuple(flat), **noise_attrs})


def _type_rule(name):

  def type_rule(value, *server_inputs, parameters=None, per_leaf=None,
                noise=None):
    checks.built_in_reduction(name, value, 'securely sum',
                              lambda dtype: dtype.is_integer)
    if noise is not None:
      *server_inputs, stddev = server_inputs
      checks.expect_placement(name, stddev, ft.SERVER)
      if not (isinstance(stddev.member, tf.TensorSpec) and
              stddev.member.shape.rank == 0 and
              stddev.member.dtype.is_floating):
        checks.fail(name, 'the local noise stddev must be a float scalar at '
                          f'SERVER, got {stddev!r}.')
    parameter = server_inputs[0] if server_inputs else None
    if parameter is not None:  # Given by the SERVER each round.
      checks.expect_placement(name, parameter, ft.SERVER)
      what = secure_sum_rules.RULES[name].parameter_name
      for spec in _parameter_leaves(name, what, parameter.member, value):
        if not (isinstance(spec, tf.TensorSpec) and spec.shape.rank == 0 and
                spec.dtype.is_integer):
          checks.fail(name, f'the {what} must be integer scalars at SERVER, '
                            f'got {parameter!r}.')
    elif len(parameters) != len(tf.nest.flatten(value.member)):
      checks.fail(name, f'{len(parameters)} parameters for '
                        f'{ft.describe(value.member)}.')
    del per_leaf
    return ft.server(value.member)

  return type_rule


def _parameter_leaves(name, what, parameter, value):
  """The parameter's leaves: one for every tensor of `value`, or one for all."""
  flat = tf.nest.flatten(parameter)
  if len(flat) == 1 and not tf.nest.is_nested(parameter):
    return flat
  try:
    tf.nest.assert_same_structure(value.member, parameter, check_types=False)
  except (TypeError, ValueError):
    checks.fail(name, f'the {what} must be one int or a structure like the '
                      f'value {ft.describe(value.member)}, got '
                      f'{naming.describe_object(parameter)}.')
  return flat


def _python_int(name, what, parameter):
  if isinstance(parameter, (int, np.integer)) and not isinstance(
      parameter, (bool, np.bool_)):
    return int(parameter)
  checks.fail(name, f'the {what} must be an int (or an integer SERVER value), '
                    f'got {naming.describe_object(parameter)}.')


def parameters(op, given):
  """A secure sum op's parameters, one int64 scalar per tensor of its value:
  constants fixed at compile time, or `given` (the SERVER value it was
  handed: one scalar per tensor, or one for all). A noised sum's are the
  pair (those, its float32 local stddev, `given`'s last)."""
  if op.attrs.get('noise'):
    *given, stddev = given
    return _leaf_parameters(op, given), tf.cast(stddev, tf.float32)
  return _leaf_parameters(op, given)


def _leaf_parameters(op, given):
  value = op.inputs[0].member
  if 'parameters' in op.attrs:
    flat = [tf.constant(p, tf.int64) for p in op.attrs['parameters']]
  else:
    flat = [tf.cast(p, tf.int64) for p in tf.nest.flatten(given)]
    if not op.attrs['per_leaf']:
      flat *= len(tf.nest.flatten(value))
  return tf.nest.pack_sequence_as(value, flat)


def _entry(op):
  return sums.SecureSum(op.kind, op.attrs.get('parameters'),
                        op.attrs.get('noise'))


def _lowering(op):
  return registry.SecureLowering(
      entry=_entry(op), parameters=lambda given: parameters(op, given))


def _reference(op, inputs, num_clients):
  """The sum in the clear: what the masked protocol must give (noised sums:
  each client's noise from the OS, as a runtime's client draws it)."""
  del num_clients
  value = op.inputs[0].member
  entry = _entry(op)
  flat, stddevs = sums.round_parameters([entry],
                                        [parameters(op, inputs[1:])])
  return sums.plain_sum([entry], flat, [(client,) for client in inputs[0]],
                        [value], [op.describe()], stddevs)[0]


def _spec(name, function):
  return registry.Intrinsic(
      name=name, function=function, type_rule=_type_rule(name),
      placement=registry.Placement.SERVER,
      role=registry.Role.SECURE_AGGREGATION,
      at_one_place=registry.first_argument, reference=_reference,
      lowering=_lowering, secure_rule=secure_sum_rules.RULES[name])


BITWIDTH = registry.register(_spec(sums.BITWIDTH,
                                   federated_secure_sum_bitwidth))
MAX_INPUT = registry.register(_spec(sums.MAX_INPUT, federated_secure_sum))
MODULAR = registry.register(_spec(sums.MODULAR, federated_secure_modular_sum))
