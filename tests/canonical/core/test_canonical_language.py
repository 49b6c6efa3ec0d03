"""The federated language: types, tracing, and the intrinsics' type checks.

Every error names the intrinsic and the user's line: each offending call below
carries a `# line:<name>` marker, and `_where(name)` is its `file:line`.
"""

import collections
import os

import numpy as np
import pytest
import tensorflow as tf

import canonical as cf
from canonical.core import ir
from canonical.core import naming
from canonical.core import types as ft

import marked_lines

F = tf.TensorSpec([], tf.float32)
I = tf.TensorSpec([], tf.int32)
F2 = tf.TensorSpec([2], tf.float32)


_where = marked_lines.finder(__file__)


@cf.tf_computation(F)
def _double(x):
  return 2.0 * x


# ----------------------------------------------------------------------------
# Types


def test_federated_types_print_placement_and_member():
  assert str(cf.server(F)) == 'float32@SERVER'
  assert str(cf.clients(F2)) == '{float32[2]}@CLIENTS'
  assert str(cf.clients(F2, all_equal=True)) == 'float32[2]@CLIENTS'
  dataset = tf.data.DatasetSpec(tf.TensorSpec([None, 3], tf.int32))
  assert str(cf.clients({'x': dataset, 'w': F})) == (
      '{<x=int32[?,3]*,w=float32>}@CLIENTS')
  assert ft.same_member(dataset, tf.data.DatasetSpec(
      tf.TensorSpec([4, 3], tf.int32)))
  assert not ft.same_member(dataset, F) and not ft.same_member(F, dataset)


def test_federated_types_take_only_specs():
  with pytest.raises(TypeError, match='tf.TensorSpec'):
    cf.server(3.0)
  with pytest.raises(TypeError, match='tf.TensorSpec'):
    cf.clients((F, np.zeros(2)))


def test_same_member_is_compatibility_of_structure_dtype_and_shape():
  assert ft.same_member(tf.TensorSpec([None, 2]), tf.TensorSpec([5, 2]))
  assert ft.same_member((F, [I]), (F, (I,)))
  assert not ft.same_member(F, I)
  assert not ft.same_member(F2, tf.TensorSpec([3]))
  assert not ft.same_member((F, F), (F,))
  assert not ft.same_member({'a': F}, {'b': F})


def test_spec_of_drops_tensor_names():
  spec = ft.spec_of(tf.constant([1.0, 2.0], name='named'))
  assert spec == tf.TensorSpec([2], tf.float32) and spec.name is None
  dataset = tf.data.Dataset.range(3).batch(2)
  assert isinstance(ft.spec_of(dataset), tf.data.DatasetSpec)


# ----------------------------------------------------------------------------
# tf_computation


def test_tf_computation_result_spec_and_autograph():

  @cf.tf_computation(F)
  def clipped(x):
    if x > 1.0:  # Python control flow over a tensor: AutoGraph's tf.cond.
      x = tf.constant(1.0)
    return {'value': x, 'count': tf.constant(1)}

  assert clipped.result_spec == {'value': F, 'count': I}
  assert float(clipped.invoke(5.0)['value']) == 1.0
  assert float(clipped.invoke(0.5)['value']) == 0.5


def test_tf_computation_forms():
  plain = cf.tf_computation(lambda x, y: x + y, F, F)
  assert plain.parameter_specs == (F, F)

  @cf.tf_computation
  def no_arguments():
    return tf.constant(3)

  assert no_arguments.parameter_specs == () and no_arguments.result_spec == I
  with pytest.raises(TypeError, match='input signature'):
    cf.tf_computation(3)


def test_tf_computation_is_traced_once():
  calls = []

  @cf.tf_computation(F)
  def counted(x):
    calls.append(1)
    return x + 1.0

  for _ in range(3):
    assert counted.result_spec == F
    counted.invoke(1.0)
  assert len(calls) == 1


def test_tf_computation_invoke_repacks_tuples_as_namedtuples():
  pair = collections.namedtuple('Pair', 'a b')

  @cf.tf_computation(pair(F, F))
  def total(p):
    return p.a + p.b

  assert float(total.invoke((1.0, 2.0))) == 3.0


def test_tf_computation_trace_error_names_computation_and_line():

  @cf.tf_computation(F)
  def broken(x):  # line:broken_def
    return x + tf.zeros([3, 4]) @ tf.zeros([5, 6])

  with pytest.raises(cf.FederatedError) as error:
    _ = broken.result_spec
  assert "'broken'" in str(error.value)
  assert _where('broken_def').split(':')[0] in str(error.value)


def test_tf_computation_refuses_federated_values():

  @cf.federated_computation(cf.server(F))
  def misuse(x):
    return _double(x)

  with pytest.raises(cf.FederatedError, match='federated_map'):
    misuse.trace()


# ----------------------------------------------------------------------------
# Tracing


def test_tracing_records_ops_in_order_with_user_lines():

  @cf.federated_computation(cf.server(F), cf.clients(F))
  def round_fn(state, data):
    shared = cf.federated_broadcast(state)  # line:trace_broadcast
    mapped = cf.federated_map(_double, data)  # line:trace_map
    return cf.federated_sum(mapped), shared  # line:trace_sum

  graph = round_fn.trace()
  assert [op.kind for op in graph.ops] == [
      'federated_broadcast', 'federated_map', 'federated_sum']
  assert [str(op.location).split(' ')[0] for op in graph.ops] == [
      _where('trace_broadcast'), _where('trace_map'), _where('trace_sum')]
  assert 'cf.federated_broadcast(state)' in str(graph.ops[0].location)
  assert [p.name for p in graph.parameters] == ['state', 'data']
  assert round_fn.trace() is graph  # Traced once.


def test_values_unpack_select_and_name_fields():
  output = collections.namedtuple('Output', 'loss count')

  @cf.tf_computation(F)
  def make(x):
    return output(x, tf.constant(1))

  @cf.tf_computation(F)
  def make_dict(x):
    return {'a': x, 'b': x + 1.0}

  @cf.federated_computation(cf.clients(F))
  def fn(data):
    pair = cf.federated_map(make, data)
    first, second = pair
    by_name = cf.federated_map(make_dict, data)['b']
    return (cf.federated_sum(pair.loss), cf.federated_sum(second),
            cf.federated_sum(first), cf.federated_sum(by_name))

  types = [t.member for t in fn.result_types]
  assert types == [F, I, F, F]
  loss, count, first, b = fn([1.0, 2.0, 3.0])
  assert (float(loss), int(count), float(first), float(b)) == (6.0, 3, 6.0,
                                                              9.0)


def test_values_have_no_truth_value_and_unknown_fields_fail():

  @cf.federated_computation(cf.server(F))
  def branchy(x):
    if x:
      return x
    return x

  with pytest.raises(cf.FederatedError, match='tf.cond'):
    branchy.trace()

  @cf.federated_computation(cf.server((F, F)))
  def missing(x):
    return x[2]

  with pytest.raises(cf.FederatedError, match='has no element 2'):
    missing.trace()


def test_intrinsics_outside_tracing_fail():
  with pytest.raises(cf.FederatedError, match='while tracing'):
    cf.federated_value(1.0, cf.SERVER)


def test_federated_computation_composes_and_runs_by_reference():

  @cf.federated_computation(cf.clients(F))
  def total(data):
    return cf.federated_sum(cf.federated_map(_double, data))

  @cf.federated_computation(cf.server(F), cf.clients(F))
  def outer(state, data):
    return cf.federated_map(cf.tf_computation(lambda a, b: a + b, F, F),
                            (state, total(data)))

  assert float(outer(1.0, [1.0, 2.0, 3.0])) == 13.0
  kinds = [op.kind for op in outer.trace().ops]
  assert kinds == ['federated_map', 'federated_sum', 'federated_zip',
                   'federated_map']


def test_federated_value_uses_tensorflow_default_dtypes():

  @cf.federated_computation()
  def constants():
    return (cf.federated_value(1.5, cf.SERVER),
            cf.federated_value(2, cf.SERVER),
            cf.federated_value(np.zeros([2], np.float64), cf.CLIENTS))

  server_float, server_int, clients = constants.result_types
  assert server_float == cf.server(F) and server_int == cf.server(I)
  assert clients == cf.clients(tf.TensorSpec([2], tf.float64), all_equal=True)


# ----------------------------------------------------------------------------
# Intrinsics: types and error messages


def _trace_error(fn, *types):
  with pytest.raises(cf.FederatedError) as error:
    cf.federated_computation(*types)(fn).trace()
  return str(error.value)


def test_federated_sum_of_a_server_value():
  message = _trace_error(
      lambda s: cf.federated_sum(s),  # line:sum_server
      cf.server(F))
  assert message.startswith('federated_sum at ' + _where('sum_server'))
  assert 'CLIENTS' in message


def test_federated_map_with_mismatched_signature():
  message = _trace_error(
      lambda d: cf.federated_map(_double, d),  # line:map_mismatch
      cf.clients(I))
  assert message.startswith('federated_map at ' + _where('map_mismatch'))
  assert "'_double'" in message and 'int32' in message
  assert 'expected float32' in message


def test_federated_mean_of_integers():
  message = _trace_error(
      lambda d: cf.federated_mean(d),  # line:mean_ints
      cf.clients(I))
  assert message.startswith('federated_mean at ' + _where('mean_ints'))
  assert 'int32' in message


def test_federated_mean_weight_must_be_a_real_scalar():
  # Integer weights are welcome
  # (tests/canonical/core/test_language_tff_names.py); a vector is not a weight.
  message = _trace_error(
      lambda d: cf.federated_mean(d[0], weight=d[1]),  # line:bad_weight
      cf.clients((F2, F2)))
  assert message.startswith('federated_mean at ' + _where('bad_weight'))
  assert 'weight' in message


def test_zip_of_mixed_placements():
  message = _trace_error(
      lambda s, d: cf.federated_zip((s, d)),  # line:zip_mixed
      cf.server(F), cf.clients(F))
  assert message.startswith('federated_zip at ' + _where('zip_mixed'))
  assert 'federated_broadcast' in message
  add = cf.tf_computation(lambda a, b: a + b, F, F)
  message = _trace_error(
      lambda s, d: cf.federated_map(add, (s, d)),  # line:map_mixed
      cf.server(F), cf.clients(F))
  assert message.startswith('federated_map at ' + _where('map_mixed'))


def test_federated_apply_on_a_clients_value():
  message = _trace_error(
      lambda d: cf.federated_apply(_double, d),  # line:apply_clients
      cf.clients(F))
  assert message.startswith('federated_apply at ' + _where('apply_clients'))
  assert 'aggregation' in message


def test_federated_broadcast_of_a_clients_value():
  message = _trace_error(
      lambda d: cf.federated_broadcast(d),  # line:broadcast_clients
      cf.clients(F))
  assert message.startswith('federated_broadcast at ' +
                            _where('broadcast_clients'))


def test_builtin_reductions_need_known_shapes_and_fitting_dtypes():
  message = _trace_error(
      lambda d: cf.federated_sum(d),  # line:sum_unknown
      cf.clients(tf.TensorSpec([None], tf.float32)))
  assert message.startswith('federated_sum at ' + _where('sum_unknown'))
  assert 'federated_aggregate' in message
  message = _trace_error(
      lambda d: cf.federated_max(d),  # line:max_bool
      cf.clients(tf.TensorSpec([], tf.bool)))
  assert message.startswith('federated_max at ' + _where('max_bool'))
  message = _trace_error(
      lambda d: cf.federated_sum(d),  # line:sum_dataset
      cf.clients(tf.data.DatasetSpec(F)))
  assert message.startswith('federated_sum at ' + _where('sum_dataset'))
  assert 'only tensors' in message


def test_federated_aggregate_checks_its_computations():
  acc = tf.TensorSpec([None], tf.float32)
  push = cf.tf_computation(lambda a, v: tf.concat([a, [v]], 0), acc, F)
  join = cf.tf_computation(lambda a, b: tf.concat([a, b], 0), acc, acc)
  report = cf.tf_computation(tf.reduce_sum, acc)
  wrong_merge = cf.tf_computation(lambda a, b: a + b, F, F)
  message = _trace_error(
      lambda d: cf.federated_aggregate(  # line:aggregate_merge
          d, np.zeros([0], np.float32), push, wrong_merge, report),
      cf.clients(F))
  assert message.startswith('federated_aggregate at ' +
                            _where('aggregate_merge'))
  assert 'merge' in message
  message = _trace_error(
      lambda d: cf.federated_aggregate(  # line:aggregate_value
          d, np.zeros([0], np.float32), push, join, report),
      cf.clients(I))
  assert message.startswith('federated_aggregate at ' +
                            _where('aggregate_value'))
  message = _trace_error(
      lambda d: cf.federated_aggregate(  # line:aggregate_python
          d, np.zeros([0], np.float32), lambda a, v: a, join, report),
      cf.clients(F))
  assert 'accumulate must be a tf_computation' in message

  @cf.federated_computation(cf.clients(F))
  def fine(data):
    return cf.federated_aggregate(data, [], push, join, report)

  assert fine.result_types == cf.server(F)
  assert float(fine([1.0, 2.0, 4.0])) == 7.0


def test_type_of_each_intrinsic_result():

  @cf.federated_computation(cf.server(F), cf.clients((F2, F)))
  def fn(state, data):
    shared = cf.federated_broadcast(state)
    return (shared, cf.federated_map(_double, shared),
            cf.federated_mean(data[0], weight=data[1]),
            cf.federated_zip({'a': data[0], 'b': data[1]}),
            cf.federated_apply(_double, state))

  shared, mapped, mean, zipped, applied = fn.result_types
  assert shared == cf.clients(F, all_equal=True)
  assert mapped == cf.clients(F)  # As in TFF: {T}@CLIENTS.
  assert mean == cf.server(F2)
  assert zipped == cf.clients({'a': F2, 'b': F})
  assert applied == cf.server(F)


def test_location_skips_only_the_language_and_what_runs_it():
  package = os.path.dirname(cf.__file__)
  for library in (cf.__file__, ir.__file__, cf.compiler.__file__,
                  cf.templates.iterative_process.__file__,
                  cf.executors.reference.__file__, tf.__file__):
    assert naming.is_library_file(library), library
  assert not naming.is_library_file(__file__)
  for user in (('learning', 'model.py'), ('aggregators', 'mean.py')):
    assert not naming.is_library_file(os.path.join(package, *user)), user
