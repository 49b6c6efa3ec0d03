"""`federated_broadcast`: a SERVER value sent to every client (the form's C)."""

from canonical.core.intrinsics import checks
from canonical.core.intrinsics import registry
from canonical.core import types as ft

NAME = 'federated_broadcast'


def federated_broadcast(value):
  """SERVER value -> the same value at every client."""
  return BROADCAST.bind([checks.as_value(NAME, value)])


def _type(value):
  checks.expect_placement(NAME, value, ft.SERVER)
  return ft.clients(value.member, all_equal=True)


def _reference(op, inputs, num_clients):
  del op
  return [inputs[0]] * num_clients


BROADCAST = registry.register(registry.Intrinsic(
    name=NAME, function=federated_broadcast, type_rule=_type,
    placement=registry.Placement.CLIENTS, role=registry.Role.BROADCAST,
    at_one_place=registry.first_argument, reference=_reference))
