"""TensorFlow Federated's `SecureModularSumFactory`: integers summed under a
modulus through `federated_secure_modular_sum`, so no aggregator sees a
client's value.

Values in [0, modulus - 1] sum to `sum % modulus`; a value outside wraps
around (no error). With `symmetric_range`, values lie in
[-(modulus - 1), modulus - 1] and the result too: they are summed modulo
2 * modulus - 1 (a negative x travels as x + 2 * modulus - 1, which the
secure sum's own reduction does) and a sum of modulus or more is shifted
back down by 2 * modulus - 1. No state, no measurements.
"""

import numpy as np
import tensorflow as tf

from canonical.aggregators import factory
from canonical.aggregators import sum_factory
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import specs
from canonical.core import types as ft
from canonical import errors
from canonical.secagg import sums
from canonical.templates import aggregation_process
from canonical.templates import measured


class SecureModularSumFactory(factory.UnweightedAggregationFactory):
  """TFF's `SecureModularSumFactory(modulus, symmetric_range=False)`: one
  positive int modulus for every tensor of an integer value."""

  def __init__(self, modulus, symmetric_range=False):
    where = 'SecureModularSumFactory'
    if isinstance(modulus, (bool, np.bool_)) or not isinstance(
        modulus, (int, np.integer)):
      raise errors.InvalidTypeError(
          f'{where}: modulus must be an int, got {modulus!r} (for one '
          'modulus per tensor, compose one factory per tensor).')
    if modulus <= 0:
      raise errors.InvalidValueError(
          f'{where}: modulus must be positive, got {modulus}.')
    if not isinstance(symmetric_range, bool):
      raise errors.InvalidTypeError(
          f'{where}: symmetric_range must be a bool, got '
          f'{symmetric_range!r}.')
    summed_modulus = 2 * int(modulus) - 1 if symmetric_range else int(modulus)
    if summed_modulus > sums.MAX_MODULUS:
      raise errors.InvalidValueError(
          f'{where}: the secure sum runs modulo {summed_modulus}, above its '
          f'largest modulus 2**63 (masks travel as 64-bit integers).')
    self._modulus = int(modulus)
    self._symmetric_range = symmetric_range
    self._summed_modulus = summed_modulus

  def create(self, value_type):
    where = 'SecureModularSumFactory.create'
    value_type = factory.integer_value_type(value_type, where)
    modulus = self._modulus
    wrap_down = specs.tf_computation(
        lambda total: tf.nest.map_structure(
            lambda x: x - (2 * modulus - 1) * tf.cast(x >= modulus, x.dtype),
            total), value_type)
    zeros = specs.tf_computation(lambda: tf.nest.map_structure(
        lambda s: tf.zeros(s.shape, s.dtype), value_type))

    @computations.federated_computation()
    def init_fn():
      return sum_factory.empty_at_server()

    @computations.federated_computation(init_fn.type_signature.result,
                                        ft.clients(value_type))
    def next_fn(state, value):
      if self._summed_modulus == 1:  # Every sum modulo 1 is 0.
        total = intrinsics.federated_eval(zeros, ft.SERVER)
      else:
        total = intrinsics.federated_secure_modular_sum(
            value, self._summed_modulus)
        if self._symmetric_range:
          total = intrinsics.federated_map(wrap_down, total)
      return measured.MeasuredProcessOutput(state, total,
                                            sum_factory.empty_at_server())

    return aggregation_process.AggregationProcess(init_fn, next_fn)
