"""Evaluating federated ops at one place: what the emitted pieces trace.

Inside a canonical-form piece every value lives at one place (the server, or
one client), so an op is its intrinsic's `at_one_place` meaning applied to
plain structures.
"""

from canonical.core.intrinsics import registry


def evaluate(ops, env):
  """Evaluates `ops` in order; `env` maps id(Value) -> structure, and grows."""
  for op in ops:
    if id(op.output) in env:
      continue  # Given from outside the piece (e.g. a broadcast's C).
    args = [env[id(v)] for v in op.inputs]
    env[id(op.output)] = registry.of(op).at_one_place(op, args)
  return env
