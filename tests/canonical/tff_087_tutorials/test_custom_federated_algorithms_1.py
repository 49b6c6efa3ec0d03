"""TFF 0.87's "Custom Federated Algorithms, Part 1: Introduction to the
Federated Core", its programs written as a TFF user writes them, with only
the import line changed. Values are the ones TFF 0.87 prints."""

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff


def test_federated_types_and_placements():
  federated_float_on_clients = tff.FederatedType(np.float32, tff.CLIENTS)
  assert str(federated_float_on_clients.member) == str(
      tff.TensorType(np.float32))
  assert federated_float_on_clients.placement is tff.CLIENTS
  assert str(federated_float_on_clients) == '{float32}@CLIENTS'
  assert not federated_float_on_clients.all_equal
  assert str(tff.FederatedType(np.float32, tff.CLIENTS, all_equal=True)) == (
      'float32@CLIENTS')
  simple_regression_model_type = tff.StructType(
      [('a', np.float32), ('b', np.float32)])
  assert str(tff.FederatedType(simple_regression_model_type, tff.CLIENTS,
                               all_equal=True)) == (
                                   '<a=float32,b=float32>@CLIENTS')


def test_federated_computations_and_their_composition():

  @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
  def get_average_temperature(sensor_readings):
    return tff.federated_mean(sensor_readings)

  assert str(get_average_temperature.type_signature) == (
      '({float32}@CLIENTS -> float32@SERVER)')
  assert get_average_temperature([68.5, 70.3, 69.8]) == pytest.approx(
      69.53333)

  @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS),
                             tff.FederatedType(np.float32, tff.SERVER))
  def get_fraction_over_threshold(readings, threshold):

    @tff.tensorflow.computation(np.float32, np.float32)
    def _is_over_as_float(val, threshold):
      return tf.cast(val > threshold, np.float32)

    return tff.federated_mean(tff.federated_map(
        _is_over_as_float, [readings, tff.federated_broadcast(threshold)]))

  assert get_fraction_over_threshold([68.5, 70.3, 69.8], 69.0) == (
      pytest.approx(0.6666667))


def test_tensorflow_computations_typed_and_untyped():

  @tff.tensorflow.computation(np.float32)
  def add_half(x):
    return tf.add(x, 0.5)

  assert str(add_half.type_signature) == '(float32 -> float32)'
  assert add_half(1.5) == 2.0

  @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
  def add_half_on_clients(x):
    return tff.federated_map(add_half, x)

  assert str(add_half_on_clients.type_signature) == (
      '({float32}@CLIENTS -> {float32}@CLIENTS)')
  assert add_half_on_clients([1.0, 3.0, 2.0]) == [1.5, 3.5, 2.5]

  @tff.tensorflow.computation
  def add(x, y):
    return x + y

  assert add(1, 2) == 3 and add(1.0, 2.5) == 3.5  # Typed by each call.


def test_sequences_and_the_global_average_of_local_averages():

  @tff.tensorflow.computation(tff.SequenceType(np.float32))
  def get_local_temperature_average(local_temperatures):
    sum_and_count = local_temperatures.reduce(
        (0.0, 0), lambda x, y: (x[0] + y, x[1] + 1))
    return sum_and_count[0] / tf.cast(sum_and_count[1], np.float32)

  assert str(get_local_temperature_average.type_signature) == (
      '(float32* -> float32)')
  assert get_local_temperature_average([68.0, 70.0]) == 69.0

  @tff.federated_computation(
      tff.FederatedType(tff.SequenceType(np.float32), tff.CLIENTS))
  def get_global_temperature_average(sensor_readings):
    return tff.federated_mean(
        tff.federated_map(get_local_temperature_average, sensor_readings))

  assert str(get_global_temperature_average.type_signature) == (
      '({float32*}@CLIENTS -> float32@SERVER)')
  assert get_global_temperature_average(
      [[68.0, 70.0], [71.0], [68.0, 72.0, 70.0]]) == 70.0


def test_hello_world():

  @tff.federated_computation
  def hello_world():
    return 'Hello, World!'

  assert hello_world() == b'Hello, World!'
