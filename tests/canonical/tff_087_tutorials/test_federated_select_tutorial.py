"""TFF 0.87's "Sending Different Data To Particular Clients With
tff.federated_select", written as its user writes it, with only the import
line changed.

Both programs run unchanged, with TFF's types and values: the second first
calls `tff.backends.native.set_sync_local_cpp_execution_context(
default_num_clients=3)`, which sets how many clients a computation with no
CLIENTS argument runs on (here, the reference executor's
`default_num_clients`).
"""

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff

list_of_strings_type = tff.TensorType(np.str_, [None])
# We only ever send exactly two values to each client. The number of keys per
# client must be a fixed number across all clients.
number_of_keys_per_client = 2
keys_type = tff.TensorType(np.int32, [number_of_keys_per_client])
get_size = tff.tensorflow.computation(lambda x: tf.size(x))
select_fn = tff.tensorflow.computation(lambda val, index: tf.gather(val, index))
client_data_type = np.str_


# A function from our client data to the indices of the values we'd like to
# select from the server.
@tff.tensorflow.computation(client_data_type)
def keys_for_client(client_string):
  # We assume our client data is a single string consisting of exactly three
  # comma-separated integers indicating which values to grab from the server.
  split = tf.strings.split([client_string], sep=',')[0]
  return tf.strings.to_number([split[0], split[1]], tf.int32)


@tff.tensorflow.computation(tff.SequenceType(np.str_))
def concatenate(values):
  def reduce_fn(acc, item):
    return tf.cond(tf.math.equal(acc, ''),
                   lambda: item,
                   lambda: tf.strings.join([acc, item], ','))
  return values.reduce('', reduce_fn)


@tff.federated_computation(tff.FederatedType(list_of_strings_type, tff.SERVER),
                           tff.FederatedType(client_data_type, tff.CLIENTS))
def broadcast_based_on_client_data(list_of_strings_at_server, client_data):
  keys_at_clients = tff.federated_map(keys_for_client, client_data)
  max_key = tff.federated_map(get_size, list_of_strings_at_server)
  values_at_clients = tff.federated_select(keys_at_clients, max_key,
                                           list_of_strings_at_server,
                                           select_fn)
  value_at_clients = tff.federated_map(concatenate, values_at_clients)
  return value_at_clients


@tff.tensorflow.computation(np.int32)
def get_random_key(max_key):
  return tf.random.uniform(shape=[1], minval=0, maxval=max_key, dtype=tf.int32)


@tff.tensorflow.computation(tff.SequenceType(np.str_))
def get_last_element(sequence):
  return sequence.reduce('', lambda _initial_state, val: val)


@tff.federated_computation(tff.FederatedType(list_of_strings_type, tff.SERVER))
def broadcast_random_element(list_of_strings_at_server):
  max_key_at_server = tff.federated_map(get_size, list_of_strings_at_server)
  max_key_at_clients = tff.federated_broadcast(max_key_at_server)
  key_at_clients = tff.federated_map(get_random_key, max_key_at_clients)
  random_string_sequence_at_clients = tff.federated_select(
      key_at_clients, max_key_at_server, list_of_strings_at_server, select_fn)
  # Even though we only passed in a single key, `federated_select` returns a
  # sequence for each client. We only care about the last (and only) element.
  random_string_at_clients = tff.federated_map(
      get_last_element, random_string_sequence_at_clients)
  return random_string_at_clients


def test_sending_different_values_based_on_client_data():
  assert str(keys_for_client.type_signature) == '(str -> int32[2])'
  assert str(concatenate.type_signature) == '(str* -> str)'
  assert str(broadcast_based_on_client_data.type_signature) == (
      '(<list_of_strings_at_server=str[?]@SERVER,client_data={str}@CLIENTS> '
      '-> {str}@CLIENTS)')
  client_data = ['0,1', '1,2', '2,0']
  assert broadcast_based_on_client_data(['a', 'b', 'c'], client_data) == [
      b'a,b', b'b,c', b'c,a']


def test_a_key_past_the_end_fails_in_the_gather_as_in_tff():
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r'indices = 3 is not in \[0, 3\)'):
    broadcast_based_on_client_data(['a', 'b', 'c'], ['0,1', '3,0'])


def test_sending_a_randomized_element_to_each_client():
  tff.backends.native.set_sync_local_cpp_execution_context(
      default_num_clients=3)
  try:
    result = broadcast_random_element(tf.convert_to_tensor(['foo', 'bar',
                                                            'baz']))
  finally:
    tff.backends.native.set_sync_local_cpp_execution_context()
  assert len(result) == 3
  assert set(result) <= {b'foo', b'bar', b'baz'}


def test_a_map_at_clients_is_not_all_equal():
  assert str(broadcast_random_element.type_signature) == (
      '(str[?]@SERVER -> {str}@CLIENTS)')
