"""What a TensorFlow Federated user reaches for: TFF's type names, federated_eval,
the sequence intrinsics, integer and float64 weights, a federated initialize.

Every misuse is a `FederatedError` naming the user's line: each offending call
carries a `# line:<name>` marker, and `_where(name)` is its `file:line`.
"""

import collections
import os

import numpy as np
import pytest
import tensorflow as tf

import canonical as cf
from canonical.core import types as ft
from canonical.executors import reference

import marked_lines
from tensor_asserts import assert_same


F = tf.TensorSpec([], tf.float32)
I = tf.TensorSpec([], tf.int32)
F2 = tf.TensorSpec([2], tf.float32)
D64 = tf.TensorSpec([2], tf.float64)
SEEDS = (None, 0, 3)


_where = marked_lines.finder(__file__)


def _error(fn):
  with pytest.raises(cf.FederatedError) as error:
    fn()
  message = str(error.value)
  assert ' at 0x' not in message, message
  return message


def _trace_error(fn, *types):
  return _error(lambda: cf.federated_computation(*types)(fn).trace())


def _datasets(*sizes, width=2):
  return [tf.data.Dataset.from_tensor_slices(
      np.arange(n * width, dtype=np.float32).reshape([n, width]) + n)
          for n in sizes]


def _both_ways(process, state, data):
  """The round by the reference and by the compiled form (several merge
  trees); asserts they agree and returns the reference's result."""
  expected = reference.run_round(process, state, data)
  form = cf.compile(process)
  for seed in SEEDS:
    assert_same(cf.run_round(form, state, data, merge_seed=seed), expected,
                exact=False, what=f'merge_seed {seed}')
  return expected


_zero_state = cf.tf_computation(lambda: tf.constant(0.0))


# ----------------------------------------------------------------------------
# Types with TFF's names


def test_tensor_type_is_a_tensor_spec():
  assert cf.TensorType(tf.float32) == F
  assert cf.TensorType(tf.float32, [784]) == tf.TensorSpec([784], tf.float32)
  assert cf.TensorType(np.int32, [None, 3]) == tf.TensorSpec([None, 3],
                                                             tf.int32)
  assert cf.types.TensorType is cf.TensorType


def test_sequence_type_is_a_dataset_spec():
  sequence = cf.SequenceType(cf.TensorType(tf.float32, [784]))
  assert sequence == tf.data.DatasetSpec(tf.TensorSpec([784], tf.float32))
  assert str(cf.type_at_clients(sequence)) == '{float32[784]*}@CLIENTS'
  pairs = cf.SequenceType((tf.float32, (tf.int32, [2])))
  assert pairs.element_spec == (F, tf.TensorSpec([2], tf.int32))


def test_struct_types():
  named = cf.StructType([('a', tf.int32), ('b', (tf.float32, [2]))])
  assert named == {'a': I, 'b': F2}
  assert cf.StructType([tf.int32, tf.float32]) == (I, F)
  assert cf.StructWithPythonType([tf.int32], list) == [I]
  ordered = cf.StructWithPythonType([('b', F), ('a', I)],
                                    collections.OrderedDict)
  assert isinstance(ordered, collections.OrderedDict)
  assert list(ordered) == ['b', 'a']
  point = collections.namedtuple('Point', 'x y')
  assert cf.StructWithPythonType([('x', F), ('y', F)], point) == point(F, F)
  assert cf.StructWithPythonType([F, F], point) == point(F, F)


def test_shorthand_and_placed_types():
  assert cf.to_type(tf.float32) == F
  assert cf.to_type((tf.float32, [2])) == F2
  assert cf.to_type((tf.float32, tf.int32)) == (F, I)
  assert cf.to_type([('x', tf.float32)]) == {'x': F}
  assert cf.type_at_server(tf.float32) == cf.server(F)
  assert cf.type_at_clients(tf.float32) == cf.clients(F)
  assert cf.FederatedType(tf.float32, cf.CLIENTS) == cf.clients(F)
  assert cf.FederatedType(tf.float32, cf.SERVER) == cf.server(F)
  assert cf.FederatedType(tf.float32, cf.CLIENTS, all_equal=True).all_equal
  assert cf.types.at_clients is cf.type_at_clients


def test_type_misuse_names_the_line():
  message = _error(lambda: cf.TensorType('float', [2]))  # line:bad_dtype
  assert message.startswith('TensorType at ' + _where('bad_dtype'))
  message = _error(lambda: cf.TensorType(tf.float32, 'x'))  # line:bad_shape
  assert message.startswith('TensorType at ' + _where('bad_shape'))
  message = _error(lambda: cf.type_at_clients(3.0))  # line:bad_member
  assert message.startswith('clients type at ' + _where('bad_member'))
  assert 'tf.TensorSpec' in message and 'found 3.0' in message
  message = _error(lambda: cf.StructType([('a', F), I]))  # line:mixed_names
  assert message.startswith('StructType at ' + _where('mixed_names'))
  message = _error(lambda: cf.StructWithPythonType([F], set))  # line:set
  assert message.startswith('StructWithPythonType at ' + _where('set'))
  message = _error(lambda: cf.SequenceType(cf.SequenceType(F)))  # line:seqseq
  assert message.startswith('SequenceType at ' + _where('seqseq'))
  message = _error(lambda: cf.FederatedType(F, 'clients'))  # line:placement
  assert message.startswith('FederatedType at ' + _where('placement'))
  message = _error(lambda: cf.type_at_server(cf.type_at_clients(F)))  # line:2x
  assert 'placed type' in message and _where('2x') in message


def test_tff_types_go_wherever_types_go():

  @cf.tf_computation(tf.float32, cf.TensorType(tf.float32, [2]))
  def scale(s, x):
    return s * x

  assert scale.parameter_specs == (F, F2)
  assert cf.tf_computation(lambda x: x, np.float32).parameter_specs == (F,)

  @cf.federated_computation(cf.type_at_server(tf.float32),
                            cf.type_at_clients((tf.float32, [2])))
  def scaled(s, x):
    return cf.federated_sum(cf.federated_map(scale, (
        cf.federated_broadcast(s), x)))

  assert float(tf.reduce_sum(scaled(2.0, [[1.0, 2.0], [3.0, 4.0]]))) == 20.0


def test_sequence_type_is_the_client_dataset():
  data_type = cf.SequenceType(cf.TensorType(tf.float32, [784]))

  @cf.tf_computation(data_type)
  def total(dataset):
    return dataset.reduce(0.0, lambda acc, x: acc + tf.reduce_sum(x))

  @cf.federated_computation(cf.type_at_server(tf.float32),
                            cf.type_at_clients(data_type))
  def next_fn(state, data):
    return state, cf.federated_sum(cf.federated_map(total, data))

  process = cf.IterativeProcess(_zero_state, next_fn)
  form = cf.compile(process)
  assert form.client_data_spec == data_type
  data = [tf.data.Dataset.from_tensor_slices(np.ones([n, 784], np.float32))
          for n in (1, 2)]
  _, metrics = _both_ways(process, tf.constant(0.0), data)
  assert float(metrics) == 3 * 784.0
  wrong = [tf.data.Dataset.from_tensor_slices(np.ones([1, 10], np.float32))]
  with pytest.raises(cf.FederatedError, match='float32\\[784\\]\\*'):
    cf.run_round(form, 0.0, wrong)


def test_federated_computation_on_unplaced_values_runs_at_one_place():
  # As in TFF's tutorials: a local training loop written as a federated
  # computation on unplaced values (a model and one client's batches), with
  # another such computation as the reduction's op, mapped at the clients.
  model_type = cf.TensorType(tf.float32, [2])
  batches = cf.SequenceType(cf.TensorType(tf.float32, [None, 2]))

  @cf.federated_computation(model_type, tf.float32, batches)
  def local_train(model, rate, all_batches):

    @cf.federated_computation(model_type, batches.element_spec)
    def batch_fn(m, batch):
      return m + rate * tf.reduce_mean(batch - m, axis=0)

    return cf.sequence_reduce(all_batches, model, batch_fn)

  assert isinstance(local_train, type(_three))  # A tf_computation.

  @cf.federated_computation(cf.type_at_server(model_type),
                            cf.type_at_clients(batches))
  def next_fn(model, data):
    rate = cf.federated_broadcast(cf.federated_value(0.5, cf.SERVER))
    trained = cf.federated_map(local_train, [cf.federated_broadcast(model),
                                             rate, data])
    return cf.federated_mean(trained), cf.federated_sum(
        cf.federated_eval(cf.tf_computation(lambda: 1), cf.CLIENTS))

  process = cf.IterativeProcess(cf.tf_computation(lambda: tf.zeros([2])),
                                next_fn)
  data = [tf.data.Dataset.from_tensor_slices(np.full([4, 2], v, np.float32))
          .batch(2) for v in (2.0, 4.0)]
  state, clients = _both_ways(process, tf.zeros([2]), data)
  # Each client: 0 -> 0.5 v -> 0.75 v; the mean of 1.5 and 3.0.
  np.testing.assert_allclose(state, [2.25, 2.25])
  assert int(clients) == 2


def test_federated_computation_types_are_all_placed_or_all_unplaced():
  message = _error(lambda: cf.federated_computation(  # line:mixed
      cf.type_at_server(tf.float32), tf.float32))
  assert message.startswith('federated_computation at ' + _where('mixed'))
  assert 'all placed or all unplaced' in message


# ----------------------------------------------------------------------------
# federated_eval


@cf.tf_computation
def _three():
  return tf.constant([3.0, 3.0])


def test_federated_eval_at_server_and_at_clients():

  @cf.federated_computation()
  def evaluated():
    return (cf.federated_eval(_three, cf.SERVER),
            cf.federated_eval(_three, cf.CLIENTS))

  at_server, at_clients = evaluated.result_types
  assert at_server == cf.server(F2)
  assert at_clients == cf.clients(F2) and not at_clients.all_equal
  assert str(at_clients) == '{float32[2]}@CLIENTS'


def test_federated_eval_at_clients_runs_in_work():

  @cf.tf_computation(F2, F2)
  def add(x, y):
    return x + y

  @cf.federated_computation(cf.server(F), cf.clients(F2))
  def next_fn(state, data):
    local = cf.federated_eval(_three, cf.CLIENTS)
    return state, (cf.federated_sum(cf.federated_map(add, (data, local))),
                   cf.federated_mean(local))

  process = cf.IterativeProcess(_zero_state, next_fn)
  _, (total, mean) = _both_ways(process, tf.constant(0.0),
                                [np.ones(2, np.float32)] * 3)
  np.testing.assert_array_equal(total, [12.0, 12.0])
  np.testing.assert_array_equal(mean, [3.0, 3.0])
  assert cf.compile(process).broadcast_bits == 0  # Nothing is sent.


def test_federated_eval_misuse():
  message = _trace_error(
      lambda: cf.federated_eval(_three(), cf.SERVER))  # line:eval_call
  assert message.startswith('federated_eval at ' + _where('eval_call'))
  assert 'without the call' in message
  message = _trace_error(
      lambda: cf.federated_eval(lambda: 1.0, cf.SERVER))  # line:eval_py
  assert message.startswith('federated_eval at ' + _where('eval_py'))
  assert 'Python function' in message
  message = _trace_error(
      lambda: cf.federated_eval(cf.tf_computation(  # line:eval_arg
          lambda x: x, F), cf.CLIENTS))
  assert 'must take no argument' in message
  message = _trace_error(
      lambda: cf.federated_eval(_three, 'SERVER'))  # line:eval_where
  assert message.startswith('federated_eval at ' + _where('eval_where'))


def test_federated_eval_of_an_impure_computation_is_refused():

  @cf.tf_computation
  def noise():
    return tf.random.uniform([2])  # line:eval_noise

  @cf.federated_computation(cf.server(F), cf.clients(F2))
  def next_fn(state, data):
    del data
    return state, cf.federated_sum(cf.federated_eval(noise, cf.CLIENTS))

  message = _error(lambda: cf.compile(cf.IterativeProcess(_zero_state,
                                                          next_fn)))
  assert _where('eval_noise') in message and 'stateless' in message


# ----------------------------------------------------------------------------
# initialize as a federated_computation


@cf.tf_computation
def _server_init():
  return tf.constant([1.0, 2.0])


@cf.tf_computation(F2, F2)
def _plus(x, y):
  return x + y


@cf.federated_computation(cf.type_at_server(F2), cf.type_at_clients(F2))
def _next_plus_mean(state, data):
  mean = cf.federated_mean(data)
  return cf.federated_map(_plus, (state, mean)), mean


@pytest.mark.parametrize('style', ['value_of_call', 'eval', 'apply'])
def test_federated_initialize_compiles(style):

  @cf.tf_computation(F2)
  def doubled(x):
    return 2.0 * x

  @cf.federated_computation
  def initialize_fn():
    if style == 'value_of_call':
      return cf.federated_value(_server_init(), cf.SERVER)
    if style == 'eval':
      return cf.federated_eval(_server_init, cf.SERVER)
    half = cf.federated_value(tf.constant([0.5, 1.0]), cf.SERVER)
    return cf.federated_apply(doubled, half)

  process = cf.IterativeProcess(initialize_fn, _next_plus_mean)
  assert process.initialize_graph is initialize_fn.trace()
  np.testing.assert_array_equal(process.initialize(), [1.0, 2.0])
  form = cf.compile(process)
  np.testing.assert_array_equal(form.initialize(), [1.0, 2.0])
  state, _ = _both_ways(process, form.initialize(),
                        [np.ones(2, np.float32), np.zeros(2, np.float32)])
  np.testing.assert_array_equal(state, [1.5, 2.5])


def test_measured_process_takes_a_federated_initialize():
  from canonical import templates  # pylint: disable=g-import-not-at-top

  @cf.federated_computation
  def initialize_fn():
    return cf.federated_eval(_server_init, cf.SERVER)

  block = templates.MeasuredProcess(initialize_fn, _next_plus_mean, F2)
  np.testing.assert_array_equal(block.initialize(), [1.0, 2.0])
  with pytest.raises(cf.FederatedError, match='initialize must be') as error:
    templates.MeasuredProcess(object(), _next_plus_mean, F2)
  assert '0x' not in str(error.value)


def test_federated_initialize_saves_and_loads(tmp_path):

  @cf.federated_computation
  def initialize_fn():
    return cf.federated_value(_server_init(), cf.SERVER)

  form = cf.compile(cf.IterativeProcess(initialize_fn, _next_plus_mean))
  loaded = cf.load(cf.save(form, str(tmp_path / 'form.pb')))
  np.testing.assert_array_equal(loaded.initialize(), [1.0, 2.0])


def test_federated_initialize_misuse():

  @cf.federated_computation
  def from_clients():
    return cf.federated_sum(cf.federated_value(  # line:init_clients
        tf.constant([1.0, 1.0]), cf.CLIENTS))

  message = _error(lambda: cf.IterativeProcess(  # line:init_process
      from_clients, _next_plus_mean))
  assert message.startswith('IterativeProcess at ' + _where('init_process'))
  assert "federated_computation 'from_clients'" in message
  assert 'federated_value at ' + _where('init_clients') in message
  assert 'before any client' in message

  @cf.federated_computation
  def at_clients():
    return cf.federated_value(tf.constant([1.0, 1.0]), cf.CLIENTS)

  message = _error(lambda: cf.IterativeProcess(at_clients, _next_plus_mean))
  assert 'placed at SERVER' in message

  @cf.federated_computation(cf.server(F2))
  def with_parameter(x):
    return x

  message = _error(lambda: cf.IterativeProcess(with_parameter,
                                               _next_plus_mean))
  assert 'must take no parameter' in message

  def plain_python():
    return tf.zeros([2])

  message = _error(lambda: cf.IterativeProcess(  # line:init_python
      plain_python, _next_plus_mean))
  assert message.startswith('IterativeProcess at ' + _where('init_python'))
  assert "Python function 'test_federated_initialize_misuse.<locals>." in (
      message)


def test_impure_federated_initialize_names_its_line():

  @cf.tf_computation
  def noisy_init():
    return tf.random.normal([2])  # line:init_noise

  @cf.federated_computation
  def initialize_fn():
    return cf.federated_eval(noisy_init, cf.SERVER)  # line:init_eval

  message = _error(lambda: cf.compile(cf.IterativeProcess(initialize_fn,
                                                          _next_plus_mean)))
  assert _where('init_noise') in message
  assert 'federated_eval at ' + _where('init_eval') in message
  assert 'in initialize' in message


def test_computations_are_named_not_printed_by_address():

  @cf.federated_computation
  def initialize_fn():
    return cf.federated_value(1.0, cf.SERVER)

  assert repr(initialize_fn) == '<federated_computation initialize_fn()>'
  message = _error(lambda: cf.IterativeProcess(_zero_state, _server_init))
  assert "next must be a federated_computation, got tf_computation " in message
  message = _trace_error(
      lambda d: cf.federated_map(initialize_fn, d),  # line:map_fc
      cf.clients(F))
  assert message.startswith('federated_map at ' + _where('map_fc'))
  assert "federated_computation 'initialize_fn' defined at" in message


def test_unplaced_results_must_be_placed():
  message = _trace_error(
      lambda d: cf.federated_sum(_server_init()),  # line:unplaced_sum
      cf.clients(F))
  assert message.startswith('federated_sum at ' + _where('unplaced_sum'))
  assert 'federated_value' in message
  # Returned to Python, an unplaced result is TFF's unplaced value.
  unplaced = cf.federated_computation()(_server_init)
  assert str(unplaced.type_signature) == '( -> float32[2])'
  np.testing.assert_array_equal(unplaced(), _server_init())


def test_tf_computation_on_constants_is_placed_by_federated_value():

  @cf.tf_computation(F, I)
  def fill(value, count):
    return tf.fill([count], value)

  @cf.federated_computation()
  def filled():
    return cf.federated_value(fill(2.5, 3), cf.SERVER)

  assert filled.result_types == cf.server(tf.TensorSpec([3], tf.float32))
  np.testing.assert_array_equal(filled(), [2.5, 2.5, 2.5])
  message = _trace_error(lambda: cf.federated_value(
      fill('a', 3), cf.SERVER))  # line:bad_constant
  assert _where('bad_constant') in message


# ----------------------------------------------------------------------------
# Sequences inside tf_computations


def test_sequence_intrinsics_on_datasets_inside_tf_computations():
  element = cf.TensorType(tf.float32, [2])

  @cf.tf_computation(element)
  def square(x):
    return x * x

  @cf.tf_computation(F, element)
  def add_sum(acc, x):
    return acc + tf.reduce_sum(x)

  @cf.tf_computation(cf.SequenceType(element))
  def stats(dataset):
    squares = cf.sequence_map(square, dataset)
    return (cf.sequence_sum(squares),
            cf.sequence_reduce(dataset, 0.0, add_sum),
            cf.sequence_reduce(dataset, 0, lambda n, _: n + 1),
            cf.sequence_sum(cf.sequence_map(lambda x: x[0], dataset)))

  dataset = tf.data.Dataset.from_tensor_slices([[1.0, 2.0], [3.0, 4.0]])
  squares, total, count, firsts = stats.invoke(dataset)
  np.testing.assert_array_equal(squares, [10.0, 20.0])
  assert (float(total), int(count), float(firsts)) == (10.0, 2, 4.0)
  assert not stats.impurities()
  # Eagerly too, and empty sequences sum to zeros.
  np.testing.assert_array_equal(cf.sequence_sum(dataset.take(0)), [0.0, 0.0])


def test_sequence_intrinsics_refuse_what_is_not_a_sequence():
  message = _error(lambda: cf.sequence_sum([1.0, 2.0]))  # line:seq_list
  assert message.startswith('sequence_sum at ' + _where('seq_list'))
  assert 'tf.data.Dataset' in message
  dataset = tf.data.Dataset.from_tensor_slices([[1, 2]])
  message = _error(lambda: cf.sequence_map(  # line:seq_elem
      cf.tf_computation(lambda x: x, F), dataset))
  assert message.startswith('sequence_map at ' + _where('seq_elem'))
  assert 'int32[2]' in message and 'float32.' in message
  batched = tf.data.Dataset.from_tensor_slices(np.ones([4], np.float32))
  message = _error(lambda: cf.sequence_sum(batched.batch(3)))  # line:batches
  assert message.startswith('sequence_sum at ' + _where('batches'))
  assert 'sequence_reduce' in message
  message = _error(lambda: cf.sequence_reduce(  # line:bad_zero
      dataset, 'zero', lambda a, x: a + x))
  assert message.startswith('sequence_reduce at ' + _where('bad_zero'))


# ----------------------------------------------------------------------------
# Sequences at the clients


ELEMENT = cf.TensorType(tf.float32, [2])
DATA = cf.type_at_clients(cf.SequenceType(ELEMENT))


@cf.tf_computation(ELEMENT)
def _norm(x):
  return tf.reduce_sum(x * x)


@cf.tf_computation(ELEMENT, ELEMENT)
def _add_elements(acc, x):
  return acc + x


@cf.tf_computation(I, ELEMENT)
def _count(n, x):
  del x
  return n + 1


def test_sequence_intrinsics_on_client_sequences():

  @cf.federated_computation(cf.type_at_server(ELEMENT), DATA)
  def next_fn(state, data):
    model = cf.federated_broadcast(state)
    totals = cf.sequence_reduce(data, model, _add_elements)
    counts = cf.sequence_reduce(data, 0, _count)
    norms = cf.sequence_sum(cf.sequence_map(_norm, data))
    mean = cf.federated_mean(totals, weight=counts)
    return mean, (cf.federated_sum(cf.sequence_sum(data)),
                  cf.federated_sum(norms), cf.federated_sum(counts))

  graph = next_fn.trace()
  kinds = {op.kind: op.output.type_signature for op in graph.ops}
  assert str(kinds['sequence_map']) == '{float32*}@CLIENTS'
  assert str(kinds['sequence_sum']) == '{float32[2]}@CLIENTS'
  process = cf.IterativeProcess(cf.tf_computation(lambda: tf.ones([2])),
                                next_fn)
  data = _datasets(1, 2, 3)
  state, (total, norms, count) = _both_ways(process, tf.ones([2]), data)
  rows = [np.asarray(list(d.as_numpy_iterator())) for d in data]
  weights = np.array([len(r) for r in rows], np.float32)
  means = np.array([r.sum(0) + 1.0 for r in rows])
  np.testing.assert_allclose(
      state, (means * weights[:, None]).sum(0) / weights.sum())
  np.testing.assert_allclose(total, sum(r.sum(0) for r in rows))
  np.testing.assert_allclose(norms, sum((r * r).sum() for r in rows))
  assert int(count) == 6


def test_client_sequences_save_and_load(tmp_path):

  @cf.federated_computation(cf.server(F), DATA)
  def next_fn(state, data):
    return state, cf.federated_sum(cf.sequence_sum(cf.sequence_map(_norm,
                                                                   data)))

  form = cf.compile(cf.IterativeProcess(_zero_state, next_fn))
  loaded = cf.load(cf.save(form, str(tmp_path / 'seq.pb')))
  data = _datasets(2, 3)
  assert_same(cf.run_round(loaded, 0.0, data), cf.run_round(form, 0.0, data),
              exact=True)


def test_sequence_intrinsics_misuse_at_the_clients():
  message = _trace_error(
      lambda d: cf.sequence_sum(d),  # line:fed_not_seq
      cf.clients(F2))
  assert message.startswith('sequence_sum at ' + _where('fed_not_seq'))
  assert 'not a dataset' in message
  message = _trace_error(
      lambda d: cf.sequence_sum(d),  # line:fed_pair
      cf.clients((cf.SequenceType(F), F)))
  assert 'Select the dataset first' in message
  message = _trace_error(
      lambda s, d: cf.sequence_reduce(d, s, _add_elements),  # line:fed_zero
      cf.server(F2), DATA)
  assert message.startswith('sequence_reduce at ' + _where('fed_zero'))
  assert 'federated_broadcast it first' in message
  message = _trace_error(
      lambda d: cf.sequence_map(lambda x: x, d),  # line:fed_lambda
      DATA)
  assert message.startswith('sequence_map at ' + _where('fed_lambda'))
  assert 'must be a tf_computation' in message
  message = _trace_error(
      lambda d: cf.sequence_reduce(d, 0.0, _add_elements),  # line:fed_acc
      DATA)
  assert message.startswith('sequence_reduce at ' + _where('fed_acc'))
  message = _trace_error(
      lambda d: cf.sequence_map(_count, d),  # line:fed_arity
      DATA)
  assert message.startswith('sequence_map at ' + _where('fed_arity'))
  message = _trace_error(
      lambda d: cf.sequence_sum(d),  # line:fed_batches
      cf.clients(cf.SequenceType(tf.TensorSpec([None, 2], tf.float32))))
  assert message.startswith('sequence_sum at ' + _where('fed_batches'))


# ----------------------------------------------------------------------------
# federated_mean: integer and float64 weights


@pytest.mark.parametrize('weight_dtype, total_dtype', [
    (tf.int32, tf.int64), (tf.int64, tf.int64), (tf.float64, tf.float64),
    (tf.float32, tf.float32), (tf.float16, tf.float16)])
def test_federated_mean_weight_dtypes(weight_dtype, total_dtype):
  weight_spec = tf.TensorSpec([], weight_dtype)

  @cf.federated_computation(cf.server(F), cf.clients((F2, weight_spec)))
  def next_fn(state, data):
    return state, cf.federated_mean(data[0], weight=data[1])

  process = cf.IterativeProcess(_zero_state, next_fn)
  form = cf.compile(process)
  assert form.accumulator_spec[0][1] == tf.TensorSpec([], total_dtype)
  values = np.array([[1.0, 2.0], [3.0, 5.0], [-1.0, 0.5]], np.float32)
  weights = np.array([1, 2, 5])
  data = [(v, tf.constant(w, weight_dtype)) for v, w in zip(values, weights)]
  _, mean = _both_ways(process, tf.constant(0.0), data)
  assert mean.dtype == tf.float32
  np.testing.assert_allclose(
      mean, (values * weights[:, None]).sum(0) / weights.sum(), rtol=1e-6)


def test_federated_mean_of_float64_values():
  # The weight is cast to float64 before it multiplies; the float32 weight's
  # total is cast to float64 for the division.
  @cf.federated_computation(cf.server(F), cf.clients((D64, F, tf.int64)))
  def next_fn(state, data):
    return state, (cf.federated_mean(data[0], weight=data[1]),
                   cf.federated_mean(data[0], weight=data[2]),
                   cf.federated_mean(data[0]))

  process = cf.IterativeProcess(_zero_state, next_fn)
  values = np.array([[0.1, 1e-9], [0.3, 2e-9]], np.float64)
  data = [(v, np.float32(w), np.int64(w)) for v, w in zip(values, (1, 3))]
  _, (by_float, by_int, plain) = _both_ways(process, tf.constant(0.0), data)
  expected = (values[0] + 3 * values[1]) / 4
  for mean in (by_float, by_int):
    assert mean.dtype == tf.float64
    np.testing.assert_allclose(mean, expected, rtol=1e-15)
  np.testing.assert_allclose(plain, values.mean(0), rtol=1e-15)


@pytest.mark.parametrize('spec', [tf.TensorSpec([], tf.bool),
                                  tf.TensorSpec([], tf.uint64),
                                  tf.TensorSpec([1], tf.float32)])
def test_federated_mean_refuses_other_weights(spec):
  message = _trace_error(
      lambda d: cf.federated_mean(d[0], weight=d[1]),  # line:weight
      cf.clients((F2, spec)))
  assert message.startswith('federated_mean at ' + _where('weight'))
  assert 'float or integer' in message


# ----------------------------------------------------------------------------
# Decorator misuse


def test_federated_computation_types_must_fit_the_parameters():

  def two(state, data):
    return state, data

  message = _error(lambda: cf.federated_computation(two))  # line:bare_two
  assert message.startswith("federated_computation 'two' at " +
                            _where('bare_two'))
  assert 'one type per parameter' in message


def test_unplaced_results_in_a_structure_of_constants():
  message = _trace_error(lambda: cf.federated_value(
      (_server_init(), 1.0), cf.SERVER))  # line:unplaced_in_structure
  assert 'federated_zip' in message
  assert _where('unplaced_in_structure') in message
