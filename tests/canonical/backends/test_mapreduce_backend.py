"""`tff.backends.mapreduce` under TFF 0.87's names, used as TFF's docs use
it: the round and its initialize given separately.

Type strings and values were printed by TensorFlow Federated 0.87 for the
same programs, except where a comment says how ours differs."""

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff

mapreduce = tff.backends.mapreduce
F = np.float32


@tff.tensorflow.computation
def init():
  return np.float32(1.0)


@tff.federated_computation
def initialize():
  return tff.federated_eval(init, tff.SERVER)


@tff.tensorflow.computation(np.float32, np.float32)
def scale(x, s):
  return x * s


@tff.federated_computation(tff.FederatedType(np.float32, tff.SERVER),
                           tff.FederatedType(np.float32, tff.CLIENTS))
def next_round(state, data):
  s = tff.federated_broadcast(state)
  scaled = tff.federated_map(scale, (data, s))
  return tff.federated_sum(scaled), tff.federated_mean(data)


DATA = [np.float32(1.0), np.float32(2.0)]


def test_the_round_and_its_initialize_lower_separately_and_run():
  mrf = mapreduce.get_map_reduce_form_for_computation(next_round)
  assert isinstance(mrf, mapreduce.MapReduceForm)
  assert isinstance(mrf, mapreduce.CanonicalForm)  # The older name.
  # As TFF 0.87 names them: the round's parameters.
  assert str(mrf.type_signature) == (
      '(<state=float32@SERVER,data={float32}@CLIENTS> -> '
      '<float32@SERVER,float32@SERVER>)')
  assert (mrf.server_state_label, mrf.client_data_label) == ('state', 'data')
  for name in ('prepare', 'work', 'zero', 'accumulate', 'merge', 'report',
               'update'):
    assert isinstance(getattr(mrf, name), tff.Piece), name
  assert mrf.prepare.signature() == '(float32) -> <float32>'
  assert not mrf.securely_aggregates_tensors
  assert mrf.secure_sum_bitwidth() == ()
  assert mrf.secure_sum_max_input() == ()
  assert mrf.secure_modular_sum_modulus() == ()

  initialize_comp = mapreduce.get_state_initialization_computation(initialize)
  assert str(initialize_comp.type_signature) == '( -> float32)'
  state = initialize_comp()
  assert state == 1.0
  state, metrics = tff.run_round(mrf, state, DATA)
  assert (state, metrics) == (3.0, 1.5)  # TFF 0.87: next_round(1.0, DATA)
  assert tuple(next_round(np.float32(1.0), DATA)) == (3.0, 1.5)


def test_a_form_of_the_round_alone_starts_from_zeros_and_says_so():
  mrf = mapreduce.get_map_reduce_form_for_computation(next_round)
  assert mrf.initialize() == 0.0
  assert 'initialize gives zeros of S' in mrf.summary(print_fn=None)


def test_a_whole_process_gives_the_form_with_its_initialize():
  process = tff.templates.IterativeProcess(initialize, next_round)
  mrf = mapreduce.get_map_reduce_form_for_computation(process)
  assert mrf.initialize() == 1.0
  assert mrf.description == ''
  # A process's initialize is the federated one it was given.
  assert mapreduce.get_state_initialization_computation(
      process.initialize)() == 1.0


def test_zeros_of_a_structured_state_with_an_unknown_dimension():

  @tff.federated_computation(
      tff.FederatedType(((np.float32, [None]), np.int32), tff.SERVER),
      tff.FederatedType(np.float32, tff.CLIENTS))
  def grow(state, data):
    return state, tff.federated_sum(data)

  mrf = mapreduce.get_map_reduce_form_for_computation(grow)
  vector, count = mrf.initialize()
  assert vector.shape == (0,) and count == 0
  state, total = tff.run_round(mrf, (tf.constant([1.0, 2.0]),
                                     tf.constant(3)), DATA)
  np.testing.assert_allclose(state[0], [1.0, 2.0])
  assert total == 3.0


def test_secure_sums_give_tff_parameter_functions():

  @tff.federated_computation(tff.FederatedType(np.float32, tff.SERVER),
                             tff.FederatedType(np.int32, tff.CLIENTS))
  def secure(state, data):
    return state, tff.federated_secure_sum_bitwidth(data, 8)

  mrf = mapreduce.get_map_reduce_form_for_computation(secure)
  assert mrf.securely_aggregates_tensors
  assert mrf.secure_sum_bitwidth() == (8,)  # As TFF 0.87 gives.
  assert mrf.secure_sum_max_input() == ()
  _, total = tff.run_round(mrf, np.float32(0.0),
                           [np.int32(3), np.int32(4), np.int32(5)],
                           secure_seed=1)
  assert total == 12


def test_a_parameter_from_the_server_state_needs_the_state():

  @tff.federated_computation(
      tff.FederatedType((np.float32, np.int32), tff.SERVER),
      tff.FederatedType(np.int32, tff.CLIENTS))
  def secure(state, data):
    return state, tff.federated_secure_sum(data, state[1])

  mrf = mapreduce.get_map_reduce_form_for_computation(secure)
  with pytest.raises(tff.FormError, match='secure sum 0 .*pass the state'):
    mrf.secure_sum_max_input()
  assert mrf.secure_sum_max_input((np.float32(0.0), np.int32(9))) == (9,)


def test_a_saved_form_loads_with_tffs_field_names(tmp_path):
  mrf = mapreduce.get_map_reduce_form_for_computation(next_round)
  loaded = tff.load(tff.save(mrf, str(tmp_path / 'round.pb')))
  assert isinstance(loaded, mapreduce.MapReduceForm)
  assert str(loaded.type_signature) == str(mrf.type_signature)
  assert loaded.description == mrf.description
  assert tff.run_round(loaded, np.float32(1.0), DATA)[0] == 3.0


def test_a_learning_process_round_lowers_as_in_tffs_docs():

  def model_fn():
    keras_model = tf.keras.Sequential(
        [tf.keras.Input(shape=(2,)), tf.keras.layers.Dense(1)])
    return tff.learning.models.functional_model_from_keras(
        keras_model, loss_fn=tf.keras.losses.MeanSquaredError(),
        input_spec=(tf.TensorSpec([None, 2], tf.float32),
                    tf.TensorSpec([None, 1], tf.float32)))

  process = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1))
  mrf = mapreduce.get_map_reduce_form_for_computation(process.next)
  state = mapreduce.get_state_initialization_computation(
      process.initialize)()
  data = [tf.data.Dataset.from_tensor_slices(
      (np.full([4, 2], c, F), np.full([4, 1], 1.0, F))).batch(2)
          for c in (1.0, 2.0)]
  state, metrics = tff.run_round(mrf, state, data)
  expected = process.next(process.initialize(), data)
  for actual, wanted in zip(tf.nest.flatten(state),
                            tf.nest.flatten(expected.state)):
    np.testing.assert_allclose(actual, wanted, rtol=1e-5)
  tf.nest.assert_same_structure(metrics, expected.metrics)
  for actual, wanted in zip(tf.nest.flatten(metrics),
                            tf.nest.flatten(expected.metrics)):
    np.testing.assert_allclose(actual, wanted, rtol=1e-5)


# Why a computation has no form.


def test_compatibility_is_checked_and_the_trace_returned():
  graph = mapreduce.check_computation_compatible_with_map_reduce_form(
      next_round)
  assert [op.kind for op in graph.ops] == [
      'federated_broadcast', 'federated_zip', 'federated_map',
      'federated_sum', 'federated_mean']


def test_a_round_that_aggregates_twice_is_refused_naming_both_lines():

  @tff.federated_computation(tff.FederatedType(np.float32, tff.SERVER),
                             tff.FederatedType(np.float32, tff.CLIENTS))
  def two_phase(state, data):
    total = tff.federated_sum(data)
    again = tff.federated_broadcast(total)
    return total, tff.federated_sum(tff.federated_map(scale, (data, again)))

  with pytest.raises(tff.FederatedError,
                     match=r'federated_sum at test_mapreduce_backend.py:\d+ '
                     r'.* depends on federated_sum at test_mapreduce_backend'
                     r'.py:\d+ \(total = .* through federated_broadcast'):
    mapreduce.check_computation_compatible_with_map_reduce_form(two_phase)
  with pytest.raises(tff.FederatedError, match='broadcasts once'):
    mapreduce.get_map_reduce_form_for_computation(two_phase)


def test_an_impure_computation_is_refused():
  noisy = tff.tensorflow.computation(
      lambda x: x + tf.random.uniform([]), np.float32)

  @tff.federated_computation(tff.FederatedType(np.float32, tff.SERVER),
                             tff.FederatedType(np.float32, tff.CLIENTS))
  def noisy_round(state, data):
    return state, tff.federated_sum(tff.federated_map(noisy, data))

  with pytest.raises(tff.FederatedError, match='is not pure'):
    mapreduce.check_computation_compatible_with_map_reduce_form(noisy_round)


@pytest.mark.parametrize('parameters, result, why', [
    ([tff.FederatedType(F, tff.SERVER)], 'pair',
     'must take two arguments, the server state at SERVER and the client '
     r'data at CLIENTS, .*its parameters are float32@SERVER'),
    ([tff.FederatedType(F, tff.SERVER), tff.FederatedType(F, tff.CLIENTS)],
     'state only', r'must return two values .*it returns float32@SERVER'),
    ([tff.FederatedType(F, tff.SERVER), tff.FederatedType(F, tff.CLIENTS)],
     'clients', r'returns <.*: \{float32\}@CLIENTS> in the server output'),
    ([tff.FederatedType(F, tff.SERVER), tff.FederatedType(F, tff.CLIENTS)],
     'wrong state', r'returns a new server state of type int32, but takes '
     'the state as float32@SERVER'),
])
def test_a_computation_of_another_shape_is_refused(parameters, result, why):
  as_int = tff.tensorflow.computation(lambda x: tf.cast(x, tf.int32),
                                      np.float32)

  def body(state, data=None):
    if result == 'pair':
      return state, state
    if result == 'state only':
      return tff.federated_sum(data)
    if result == 'clients':
      return state, data
    return tff.federated_map(as_int, state), tff.federated_sum(data)

  comp = tff.federated_computation(body, *parameters)
  for check in (mapreduce.get_map_reduce_form_for_computation,
                mapreduce.check_computation_compatible_with_map_reduce_form):
    with pytest.raises(tff.FederatedError, match=why):
      check(comp)


def test_what_is_not_a_computation_or_a_tff_internal_is_refused():
  with pytest.raises(tff.FederatedError,
                     match='expected a federated_computation'):
    mapreduce.get_map_reduce_form_for_computation(scale)
  with pytest.raises(tff.errors.InvalidValueError,
                     match='tff_internal_preprocessing transforms'):
    mapreduce.get_map_reduce_form_for_computation(
        next_round, tff_internal_preprocessing=lambda bb: bb)
  with pytest.raises(tff.errors.InvalidTypeError, match='grappler_config'):
    mapreduce.get_map_reduce_form_for_computation(next_round, 'aggressive')
  # A Grappler configuration is accepted (TensorFlow optimizes the pieces).
  mrf = mapreduce.get_map_reduce_form_for_computation(
      next_round, tf.compat.v1.ConfigProto())
  assert tff.run_round(mrf, np.float32(1.0), DATA)[0] == 3.0


def test_an_initialize_must_make_the_state_at_the_server():
  with pytest.raises(tff.FederatedError,
                     match=r"'next_round' .* has type \(<state=float32@SERVER"
                     r'.*initialize must take no parameter'):
    mapreduce.get_state_initialization_computation(next_round)

  @tff.federated_computation
  def at_clients():
    return tff.federated_eval(init, tff.CLIENTS)

  with pytest.raises(tff.FederatedError, match='return the server state '
                     'placed at SERVER'):
    mapreduce.get_state_initialization_computation(at_clients)
  # A tf_computation with no parameter makes the state already (TFF 0.87
  # takes only the federated one).
  assert mapreduce.get_state_initialization_computation(init) is init


# TFF's BroadcastForm: a computation that only broadcasts.


@tff.tensorflow.computation(np.float32)
def plus_one(x):
  return x + 1.0


@tff.federated_computation(tff.FederatedType(np.float32, tff.SERVER),
                           tff.FederatedType(np.float32, tff.CLIENTS))
def scaled_by_context(server_data, client_data):
  context = tff.federated_broadcast(tff.federated_map(plus_one, server_data))
  return tff.federated_map(scale, (client_data, context))


def test_a_computation_that_only_broadcasts_has_a_broadcast_form():
  form = mapreduce.get_broadcast_form_for_computation(scaled_by_context)
  assert isinstance(form, mapreduce.BroadcastForm)
  lines = []
  form.summary(print_fn=lines.append)
  # TFF 0.87 prints client_processing's parameter unnamed: <<float32>,float32>.
  assert lines == [
      'compute_server_context: (float32 -> <float32>)',
      'client_processing     : (<context=<float32>,data=float32> -> float32)']
  assert (form.server_data_label, form.client_data_label) == (
      'server_data', 'client_data')
  context = form.compute_server_context(np.float32(2.0))
  assert context == (3.0,)  # TFF 0.87: (3.0,), then 15.0
  assert form.client_processing(context, np.float32(5.0)) == 15.0
  assert list(scaled_by_context(np.float32(2.0),
                                [np.float32(5.0), np.float32(1.0)])) == [
                                    15.0, 3.0]


def test_a_computation_that_aggregates_has_no_broadcast_form():

  @tff.federated_computation(tff.FederatedType(np.float32, tff.SERVER),
                             tff.FederatedType(np.float32, tff.CLIENTS))
  def aggregates(server_data, client_data):
    total = tff.federated_sum(client_data)
    return tff.federated_map(scale, (client_data,
                                     tff.federated_broadcast(total)))

  with pytest.raises(tff.FederatedError,
                     match=r'aggregates \(federated_sum at test_mapreduce_'
                     r'backend.py:\d+ .*get_map_reduce_form_for_computation'):
    mapreduce.get_broadcast_form_for_computation(aggregates)
  with pytest.raises(tff.FederatedError, match='must return a value placed '
                     'at CLIENTS'):
    mapreduce.get_broadcast_form_for_computation(next_round)


def test_a_round_keeping_client_state_compiles_from_its_process():

  @tff.tensorflow.computation
  def no_count():
    return tf.constant(0)

  add_one = tff.tensorflow.computation(lambda c: c + 1, np.int32)

  @tff.federated_computation(tff.FederatedType(np.float32, tff.SERVER),
                             tff.FederatedType(np.float32, tff.CLIENTS),
                             tff.FederatedType(np.int32, tff.CLIENTS))
  def counting(state, data, count):
    return state, tff.federated_sum(data), tff.federated_map(add_one, count)

  with pytest.raises(tff.FederatedError,
                     match='client state compiles from its IterativeProcess'):
    mapreduce.get_map_reduce_form_for_computation(counting)
  process = tff.templates.IterativeProcess(
      init, counting, client_state_initializer=no_count)
  mrf = mapreduce.get_map_reduce_form_for_computation(process)
  assert str(mrf.type_signature) == (
      '(<state=float32@SERVER,data={float32}@CLIENTS,count={int32}@CLIENTS> '
      '-> <float32@SERVER,float32@SERVER,{int32}@CLIENTS>)')
  _, total, counts = tff.run_round(mrf, np.float32(1.0), DATA)
  assert total == 3.0 and list(counts) == [1, 1]
