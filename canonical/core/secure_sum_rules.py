"""The rules of the three secure sums, one object per intrinsic (TFF's names).

They differ only in the modulus their integers are added under and in what a
client may send:

| intrinsic                       | parameter p | a client sends    | result        |
| federated_secure_sum_bitwidth   | bitwidth    | [0, 2**p - 1]     | the exact sum |
| federated_secure_sum            | max_input   | [0, p]            | the exact sum |
| federated_secure_modular_sum    | modulus     | any (taken mod p) | sum mod p     |

For the exact sums the modulus is chosen per round from the number of
clients, large enough that the modular sum is the sum. The intrinsic specs
(`canonical.core.intrinsics.secure_sums`), the runtime's sums
(`canonical.secagg.sums`) and the TensorFlow-free form reader all read these
objects. Only numpy here: `inspect` imports it without TensorFlow.
"""

import abc
import dataclasses
import math

import numpy as np

from canonical import errors

# Masks and sums travel as uint64; an exact sum must come back as an int64.
MAX_MODULUS = 2**63


class SecureSumError(errors.Error, ValueError):
  """A secure sum cannot be computed: a parameter out of range, a client's
  value out of its range, or a sum that does not fit its dtype."""


@dataclasses.dataclass(frozen=True)
class Rule(abc.ABC):
  """One secure sum's rule. `largest_input(p)` is None when any integer is
  taken (modulo p)."""
  kind: str
  parameter_name: str
  smallest: int  # The parameter's range.
  largest: int

  def check_parameter(self, parameter, where):
    parameter = int(parameter)
    if not self.smallest <= parameter <= self.largest:
      raise SecureSumError(f'{where}: {self.parameter_name} {parameter} is out of '
                      f'range [{self.smallest}, {self.largest}].')
    return parameter

  @abc.abstractmethod
  def largest_input(self, parameter):
    """The most a client may send under `parameter`."""

  def modulus(self, parameter, num_clients):
    """The modulus a round of `num_clients` adds this leaf under: large
    enough that the modular sum is the exact sum."""
    largest_input = self.largest_input(parameter)
    needed = self._rounded(parameter,
                           largest_input * max(num_clients, 1) + 1)
    if needed > MAX_MODULUS:
      raise SecureSumError(
          f'{self.kind}: the sum of {num_clients} values up to '
          f'{largest_input} needs a modulus of {needed}, more than 2**63.')
    return needed

  def _rounded(self, parameter, needed):
    del parameter
    return needed

  def encode(self, array, parameter, where):
    """`array` (a client's leaf) as uint64 in [0, modulus); `SecureSumError`
    naming `where` and the first value out of range."""
    largest = self.largest_input(parameter)
    bad = np.flatnonzero((array < 0) | (array > largest))
    if bad.size:
      index = tuple(int(i) for i in np.unravel_index(bad[0], array.shape))
      raise SecureSumError(
          f'values must be in [0, {largest}] ({self.parameter_name} '
          f'{parameter}), {where} has {array.reshape(-1)[bad[0]]} at index '
          f'{index}.')
    return array.astype(np.uint64)

  def describe(self, static_parameters=None):
    """The form's text: the parameter, or where it comes from."""
    if static_parameters is None:
      return f'{self.kind}, {self.parameter_name} from the server state'
    values = sorted(set(static_parameters))
    shown = values[0] if len(values) == 1 else list(static_parameters)
    return f'{self.kind}, {self.parameter_name} {shown}'


class _Bitwidth(Rule):

  def largest_input(self, parameter):
    return 2**parameter - 1

  def _rounded(self, parameter, needed):
    # A power of two, as a bitwidth promises.
    return 2**max(parameter, math.ceil(math.log2(needed)))


class _MaxInput(Rule):

  def largest_input(self, parameter):
    return parameter


class _Modular(Rule):

  def largest_input(self, parameter):
    return None

  def modulus(self, parameter, num_clients):
    del num_clients  # The sum is taken modulo the parameter itself.
    return parameter

  def encode(self, array, parameter, where):
    del where  # Every integer is projected into [0, modulus), negatives too.
    wide = np.uint64 if array.dtype == np.uint64 else np.int64
    return np.mod(array.astype(wide), wide(parameter)).astype(np.uint64)


# Distributed DP: noise a client adds to its modular-sum input before it
# masks (`canonical.secagg.client_noise`).
NOISE_MECHANISMS = ('distributed_dgauss', 'distributed_skellam')


def describe_noise(mechanism):
  """The form's text for a noised sum's noise."""
  return f', each client adding its own {mechanism} noise'


BITWIDTH = 'federated_secure_sum_bitwidth'
MAX_INPUT = 'federated_secure_sum'
MODULAR = 'federated_secure_modular_sum'

RULES = {rule.kind: rule for rule in (
    _Bitwidth(BITWIDTH, 'bitwidth', 1, 62),
    _MaxInput(MAX_INPUT, 'max_input', 1, MAX_MODULUS // 2),
    _Modular(MODULAR, 'modulus', 2, MAX_MODULUS),
)}
KINDS = tuple(RULES)
