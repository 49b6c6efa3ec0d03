"""`federated_zip` (a structure of values at one placement as one value) and
`select` (`value[key]`: one part of a structured value; a traced `ir.Value`
records it itself, by the type rule `ir.select_type` this spec declares)."""

import tensorflow as tf

from canonical.core.intrinsics import registry
from canonical.core import ir
from canonical.core import naming
from canonical.core import types as ft


def federated_zip(values):
  """A structure of values with one placement -> one value of that structure."""
  return zip_values(ZIP.name, values)


def zip_values(name, values):
  """`federated_zip(values)`, its misuse named as `name`'s (an intrinsic
  given a structure of values zips them)."""
  leaves = tf.nest.flatten(values)
  if not leaves or not all(isinstance(v, ir.Value) for v in leaves):
    registry.fail(name, f'expects a non-empty structure of federated values, '
                        f'got {naming.describe_object(values)}.')
  _one_placement(name, leaves)
  return ZIP.bind(leaves, {
      'structure': tf.nest.map_structure(lambda _: None, values)})


def _one_placement(name, leaves):
  placements = {v.placement for v in leaves}
  if len(placements) != 1:
    registry.fail(name, f'cannot zip values placed at different places '
                        f'({", ".join(repr(v) for v in leaves)}): to combine '
                        'them at the clients, federated_broadcast the SERVER '
                        'values first; to combine them at the server, '
                        'aggregate the CLIENTS values first.')
  return placements.pop()


def _zip_type(*leaves, structure):
  placement = _one_placement(ZIP.name, leaves)
  member = tf.nest.pack_sequence_as(structure, [v.member for v in leaves])
  all_equal = all(v.type_signature.all_equal for v in leaves)
  return ft.FederatedType(member, placement, all_equal)


def _zip_at_one_place(op, args):
  return tf.nest.pack_sequence_as(op.attrs['structure'], args)


def _select_type(value, key):
  return ir.select_type(value, key)


def _select_at_one_place(op, args):
  return args[0][op.attrs['key']]


ZIP = registry.register(registry.Intrinsic(
    name='federated_zip', function=federated_zip, type_rule=_zip_type,
    placement=registry.Placement.OF_ARGUMENT, role=registry.Role.LOCAL,
    at_one_place=_zip_at_one_place, reference=registry.pointwise))
SELECT = registry.register(registry.Intrinsic(
    name='select', function=ir.select, type_rule=_select_type,
    placement=registry.Placement.OF_ARGUMENT, role=registry.Role.LOCAL,
    at_one_place=_select_at_one_place, reference=registry.pointwise))
