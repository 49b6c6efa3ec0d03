"""`federated_map` and `federated_apply`: a tf_computation applied where a
value is (at each client, or at the server)."""

from canonical.core.intrinsics import checks
from canonical.core.intrinsics import registry
from canonical.core import types as ft


def federated_map(computation, value):
  """Applies a tf_computation pointwise: at each client, or at the server."""
  return _map(MAP, computation, value)


def federated_apply(computation, value):
  """Applies a tf_computation to a SERVER value (a server-side map)."""
  value = checks.as_value(APPLY.name, value)
  checks.expect_placement(APPLY.name, value, ft.SERVER)
  return _map(APPLY, computation, value)


def _map(spec, computation, value):
  value = checks.as_value(spec.name, value)
  computation = checks.typed_tf_computation(spec.name, 'the function',
                                            computation, value.member)
  if not computation.parameter_specs:
    checks.fail(spec.name, f'{computation!r} takes no argument; use '
                           'federated_value or federated_eval.')
  return spec.bind([value], {'computation': computation})


def _type_rule(name):

  def type_rule(value, computation):
    checks.expect_member(name, f'the argument of {computation.name!r}',
                         value.member, computation.parameter_member())
    # As in TFF, a map at the clients promises no equality ({T}@CLIENTS).
    return ft.FederatedType(checks.result_spec(name, computation),
                            value.placement, value.placement == ft.SERVER)

  return type_rule


def _apply_computation(op, args):
  return op.attrs['computation'].call_with_member(args[0])


def _spec(name, function):
  return registry.Intrinsic(
      name=name, function=function, type_rule=_type_rule(name),
      placement=registry.Placement.OF_ARGUMENT, role=registry.Role.LOCAL,
      at_one_place=_apply_computation, reference=registry.pointwise)


MAP = registry.register(_spec('federated_map', federated_map))
APPLY = registry.register(_spec('federated_apply', federated_apply))
