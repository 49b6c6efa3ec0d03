"""TFF 0.87's computations and types, written as its tutorials write them.

The expected type strings and values were printed by TensorFlow Federated
0.87 itself for the same programs."""

import collections

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff


def test_federated_computation_types_print_as_tff_prints_them():

  @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
  def get_average_temperature(sensor_readings):
    return tff.federated_mean(sensor_readings)

  assert str(get_average_temperature.type_signature) == (
      '({float32}@CLIENTS -> float32@SERVER)')
  assert str(get_average_temperature.type_signature.parameter) == (
      '{float32}@CLIENTS')
  assert str(get_average_temperature.type_signature.result) == (
      'float32@SERVER')
  result = get_average_temperature([68.5, 70.3, 69.8])
  assert isinstance(result, np.float32)  # numpy back, as TFF 0.87 gives
  assert result == pytest.approx(69.53333)

  @tff.federated_computation(tff.FederatedType(np.float32, tff.SERVER),
                             tff.FederatedType(np.float32, tff.CLIENTS))
  def broadcast_and_sum(a, b):
    return tff.federated_broadcast(a), tff.federated_sum(b)

  assert str(broadcast_and_sum.type_signature) == (
      '(<a=float32@SERVER,b={float32}@CLIENTS> -> '
      '<float32@CLIENTS,float32@SERVER>)')


def test_tensorflow_computation_types_print_as_tff_prints_them():

  @tff.tensorflow.computation(tff.SequenceType(np.float32))
  def total(ds):
    return ds.reduce(0.0, lambda a, b: a + b)

  @tff.tensorflow.computation((np.float32, (2,)))
  def identity(x):
    return x

  @tff.tensorflow.computation
  def no_parameter():
    return tf.constant([1, 2], tf.int32)

  assert str(total.type_signature) == '(float32* -> float32)'
  assert str(identity.type_signature) == '(float32[2] -> float32[2])'
  assert str(no_parameter.type_signature) == '( -> int32[2])'
  assert no_parameter.type_signature.parameter is None
  assert total(tf.data.Dataset.from_tensor_slices([1.0, 2.5])) == 3.5


def test_struct_types_keep_their_order_and_names():
  t = tff.to_type({'x': tff.SequenceType(np.int32), 'w': np.float32})
  assert str(tff.FederatedType(t, tff.CLIENTS)) == '{<x=int32*,w=float32>}@CLIENTS'
  ordered = tff.to_type(collections.OrderedDict(x=np.int32, w=np.float32))
  # As in TFF 0.87: not identical (one has no Python container), equivalent.
  struct = tff.types.StructType([('x', np.int32), ('w', np.float32)])
  assert struct != ordered and struct.is_equivalent_to(ordered)
  assert str(tff.FederatedType(ordered, tff.SERVER)) == '<x=int32,w=float32>@SERVER'


def test_an_untyped_computation_is_typed_by_each_use():

  @tff.tensorflow.computation
  def add(x, y):
    return x + y

  assert add(1, 2) == 3 and isinstance(add(1, 2), np.int32)
  assert add(1.0, 2.5) == 3.5 and isinstance(add(1.0, 2.5), np.float32)
  with pytest.raises(AttributeError):
    add.type_signature  # pylint: disable=pointless-statement

  @tff.tensorflow.computation
  def double(a):
    return a * 2.0

  @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
  def aggregate(values):
    return tff.federated_aggregate(values, 0.0, add, add, double)

  assert str(aggregate.type_signature) == '({float32}@CLIENTS -> float32@SERVER)'
  assert aggregate([1.0, 2.0, 3.0]) == 12.0

  @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
  def add_half_on_clients(x):
    return tff.federated_map(tff.tensorflow.computation(lambda t: t + 0.5), x)

  assert str(add_half_on_clients.type_signature) == (
      '({float32}@CLIENTS -> {float32}@CLIENTS)')
  assert add_half_on_clients([1.0, 2.0]) == [1.5, 2.5]


def test_an_untyped_computation_spreads_a_struct_over_its_parameters():

  @tff.tensorflow.computation
  def scale(x, s):
    return x * s

  @tff.federated_computation(tff.FederatedType(np.float32, tff.SERVER),
                             tff.FederatedType(np.float32, tff.CLIENTS))
  def scaled_sum(s, data):
    return tff.federated_sum(tff.federated_map(
        scale, (data, tff.federated_broadcast(s))))

  assert scaled_sum(2.0, [1.0, 3.0]) == 8.0
  process = tff.IterativeProcess(
      tff.tensorflow.computation(lambda: tf.constant(2.0)),
      tff.federated_computation(
          lambda s, d: (scaled_sum(s, d), tff.federated_sum(d)),
          tff.FederatedType(np.float32, tff.SERVER),
          tff.FederatedType(np.float32, tff.CLIENTS)))
  form = tff.compile(process)  # The typed use lowers like a typed one.
  state, metrics = tff.run_round(form, form.initialize(), [1.0, 3.0])
  assert (state, metrics) == (8.0, 4.0)


def test_an_untyped_computation_that_cannot_take_the_value_is_named():

  @tff.tensorflow.computation
  def three(a, b, c):
    return a + b + c

  @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
  def bad(x):
    return tff.federated_map(three, x)

  with pytest.raises(tff.FederatedError, match=r"'three'.*3 parameters.*"
                     r'float32'):
    bad.type_signature  # pylint: disable=pointless-statement  # Traces.


def test_tff_types_helpers():
  spec = tff.types.tensorflow_to_type(
      (tf.TensorSpec([None, 2], tf.float32), tf.TensorSpec([], tf.int64)))
  # TFF 0.87: `<float32[?,2],int64>`, and StructType(t) is t without names
  # or container, so not identical to it.
  assert str(spec) == '<float32[?,2],int64>'
  assert tff.types.StructType(spec) != spec
  assert str(tff.types.StructType(spec)) == str(spec)
  assert tff.types.is_structure_of_floats(tff.to_type((np.float32, np.float64)))
  assert not tff.types.is_structure_of_floats(tff.to_type((np.float32,
                                                           np.int32)))
  assert tff.types.is_structure_of_integers(
      tff.FederatedType((np.int32, np.int64), tff.CLIENTS))
  assert not tff.types.is_structure_of_tensors(tff.SequenceType(np.int32))
  assert tff.types.type_to_tf_tensor_specs(spec) == spec


def test_a_federated_computation_may_return_constants_as_tff_allows():

  @tff.federated_computation
  def hello_world():
    return 'Hello, World!'

  assert str(hello_world.type_signature) == '( -> str)'
  assert hello_world() == b'Hello, World!'

  @tff.tensorflow.computation
  def two():
    return np.float32(2.0)

  @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
  def mean_and_constants(values):
    return tff.federated_mean(values), two(), 3

  assert str(mean_and_constants.type_signature) == (
      '({float32}@CLIENTS -> <float32@SERVER,float32,int32>)')
  assert mean_and_constants([1.0, 2.0]) == (1.5, 2.0, 3)


def test_a_federated_computation_returning_an_object_is_named():

  @tff.federated_computation
  def returns_a_function():
    return print

  with pytest.raises(tff.FederatedError, match='returns_a_function.*'
                     'federated values or constants'):
    returns_a_function()


def test_python_lists_stand_for_sequences_as_tff_accepts():

  @tff.tensorflow.computation(tff.SequenceType(np.float32))
  def local_average(temperatures):
    total, count = temperatures.reduce(
        (0.0, 0), lambda acc, t: (acc[0] + t, acc[1] + 1))
    return total / tf.cast(count, tf.float32)

  @tff.federated_computation(
      tff.FederatedType(tff.SequenceType(np.float32), tff.CLIENTS))
  def global_average(readings):
    return tff.federated_mean(tff.federated_map(local_average, readings))

  assert local_average([68.0, 70.0]) == 69.0
  assert global_average([[68.0, 70.0], [71.0], [68.0, 72.0, 70.0]]) == 70.0

  @tff.tensorflow.computation(tff.SequenceType(
      collections.OrderedDict(x=np.float32, y=np.int32)))
  def count(data):
    return data.reduce(0, lambda n, _: n + 1)

  assert count([{'x': 1.0, 'y': 2}, {'x': 3.0, 'y': 4}]) == 2
  assert count([]) == 0


def test_a_seeded_shuffle_gives_its_first_order_at_every_call_as_in_tff():
  # TFF 0.87 printed these orders: eager iterations go on shuffling, while
  # every call iterates a fresh copy (the first order), and calls do not
  # move the user's dataset on.
  dataset = tf.data.Dataset.range(8).shuffle(8, seed=1).batch(4)
  eager = [b.numpy().tolist() for b in dataset]
  assert eager == [[0, 1, 3, 6], [5, 2, 7, 4]]
  first = [0, 1, 3, 6, 5, 2, 7, 4]

  @tff.tensorflow.computation(tff.SequenceType(tff.TensorType(np.int64,
                                                              [None])))
  def order(data):
    return data.reduce(tf.zeros([0], tf.int64),
                       lambda acc, b: tf.concat([acc, b], 0))

  @tff.federated_computation(tff.FederatedType(
      tff.SequenceType(tff.TensorType(np.int64, [None])), tff.CLIENTS))
  def orders(data):
    return tff.federated_map(order, data)

  assert order(dataset).tolist() == order(dataset).tolist() == first
  assert [o.tolist() for o in orders([dataset, dataset])] == [first, first]
  assert [o.tolist() for o in orders([dataset])] == [first]
  assert [b.numpy().tolist() for b in dataset] == [[2, 1, 3, 6],
                                                    [0, 4, 7, 5]]
  # A Python generator's state is outside TensorFlow: iterated as it is.
  generated = tf.data.Dataset.from_generator(
      lambda: iter(range(8)), output_signature=tf.TensorSpec(
          [], tf.int64)).shuffle(8, seed=1).batch(4)
  assert sorted(order(generated).tolist()) == list(range(8))


def test_parameters_are_named_and_numbered_and_python_numbers_fit_them():

  @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS),
                             tff.FederatedType(np.float32, tff.CLIENTS))
  def weighted_mean(values, weights):
    return tff.federated_mean(values, weights)

  parameter = weighted_mean.type_signature.parameter
  assert str(parameter[0]) == str(parameter['values']) == '{float32}@CLIENTS'
  assert weighted_mean([1.0, 4.0], [3.0, 1.0]) == 1.75


def test_a_round_returning_an_unplaced_constant_is_named():

  @tff.federated_computation(tff.FederatedType(np.float32, tff.SERVER),
                             tff.FederatedType(np.float32, tff.CLIENTS))
  def next_fn(state, data):
    del data
    return state, 3

  with pytest.raises(tff.FederatedError, match=r"next_fn.*constant 3.*"
                     'what a round returns must be placed'):
    tff.IterativeProcess(tff.tensorflow.computation(lambda: np.float32(0)),
                         next_fn)


class _Weights(collections.namedtuple('_Weights', 'trainable non_trainable')):
  pass


class _State(collections.namedtuple('_State', 'weights lr')):
  pass


def test_named_parts_bind_by_name_whatever_container_holds_them():
  scalar = tf.TensorSpec([], tf.float32)

  @tff.tensorflow.computation(_State(_Weights(scalar, scalar), scalar))
  def parts(state):
    return state.weights.trainable, state.weights.non_trainable, state.lr

  as_dicts = collections.OrderedDict(
      weights=collections.OrderedDict(trainable=1.0, non_trainable=2.0),
      lr=3.0)
  assert parts(as_dicts) == (1.0, 2.0, 3.0)  # Not sorted keys' (3, 2, 1).
  assert parts({'lr': 3.0, 'weights': {'non_trainable': 2.0,
                                       'trainable': 1.0}}) == (1.0, 2.0, 3.0)
  assert parts(((1.0, 2.0), 3.0)) == (1.0, 2.0, 3.0)  # By position.


def test_a_federated_computation_binds_named_parts_by_name_too():
  scalar = tf.TensorSpec([], tf.float32)

  @tff.federated_computation(
      tff.FederatedType(_State(_Weights(scalar, scalar), scalar), tff.SERVER))
  def learning_rate_of(state):
    return tff.federated_map(
        tff.tensorflow.computation(lambda s: s.lr,
                                   _State(_Weights(scalar, scalar), scalar)),
        state)

  as_dicts = collections.OrderedDict(
      weights=collections.OrderedDict(trainable=1.0, non_trainable=2.0),
      lr=3.0)
  assert learning_rate_of(as_dicts) == 3.0


def test_computations_chained_on_unplaced_results_in_a_federated_body():

  @tff.tensorflow.computation
  def start():
    return tf.constant(3, tf.int32), tf.constant(0.5, tf.float32)

  @tff.tensorflow.computation
  def step(count, scale):
    return count + 1, scale * 2.0

  @tff.federated_computation
  def run():
    count, scale = start()  # Unplaced results unpack...
    count, scale = step(count, scale)  # ...and go to the next call.
    twice = step(*step(count, scale))
    return count, twice[1], tff.federated_value(scale, tff.SERVER)

  count, scale, placed = run()  # TFF 0.87 gives these, and this type.
  assert (count, scale, placed) == (4, 4.0, 1.0)
  assert str(run.type_signature) == '( -> <int32,float32,float32@SERVER>)'

  @tff.federated_computation
  def past_the_end():
    return start()[2]

  with pytest.raises(tff.FederatedError, match='has no element 2'):
    past_the_end()
