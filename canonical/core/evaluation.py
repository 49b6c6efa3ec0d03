"""Evaluating federated ops at one place: the semantics the emitted pieces trace.

Inside a canonical-form piece every value lives at one place (the server, or
one client), so an op is just its tf_computation applied to plain structures.
"""

import tensorflow as tf

from canonical.core import sequences


def evaluate(ops, env):
  """Evaluates `ops` in order; `env` maps id(Value) -> structure, and grows."""
  for op in ops:
    if id(op.output) in env:
      continue  # Given from outside the piece (e.g. a broadcast's C).
    args = [env[id(v)] for v in op.inputs]
    env[id(op.output)] = evaluate_op(op, args)
  return env


def evaluate_op(op, args):
  kind = op.kind
  if kind in ('federated_map', 'federated_apply'):
    return op.attrs['computation'].call_with_member(args[0])
  if kind in ('federated_value', 'federated_eval'):
    return op.attrs['computation'].call_with_member(None)
  if kind in sequences.KINDS:
    return sequences.evaluate(op, args)
  if kind == 'federated_zip':
    return tf.nest.pack_sequence_as(op.attrs['structure'], args)
  if kind == 'select':
    return args[0][op.attrs['key']]
  raise ValueError(f'{op.describe()} cannot be evaluated at one place.')
