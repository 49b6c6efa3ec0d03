"""`federated_value` and `federated_eval`: a value made at a placement, by
constants or by a no-argument tf_computation run there."""

from canonical.core import computations
from canonical.core.intrinsics import checks
from canonical.core.intrinsics import registry
from canonical.core import ir
from canonical.core import types as ft


def federated_value(value, placement):
  """A value known at trace time, at a placement (all clients: the same).

  `value` is a constant structure (Python numbers become TensorFlow's default
  dtypes, float32 and int32), the unplaced result of calling a tf_computation
  in the body (`federated_value(init(), SERVER)`: the piece at `placement`
  runs `init`), or a no-argument tf_computation.
  """
  name = VALUE.name
  checks.expect_placement_literal(name, placement)
  if isinstance(value, ir.Value):
    checks.fail(name, f'{value!r} is already placed; federated_broadcast '
                      'moves a SERVER value to the clients.')
  if isinstance(value, ir.Unplaced):
    value = value.computation
  if isinstance(value, computations.TFComputation):
    computation = value
    if computation.parameter_specs:
      checks.fail(name, f'{computation!r} must take no argument.')
  else:
    computation = checks.constant_computation(name, value)
  return VALUE.bind([], {'computation': computation, 'placement': placement})


def federated_eval(fn, placement):
  """Evaluates the no-argument tf_computation `fn` at `placement`.

  At the SERVER this is `federated_value(fn(), SERVER)`. At CLIENTS each
  client evaluates `fn` and the result is a CLIENTS value with no promise
  that clients agree ({T}@CLIENTS), as in TFF. A pure `fn` gives every
  client the same value; one that draws entropy of its own (a generator
  `from_non_deterministic_state`) runs at each client when called from
  Python, as in TFF, and is refused by the compiler: randomness in a form
  comes from stateless random ops seeded by its inputs.
  """
  name = EVAL.name
  checks.expect_placement_literal(name, placement)
  if isinstance(fn, ir.Unplaced):
    checks.fail(name, f'expects the tf_computation itself, not its result: '
                      f'write federated_eval({fn.computation.name}, ...) '
                      'without the call.')
  checks.expect_tf_computation(name, 'the function', fn)
  if fn.parameter_specs:
    checks.fail(name, f'{fn!r} must take no argument; apply a computation to '
                      'a placed value with federated_map.')
  return EVAL.bind([], {'computation': fn, 'placement': placement})


def _value_type(computation, placement):
  return ft.FederatedType(checks.result_spec(VALUE.name, computation),
                          placement, True)


def _eval_type(computation, placement):
  return ft.FederatedType(checks.result_spec(EVAL.name, computation),
                          placement, placement == ft.SERVER)


def _run_computation(op, args):
  del args
  return op.attrs['computation'].call_with_member(None)


def _spec(name, function, type_rule):
  return registry.Intrinsic(
      name=name, function=function, type_rule=type_rule,
      placement=registry.Placement.GIVEN, role=registry.Role.LOCAL,
      at_one_place=_run_computation, reference=registry.pointwise)


VALUE = registry.register(_spec('federated_value', federated_value,
                                _value_type))
EVAL = registry.register(_spec('federated_eval', federated_eval, _eval_type))
