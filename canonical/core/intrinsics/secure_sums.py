"""The secure sums, with TFF's names: integers at the clients added under
masks, so that no aggregator sees a client's value. Each spec carries its
rule (`core.secure_sum_rules`: the parameter's range, the modulus, what a
client may send); the runtimes add them with the masking protocol
(`canonical.secagg.sums`).

The parameter (bitwidth, max_input or modulus) is an int, a structure of ints
like the value (one per tensor), or an integer SERVER value, one scalar for
all tensors or one per tensor: then the form's `secure_parameters` piece
computes it from the server state every round.
"""

import numpy as np
import tensorflow as tf

from canonical.core.intrinsics import checks
from canonical.core.intrinsics import registry
from canonical.core import ir
from canonical.core import naming
from canonical.core import secure_sum_rules
from canonical.core import types as ft
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


def _secure_sum(spec, value, parameter):
  name, rule = spec.name, spec.secure_rule
  value = checks.as_value(name, value)
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
    return spec.bind([value, parameter], {'per_leaf': per_leaf})
  try:
    flat = _parameter_leaves(name, what, parameter, value)
    flat = [rule.check_parameter(_python_int(name, what, p), f'the {what}')
            for p in flat]
  except sums.SecureSumError as e:
    checks.fail(name, str(e))
  if len(flat) == 1:
    flat = flat * len(tf.nest.flatten(value.member))
  return spec.bind([value], {'parameters': tuple(flat)})


def _type_rule(name):

  def type_rule(value, parameter=None, parameters=None, per_leaf=None):
    checks.built_in_reduction(name, value, 'securely sum',
                              lambda dtype: dtype.is_integer)
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
  handed: one scalar per tensor, or one for all)."""
  value = op.inputs[0].member
  if 'parameters' in op.attrs:
    flat = [tf.constant(p, tf.int64) for p in op.attrs['parameters']]
  else:
    flat = [tf.cast(p, tf.int64) for p in tf.nest.flatten(given)]
    if not op.attrs['per_leaf']:
      flat *= len(tf.nest.flatten(value))
  return tf.nest.pack_sequence_as(value, flat)


def _lowering(op):
  return registry.SecureLowering(
      entry=sums.SecureSum(op.kind, op.attrs.get('parameters')),
      parameters=lambda given: parameters(op, given))


def _reference(op, inputs, num_clients):
  """The sum in the clear: what the masked protocol must give."""
  del num_clients
  value = op.inputs[0].member
  flat = sums.flat_parameters([parameters(op, inputs[1:])])[0]
  return sums.plain_sum([sums.SecureSum(op.kind)], [flat],
                        [(client,) for client in inputs[0]], [value],
                        [op.describe()])[0]


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
