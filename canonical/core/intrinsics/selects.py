"""`federated_select` and `federated_secure_select`: each client gets, as a
sequence, `select_fn(server_val, key)` for each of its keys.

TFF 0.87's MapReduceForm refuses a select. A round of the canonical form
sends every client the same C, and a select has the same meaning with the
server value sent whole to every client (an op of this module's spec, a
broadcast: one entry of C, made in prepare) and each client selecting
locally in work (a `federated_map` of a computation running `select_fn` on
its keys). Sent whole, the value tells the server nothing about any client's
keys, which is what the secure select promises: both lower the same way, at
the cost of sending the whole value. `max_key` is checked for its type only:
as in TFF, keys are not checked against it (`select_fn` sees every key).

Where no form can send the value (it depends on an aggregation of the same
round; initialize, which runs before any client exists), the compiler and
the process refuse the select naming its line, as they refuse a
`federated_broadcast` there.
"""

import tensorflow as tf

from canonical.core import computations
from canonical.core.intrinsics import broadcast
from canonical.core.intrinsics import checks
from canonical.core.intrinsics import maps
from canonical.core.intrinsics import registry
from canonical.core.intrinsics import structure
from canonical.core import ir
from canonical.core import naming
from canonical.core import types as ft

_KEY = tf.TensorSpec([], tf.int32)


def federated_select(client_keys, max_key, server_val, select_fn):
  """CLIENTS `int32[N]` keys, SERVER `int32` max_key, SERVER value, and
  `select_fn(value, key)` -> at each client, the sequence of `select_fn`'s
  results for its keys, in their order."""
  return _select(SELECT, client_keys, max_key, server_val, select_fn)


def federated_secure_select(client_keys, max_key, server_val, select_fn):
  """`federated_select` whose keys the server must not learn: the same
  lowering (the whole value goes to every client)."""
  return _select(SECURE_SELECT, client_keys, max_key, server_val, select_fn)


def _select(spec, client_keys, max_key, server_val, select_fn):
  name = spec.name
  keys = checks.as_value(name, client_keys)
  _check_keys(name, keys)
  _check_max_key(name, max_key)
  value = checks.as_value(name, server_val)
  checks.expect_placement(name, value, ft.SERVER)
  argument = (value.member, _KEY)
  select_fn = checks.typed_tf_computation(name, 'select_fn', select_fn,
                                          argument)
  checks.expect_member(name, f'the parameter of select_fn {select_fn.name!r}',
                       select_fn.parameter_member(), argument)
  result = checks.result_spec(name, select_fn)
  if ft.has_dataset(result):
    checks.fail(name, f'select_fn {select_fn!r} returns '
                      f'{ft.describe(result)}: the selected values become a '
                      'sequence, whose elements cannot be sequences.')
  sent = spec.bind([value])  # The whole value at every client: C.
  selector = computations.TFComputation(
      _select_each(select_fn), (keys.member, value.member),
      name=f'{name}({select_fn.name})', location=naming.user_location())
  pair = structure.zip_values(name, (keys, sent))
  return maps.MAP.bind([pair], {'computation': selector})


def _select_each(select_fn):
  """A client's selection: its keys, in order, as a sequence of values."""

  def select_each(keys, value):
    return tf.data.Dataset.from_tensor_slices(keys).map(
        lambda key: select_fn.call_with_member((value, key)))

  return select_each


def _check_keys(name, keys):
  member = keys.member
  if keys.placement != ft.CLIENTS or not (
      isinstance(member, tf.TensorSpec) and member.dtype == tf.int32 and
      member.shape.rank == 1 and member.shape[0] is not None):
    checks.fail(name, f'client_keys must be int32 keys of one fixed number '
                      f'per client, {{int32[N]}}@CLIENTS, got {keys!r}.')


def _check_max_key(name, max_key):
  if not isinstance(max_key, ir.Value) or max_key.placement != ft.SERVER or (
      not ft.same_member(max_key.member, _KEY)):
    what = (repr(max_key) if isinstance(max_key, ir.Value) else
            naming.describe_object(max_key))
    checks.fail(name, f'max_key must be an int32@SERVER value (the largest '
                      f'key, e.g. federated_value(3, SERVER)), got {what}.')


def _type(value):
  return ft.clients(value.member, all_equal=True)


def _spec(name, function):
  return registry.Intrinsic(
      name=name, function=function, type_rule=_type,
      placement=registry.Placement.CLIENTS, role=registry.Role.BROADCAST,
      at_one_place=registry.first_argument,
      reference=broadcast.BROADCAST.reference)


SELECT = registry.register(_spec('federated_select', federated_select))
SECURE_SELECT = registry.register(_spec('federated_secure_select',
                                        federated_secure_select))
