"""One spec per intrinsic, and the registry that holds them.

An intrinsic is one object that carries all its rules, as a JAX primitive
does: the compiler, the executors and the process checks look its spec up by
the op's name (`of(op)`) instead of matching names. Adding an intrinsic is one
module that makes an `Intrinsic` and `register`s it, and one import line in
`canonical/core/intrinsics/__init__.py`.

| rule          | what it says                                             |
| function      | what the user calls, with TFF's name and signature      |
| type_rule     | `(*inputs, **attrs) -> result type`, or FederatedError   |
| placement     | where the result is (`Placement`), checked at `bind`     |
| role          | how the result is made in a round (`Role`): whether it   |
|               | aggregates, and whether securely                         |
| at_one_place  | `(op, args) -> value` at one place, in a piece (below)   |
| lowering      | how the compiler builds it into the pieces (below)       |
| reference     | `(op, inputs, num_clients) -> result` by its plain       |
|               | meaning, a CLIENTS value being a list, one per client    |

By role:

| role        | at_one_place                 | lowering                     |
| LOCAL       | the value, where its inputs  | none: at_one_place runs in   |
|             | are                          | prepare, work or update      |
| BROADCAST   | a client's value from C      | none: one entry of C, made   |
|             |                              | in prepare                   |
| AGGREGATION | a client's part of U         | `(op, value_spec) ->         |
|             |                              | Aggregation`: zero,          |
|             |                              | accumulate, merge, report    |
| SECURE_     | a client's part of U's       | `(op) -> SecureLowering`:    |
| AGGREGATION | secure part, from its value  | its entry in the form, its   |
|             | (the parameter is the        | parameters                   |
|             | server's)                    |                              |
"""

import dataclasses
import enum
import functools
from typing import Any, Callable, Optional

import tensorflow as tf

from canonical.core import ir
from canonical.core import naming
from canonical.core import types as ft
from canonical import errors
from canonical.errors import FederatedError


class Role(enum.Enum):
  """How an intrinsic's result is computed in a round of the canonical form."""
  LOCAL = 'local'                    # at one place: in prepare, work or update
  BROADCAST = 'broadcast'            # SERVER -> CLIENTS: C
  AGGREGATION = 'aggregation'        # CLIENTS -> SERVER: U, A, R
  SECURE_AGGREGATION = 'secure aggregation'  # CLIENTS -> SERVER, masked


class Placement(enum.Enum):
  """Where an intrinsic's result is."""
  SERVER = 'at the server'
  CLIENTS = 'at the clients'
  OF_ARGUMENT = 'where its (first) argument is'
  GIVEN = 'at the placement the caller gives'


@dataclasses.dataclass(frozen=True)
class Aggregation:
  """An aggregating op in the aggregation tier: what A is, and how clients'
  parts (from `at_one_place`) fold into it and become the result R."""
  zero: Callable            # () -> A
  accumulate: Callable      # (A, a client's part) -> A
  merge: Callable           # (A, A) -> A
  report: Callable          # A -> the result
  accumulator_spec: Any     # A's member structure


@dataclasses.dataclass(frozen=True)
class SecureLowering:
  """A secure sum in a form: its entry in `form.secure_sums`, and its
  parameters per tensor from what the SERVER hands it (the op's inputs after
  the value), as a structure of int64 scalars like the summed value."""
  entry: Any                # canonical.secagg.sums.SecureSum
  parameters: Callable      # (given) -> structure of int64 scalars


@dataclasses.dataclass(frozen=True)
class Intrinsic:
  """One intrinsic's rules (see the module's table)."""
  name: str
  function: Callable
  type_rule: Callable
  placement: Placement
  role: Role
  at_one_place: Callable
  reference: Callable
  lowering: Optional[Callable] = None  # Aggregating roles only.
  # A secure sum's rule (`core.secure_sum_rules`): its parameter's range,
  # the modulus of a round, what a client may send.
  secure_rule: Optional[object] = None

  @property
  def aggregates(self):
    return self.role in (Role.AGGREGATION, Role.SECURE_AGGREGATION)

  @property
  def is_secure(self):
    return self.role is Role.SECURE_AGGREGATION

  def bind(self, inputs, attrs=None, location=None):
    """Types the op on `inputs` by the type rule, checks its placement, and
    appends it to the graph being traced; returns its output value."""
    attrs = dict(attrs or {})
    output_type = self.type_rule(*inputs, **attrs)
    expected = self.result_placement(inputs, attrs)
    if output_type.placement != expected:
      raise AssertionError(f'{self.name}: its type rule placed the result '
                           f'at {output_type.placement}, its placement rule '
                           f'says {expected}.')
    return ir.add_op(self.name, inputs, output_type, attrs, location)

  def result_placement(self, inputs, attrs):
    """The placement the placement rule gives for these inputs."""
    if self.placement is Placement.SERVER:
      return ft.SERVER
    if self.placement is Placement.CLIENTS:
      return ft.CLIENTS
    if self.placement is Placement.OF_ARGUMENT:
      return inputs[0].placement
    return attrs['placement']


_REGISTRY = {}


def register(intrinsic):
  """Adds `intrinsic` to the registry (its name must be new); returns it."""
  if intrinsic.name in _REGISTRY:
    raise errors.InvalidValueError(
        f'intrinsic {intrinsic.name!r} is registered already.')
  if intrinsic.aggregates != (intrinsic.lowering is not None):
    raise errors.InvalidValueError(
        f'intrinsic {intrinsic.name!r}: a lowering goes with '
        'the aggregating roles, and only with them.')
  _REGISTRY[intrinsic.name] = intrinsic
  return intrinsic


def lookup(name):
  """The spec registered under `name`."""
  try:
    return _REGISTRY[name]
  except KeyError:
    raise FederatedError(f'no intrinsic is registered as {name!r}.') from None


def of(op):
  """The spec of an IR op."""
  return lookup(op.kind)


def registered():
  """Every registered intrinsic, by name."""
  return dict(_REGISTRY)


def fail(name, message):
  """A FederatedError for a misuse of intrinsic `name`, at the user's line."""
  raise FederatedError(f'{name} at {naming.user_location()}: {message}')


# ----------------------------------------------------------------------------
# Reference meanings shared by several intrinsics.


def pointwise(op, inputs, num_clients):
  """A LOCAL op by its plain meaning: at the server, once; at the clients,
  at each client (a no-argument op: one evaluation stands for every client
  where its computation is pure; one that draws entropy, OS-seeded random
  numbers say, draws at each client, as in TFF; the compiler refuses it)."""
  if not op.inputs:
    if op.output.placement == ft.SERVER:
      return of(op).at_one_place(op, [])
    computation = op.attrs.get('computation')
    if computation is not None and computation.impurities():
      return [of(op).at_one_place(op, []) for _ in range(num_clients)]
    return [of(op).at_one_place(op, [])] * num_clients
  if op.inputs[0].placement == ft.CLIENTS:
    return [of(op).at_one_place(op, list(args)) for args in zip(*inputs)]
  return of(op).at_one_place(op, inputs)


def folded_in_order(op, inputs, num_clients):
  """An AGGREGATION by its plain meaning: each client's part, folded in
  client order from the zero (no merge), then reported."""
  del num_clients
  spec = of(op)
  aggregation = spec.lowering(op, op.inputs[0].member)
  parts = [spec.at_one_place(op, list(args)) for args in zip(*inputs)]
  return aggregation.report(functools.reduce(aggregation.accumulate, parts,
                                             aggregation.zero()))


def first_argument(op, args):
  """The at-one-place meaning of an op whose value is its argument's."""
  del op
  return args[0]


def map_structure_pairwise(fn, a, b):
  """`fn` leaf by leaf; a tuple and a list (or namedtuple) of one layout are
  the same value."""
  return tf.nest.map_structure(fn, a, b, check_types=False)
