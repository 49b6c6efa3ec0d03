"""`federated_aggregate`: the general aggregation, with the user's own zero,
accumulate, merge and report."""

from canonical.core import computations
from canonical.core.intrinsics import checks
from canonical.core.intrinsics import registry
from canonical.core import types as ft

NAME = 'federated_aggregate'


def federated_aggregate(value, zero, accumulate, merge, report):
  """The general aggregation: fold clients into accumulators, merge, report.

  `accumulate(A, value) -> A`, `merge(A, A) -> A` and `report(A) -> R` are
  tf_computations; `zero` is one with no argument, or constants. The
  accumulator type is `accumulate`'s declared first parameter, so it may have
  unknown dimensions (e.g. a growing stack) that `zero` specializes.
  """
  value = checks.as_value(NAME, value)
  checks.client_tensors(NAME, value)
  if isinstance(accumulate, computations.PolymorphicComputation):
    # Untyped: the zero's type is the accumulator's.
    zero = checks.zero_computation(zero, None, NAME)
    accumulate = checks.typed_tf_computation(
        NAME, 'accumulate', accumulate,
        (checks.result_spec(NAME, zero), value.member))
  checks.expect_tf_computation(NAME, 'accumulate', accumulate)
  if len(accumulate.parameter_specs) != 2:
    checks.fail(NAME, f'accumulate {accumulate!r} must take 2 arguments.')
  accumulator = accumulate.parameter_specs[0]
  merge = checks.typed_tf_computation(NAME, 'merge', merge,
                                      (accumulator, accumulator))
  report = checks.typed_tf_computation(NAME, 'report', report, accumulator)
  for role, comp, arity in (('merge', merge, 2), ('report', report, 1)):
    if len(comp.parameter_specs) != arity:
      checks.fail(NAME, f'{role} {comp!r} must take {arity} argument(s).')
  zero = checks.zero_computation(zero, accumulator, NAME)
  return AGGREGATE.bind([value], {
      'zero': zero, 'accumulate': accumulate, 'merge': merge,
      'report': report, 'accumulator_spec': accumulator})


def _type(value, zero, accumulate, merge, report, accumulator_spec):
  checks.client_tensors(NAME, value)
  for comp in (zero, accumulate, merge, report):
    checks.result_spec(NAME, comp)
  expect = checks.expect_member
  expect(NAME, 'zero', zero.result_spec, accumulator_spec)
  expect(NAME, f'the value aggregated by {accumulate.name!r}', value.member,
         accumulate.parameter_specs[1])
  expect(NAME, f'the result of accumulate {accumulate.name!r}',
         accumulate.result_spec, accumulator_spec)
  for spec in merge.parameter_specs:
    expect(NAME, f'a parameter of merge {merge.name!r}', accumulator_spec,
           spec)
  expect(NAME, f'the result of merge {merge.name!r}', merge.result_spec,
         accumulator_spec)
  expect(NAME, f'the parameter of report {report.name!r}', accumulator_spec,
         report.parameter_specs[0])
  return ft.server(report.result_spec)


def _lowering(op, value_spec):
  del value_spec  # The user's computations say what A is.
  a = op.attrs
  return registry.Aggregation(
      a['zero'].invoke, a['accumulate'].invoke, a['merge'].invoke,
      a['report'].invoke, a['accumulator_spec'])


AGGREGATE = registry.register(registry.Intrinsic(
    name=NAME, function=federated_aggregate, type_rule=_type,
    placement=registry.Placement.SERVER, role=registry.Role.AGGREGATION,
    at_one_place=registry.first_argument, reference=registry.folded_in_order,
    lowering=_lowering))
