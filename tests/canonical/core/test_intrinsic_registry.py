"""The intrinsic registry: every intrinsic has every rule its role needs, and
each is exercised end to end (traced, compiled, run by the form and by the
reference executor) by a program below; a registered intrinsic without one
fails `test_every_registered_intrinsic_has_an_example`."""

import numpy as np
import pytest
import tensorflow as tf

import canonical as cf
from canonical.core.intrinsics import registry

F = tf.TensorSpec([], tf.float32)
I = tf.TensorSpec([], tf.int32)
V2 = tf.TensorSpec([2], tf.float32)

_ROLES = registry.Role


def test_every_intrinsic_declares_every_rule_of_its_role():
  specs = registry.registered()
  assert specs
  for name, spec in specs.items():
    assert spec.name == name
    for rule in ('function', 'type_rule', 'at_one_place', 'reference'):
      assert callable(getattr(spec, rule)), (name, rule)
    assert isinstance(spec.placement, registry.Placement), name
    assert isinstance(spec.role, registry.Role), name
    assert callable(spec.lowering) == spec.aggregates, name
    assert spec.is_secure == (spec.role is _ROLES.SECURE_AGGREGATION), name
    assert spec.aggregates == (spec.placement is registry.Placement.SERVER
                               and spec.role is not _ROLES.LOCAL), name


def test_the_public_api_is_the_registered_functions():
  for name, spec in registry.registered().items():
    if name == 'federated_weighted_mean':  # Called as federated_mean.
      assert spec.function is cf.federated_mean
    elif name == 'select':  # Called as value[key].
      assert spec.function is cf.core.ir.select
    else:
      assert getattr(cf, name) is spec.function, name


def test_registering_twice_or_without_the_lowering_its_role_needs_fails():
  spec = registry.lookup('federated_sum')
  with pytest.raises(ValueError, match='registered already'):
    registry.register(spec)
  local = registry.Intrinsic(
      name='no_such_local', function=print, type_rule=print,
      placement=registry.Placement.OF_ARGUMENT, role=_ROLES.LOCAL,
      at_one_place=print, reference=print, lowering=print)
  with pytest.raises(ValueError, match='lowering'):
    registry.register(local)
  assert 'no_such_local' not in registry.registered()
  with pytest.raises(cf.FederatedError, match='no_such_local'):
    registry.lookup('no_such_local')


def test_bind_refuses_a_type_rule_that_breaks_the_placement_rule():
  wrong = registry.Intrinsic(
      name='wrongly_placed', function=print,
      type_rule=lambda value: cf.clients(value.member),
      placement=registry.Placement.SERVER, role=_ROLES.LOCAL,
      at_one_place=registry.first_argument, reference=registry.pointwise)

  @cf.federated_computation(cf.server(F))
  def uses(x):
    return wrong.bind([x])

  with pytest.raises(AssertionError, match='placement rule'):
    uses.trace()


# -----------------------------------------------------------------------------
# One program per intrinsic: compiled and run as a form, and by the reference
# executor; the two must agree. Keys name the intrinsics each one uses.


@cf.tf_computation
def _zero():
  return tf.constant(0.0)


@cf.tf_computation(F)
def _double(x):
  return 2.0 * x


@cf.tf_computation(F, F)
def _add(a, b):
  return a + b


@cf.tf_computation(F)
def _identity(a):
  return a


@cf.tf_computation(F)
def _to_int(x):
  return tf.cast(x, tf.int32)


@cf.tf_computation(tf.data.DatasetSpec(F))
def _count(dataset):
  return dataset.reduce(0.0, lambda n, _: n + 1.0)


def _plain_program():
  """Broadcast, map (both places), apply, value, eval, zip, select, sum,
  min, max, mean (plain and weighted), aggregate."""

  @cf.federated_computation(cf.server(F), cf.clients(F))
  def next_fn(state, data):
    at_clients = cf.federated_map(_add, (data, cf.federated_broadcast(state)))
    pair = cf.federated_zip((at_clients, data))
    first = pair[0]
    one = cf.federated_value(1.0, cf.CLIENTS)
    zero = cf.federated_eval(_zero, cf.SERVER)
    total = cf.federated_sum(first)
    mean = cf.federated_mean(data)
    weighted = cf.federated_mean(data, weight=one)
    folded = cf.federated_aggregate(data, 0.0, _add, _add, _identity)
    new_state = cf.federated_apply(_double, cf.federated_map(_add,
                                                             (total, zero)))
    return new_state, (cf.federated_min(data), cf.federated_max(data), mean,
                       weighted, folded)

  return cf.IterativeProcess(_zero, next_fn), [tf.constant(1.0),
                                               tf.constant(4.0)]


def _sequence_program():
  """sequence_map, sequence_reduce, sequence_sum."""
  element = F

  @cf.federated_computation(cf.server(F),
                            cf.clients(cf.SequenceType(element)))
  def next_fn(state, data):
    doubled = cf.sequence_map(_double, data)
    summed = cf.sequence_sum(doubled)
    folded = cf.sequence_reduce(data, 0.0, _add)
    return state, (cf.federated_sum(summed), cf.federated_sum(folded))

  data = [tf.data.Dataset.from_tensor_slices([1.0, 2.0]),
          tf.data.Dataset.from_tensor_slices([5.0])]
  return cf.IterativeProcess(_zero, next_fn), data


def _secure_program():
  """The three secure sums."""

  @cf.federated_computation(cf.server(F), cf.clients(F))
  def next_fn(state, data):
    counts = cf.federated_map(_to_int, data)
    return state, (cf.federated_secure_sum_bitwidth(counts, 4),
                   cf.federated_secure_sum(counts, 10),
                   cf.federated_secure_modular_sum(counts, 7))

  return cf.IterativeProcess(_zero, next_fn), [tf.constant(3.0),
                                               tf.constant(6.0)]


def _select_program():
  """federated_select, federated_secure_select."""
  table = tf.TensorSpec([3], tf.float32)
  pick = cf.tf_computation(lambda t, k: t[k], table, tf.int32)

  @cf.tf_computation(tf.data.DatasetSpec(F))
  def total(values):
    return values.reduce(0.0, lambda a, v: a + v)

  @cf.federated_computation(cf.server(table),
                            cf.clients(tf.TensorSpec([2], tf.int32)))
  def next_fn(state, keys):
    max_key = cf.federated_value(np.int32(2), cf.SERVER)
    plain = cf.federated_select(keys, max_key, state, pick)
    secure = cf.federated_secure_select(keys, max_key, state, pick)
    return state, (cf.federated_sum(cf.federated_map(total, plain)),
                   cf.federated_sum(cf.federated_map(total, secure)))

  init = cf.tf_computation(lambda: tf.constant([1.0, 2.0, 4.0]))
  return cf.IterativeProcess(init, next_fn), [tf.constant([0, 2]),
                                              tf.constant([1, 1])]


_PROGRAMS = {
    'plain': (_plain_program, {
        'federated_broadcast', 'federated_map', 'federated_apply',
        'federated_value', 'federated_eval', 'federated_zip', 'select',
        'federated_sum', 'federated_min', 'federated_max', 'federated_mean',
        'federated_weighted_mean', 'federated_aggregate'}),
    'sequences': (_sequence_program, {'sequence_map', 'sequence_reduce',
                                      'sequence_sum'}),
    'secure': (_secure_program, {'federated_secure_sum_bitwidth',
                                 'federated_secure_sum',
                                 'federated_secure_modular_sum'}),
    'select': (_select_program, {'federated_select',
                                 'federated_secure_select'}),
}


def test_every_registered_intrinsic_has_an_example():
  covered = set().union(*(names for _, names in _PROGRAMS.values()))
  assert covered == set(registry.registered())


@pytest.mark.parametrize('program', sorted(_PROGRAMS))
def test_an_intrinsic_means_the_same_compiled_and_by_reference(program):
  build, names = _PROGRAMS[program]
  process, data = build()
  kinds = {op.kind for op in process.next.trace().ops}
  assert names <= kinds, names - kinds  # The program uses what it claims.
  form = cf.compile(process)
  state = form.initialize()
  expected = cf.reference.run_round(process, state, data)
  actual = cf.run_round(form, state, data, merge_seed=3, secure_seed=1)
  for a, e in zip(tf.nest.flatten(actual), tf.nest.flatten(expected)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=1e-6)
