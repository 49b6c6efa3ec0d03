"""`tff.federated_select`, written as TFF 0.87's tutorial "Sending Different
Data To Particular Clients With tff.federated_select" writes it.

Every expected value and type string was printed by TensorFlow Federated
0.87 for the same programs (and checked by hand). The form sends the server
value whole and each client selects in work: the compiled round must give
what the reference executor gives."""

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff

STRINGS = tff.TensorType(np.str_, [None])
TABLE = tff.TensorType(np.float32, [4, 2])
KEYS = tff.TensorType(np.int32, [2])

get_size = tff.tensorflow.computation(lambda x: tf.size(x))
select_fn = tff.tensorflow.computation(lambda val, index: tf.gather(val, index))


@tff.tensorflow.computation(np.str_)
def keys_for_client(client_string):
  split = tf.strings.split([client_string], sep=',')[0]
  return tf.strings.to_number([split[0], split[1]], tf.int32)


@tff.tensorflow.computation(tff.SequenceType(np.str_))
def concatenate(values):

  def join(accumulator, item):
    return tf.cond(tf.math.equal(accumulator, ''), lambda: item,
                   lambda: tf.strings.join([accumulator, item], ','))

  return values.reduce('', join)


@tff.federated_computation(tff.FederatedType(STRINGS, tff.SERVER),
                           tff.FederatedType(np.str_, tff.CLIENTS))
def get_server_list_values(server_list, client_data):
  client_keys = tff.federated_map(keys_for_client, client_data)
  max_key = tff.federated_map(get_size, server_list)
  return tff.federated_select(client_keys, max_key, server_list, select_fn)


@tff.federated_computation(tff.FederatedType(STRINGS, tff.SERVER),
                           tff.FederatedType(np.str_, tff.CLIENTS))
def get_and_concatenate(server_list, client_data):
  client_keys = tff.federated_map(keys_for_client, client_data)
  max_key = tff.federated_map(get_size, server_list)
  values = tff.federated_select(client_keys, max_key, server_list, select_fn)
  return tff.federated_map(concatenate, values)


def test_each_client_gets_the_values_of_its_keys_as_a_sequence():
  assert str(get_server_list_values.type_signature) == (
      '(<server_list=str[?]@SERVER,client_data={str}@CLIENTS> -> '
      '{str*}@CLIENTS)')
  result = get_server_list_values(['a', 'b', 'c'], ['0,1', '1,2', '2,0'])
  # As in TFF 0.87: one dataset per client, its values in its keys' order.
  assert all(isinstance(d, tf.data.Dataset) for d in result)
  assert [list(d.as_numpy_iterator()) for d in result] == [
      [b'a', b'b'], [b'b', b'c'], [b'c', b'a']]
  assert list(get_and_concatenate(['a', 'b', 'c'], ['0,1', '1,2', '2,0'])) == [
      b'a,b', b'b,c', b'c,a']


# A round: each client sums the rows of the server's table its keys select.


@tff.tensorflow.computation(TABLE, np.int32)
def row(table, key):
  return table[key]


@tff.tensorflow.computation(tff.SequenceType(tff.TensorType(np.float32, [2])))
def total(rows):
  return rows.reduce(tf.zeros([2]), lambda a, r: a + r)


@tff.tensorflow.computation(TABLE)
def decay(table):
  return table * 0.5


@tff.tensorflow.computation(TABLE)
def last_key(table):
  return tf.shape(table)[0] - 1


@tff.tensorflow.computation
def initial_table():
  return tf.reshape(tf.range(8, dtype=tf.float32), [4, 2])


def _round(select):

  @tff.federated_computation(tff.FederatedType(TABLE, tff.SERVER),
                             tff.FederatedType(KEYS, tff.CLIENTS))
  def next_fn(table, keys):
    max_key = tff.federated_map(last_key, table)
    rows = select(keys, max_key, table, row)
    return (tff.federated_map(decay, table),
            tff.federated_sum(tff.federated_map(total, rows)))

  return next_fn


CLIENT_KEYS = [np.array([0, 3], np.int32), np.array([2, 2], np.int32),
               np.array([1, 0], np.int32)]
# TFF 0.87's metrics of two rounds from the table [[0,1],[2,3],[4,5],[6,7]]:
# [0,1]+[6,7] + [4,5]+[4,5] + [2,3]+[0,1], then the same of the halved table.
ROUND_METRICS = [[16.0, 22.0], [8.0, 11.0]]


@pytest.mark.parametrize('select', [tff.federated_select,
                                    tff.federated_secure_select])
def test_a_round_with_select_compiles_and_runs_as_by_reference(select):
  next_fn = _round(select)
  assert str(next_fn.type_signature) == (
      '(<table=float32[4,2]@SERVER,keys={int32[2]}@CLIENTS> -> '
      '<float32[4,2]@SERVER,float32[2]@SERVER>)')
  process = tff.templates.IterativeProcess(initial_table, next_fn)
  form = tff.compile(process)
  # The table goes whole to every client: C is the table, once.
  assert form.work.input_specs[1] == (tf.TensorSpec([4, 2], tf.float32),)
  assert form.broadcast_bits == 8 * 32
  keys = [tf.constant(k) for k in CLIENT_KEYS]
  state = expected_state = form.initialize()
  for metrics in ROUND_METRICS:
    state, actual = tff.run_round(form, state, keys)
    expected_state, expected = tff.reference.run_round(process,
                                                       expected_state, keys)
    np.testing.assert_allclose(actual, metrics)
    np.testing.assert_allclose(expected, metrics)
    np.testing.assert_allclose(state, expected_state)
  np.testing.assert_allclose(state, np.arange(8).reshape(4, 2) / 4.0)


def test_a_form_with_select_saves_loads_and_runs_alike(tmp_path):
  process = tff.templates.IterativeProcess(initial_table,
                                           _round(tff.federated_select))
  form = tff.compile(process)
  loaded = tff.load(tff.save(form, str(tmp_path / 'select.pb')))
  keys = [tf.constant(k) for k in CLIENT_KEYS]
  _, metrics = tff.run_round(loaded, loaded.initialize(), keys)
  np.testing.assert_allclose(metrics, ROUND_METRICS[0])


def test_a_select_and_a_broadcast_of_one_value_share_its_slot_of_c():

  @tff.federated_computation(tff.FederatedType(TABLE, tff.SERVER),
                             tff.FederatedType(KEYS, tff.CLIENTS))
  def next_fn(table, keys):
    max_key = tff.federated_map(last_key, table)
    rows = tff.federated_map(total, tff.federated_select(keys, max_key, table,
                                                         row))
    everything = tff.federated_map(
        tff.tensorflow.computation(lambda t: tf.reduce_sum(t, axis=0)),
        tff.federated_broadcast(table))
    return table, (tff.federated_sum(rows), tff.federated_sum(everything))

  form = tff.compile(tff.templates.IterativeProcess(initial_table, next_fn))
  assert len(form.broadcast_spec) == 1
  _, (rows, everything) = tff.run_round(
      form, form.initialize(), [tf.constant(k) for k in CLIENT_KEYS])
  np.testing.assert_allclose(rows, ROUND_METRICS[0])
  np.testing.assert_allclose(everything, [36.0, 48.0])


def test_keys_are_not_checked_against_max_key_as_in_tff():
  # TFF 0.87 gives [14.0, 0.0]: max_key 3 bounds no key; select_fn sees 7
  # and -2 as they are.
  @tff.tensorflow.computation(tff.SequenceType(np.float32))
  def sequence_sum(values):
    return values.reduce(np.float32(0.0), lambda a, b: a + b)

  @tff.federated_computation(tff.FederatedType(np.float32, tff.SERVER),
                             tff.FederatedType(KEYS, tff.CLIENTS))
  def scaled(w, keys):
    max_key = tff.federated_value(np.int32(3), tff.SERVER)
    values = tff.federated_select(
        keys, max_key, w,
        tff.tensorflow.computation(lambda w, k: w * tf.cast(k, tf.float32)))
    return tff.federated_map(sequence_sum, values)

  result = scaled(np.float32(2.0), [np.array([0, 7], np.int32),
                                    np.array([-2, 2], np.int32)])
  np.testing.assert_allclose(result, [14.0, 0.0])


# Refusals, each naming the select's line.


def _max_key():
  return tff.federated_value(np.int32(3), tff.SERVER)


def _trace(parameter_types, body):
  tff.federated_computation(body, *parameter_types).trace()


F_SERVER = tff.FederatedType(np.float32, tff.SERVER)


@pytest.mark.parametrize('keys_type', [
    tff.TensorType(np.float32, [2]),   # not int32
    tff.TensorType(np.int32, [None]),  # a number of keys that varies
    tff.TensorType(np.int32),          # a scalar, not a vector
])
def test_client_keys_must_be_a_fixed_number_of_int32s(keys_type):
  with pytest.raises(tff.FederatedError,
                     match=r'federated_select at test_federated_select.py:'
                     r'\d+ .*client_keys must be int32 keys of one fixed'):
    _trace([F_SERVER, tff.FederatedType(keys_type, tff.CLIENTS)],
           lambda w, k: tff.federated_select(k, _max_key(), w, select_fn))


def test_max_key_must_be_an_int32_at_the_server():
  keys = tff.FederatedType(KEYS, tff.CLIENTS)
  with pytest.raises(tff.FederatedError, match='max_key must be an int32'):
    _trace([F_SERVER, keys], lambda w, k: tff.federated_select(
        k, tff.federated_value(np.int64(3), tff.SERVER), w, select_fn))
  with pytest.raises(tff.FederatedError, match='max_key must be an int32'):
    _trace([F_SERVER, keys],
           lambda w, k: tff.federated_select(k, 3, w, select_fn))


def test_the_server_value_must_be_at_the_server():
  with pytest.raises(tff.FederatedError,
                     match='federated_select .* expects a value placed at '
                     'SERVER'):
    _trace([tff.FederatedType(np.float32, tff.CLIENTS),
            tff.FederatedType(KEYS, tff.CLIENTS)],
           lambda w, k: tff.federated_select(k, _max_key(), w, select_fn))


def test_select_fn_must_take_the_value_and_an_int32_key():
  wrong = tff.tensorflow.computation(lambda w, k: w * k, np.float32,
                                     np.float32)
  with pytest.raises(tff.FederatedError,
                     match=r'federated_secure_select .*select_fn .* has type '
                     r'<float32,float32>, expected <float32,int32>'):
    _trace([F_SERVER, tff.FederatedType(KEYS, tff.CLIENTS)],
           lambda w, k: tff.federated_secure_select(k, _max_key(), w, wrong))


def test_a_value_aggregated_in_the_same_round_cannot_be_selected():

  @tff.federated_computation(tff.FederatedType(TABLE, tff.SERVER),
                             tff.FederatedType(KEYS, tff.CLIENTS))
  def next_fn(table, keys):
    counts = tff.federated_sum(tff.federated_map(
        tff.tensorflow.computation(lambda k: tf.cast(k, tf.float32)), keys))
    fresh = tff.federated_map(
        tff.tensorflow.computation(lambda t, c: t + c[0], TABLE,
                                   tff.TensorType(np.float32, [2])),
        (table, counts))
    rows = tff.federated_select(keys, _max_key(), fresh, row)
    return table, tff.federated_sum(tff.federated_map(total, rows))

  process = tff.templates.IterativeProcess(initial_table, next_fn)
  with pytest.raises(tff.FederatedError,
                     match=r'depends on federated_sum at .* through '
                     r'federated_select at test_federated_select.py:\d+ '
                     r'\(rows = tff.federated_select'):
    tff.compile(process)


def test_a_select_in_initialize_is_refused():

  @tff.federated_computation
  def initialize_through_clients():
    table = tff.federated_eval(initial_table, tff.SERVER)
    keys = tff.federated_value(np.array([0, 1], np.int32), tff.CLIENTS)
    rows = tff.federated_select(keys, _max_key(), table, row)
    total_rows = tff.federated_sum(tff.federated_map(total, rows))
    return tff.federated_map(
        tff.tensorflow.computation(lambda t, r: t + r[0], TABLE,
                                   tff.TensorType(np.float32, [2])),
        (table, total_rows))

  with pytest.raises(tff.FederatedError,
                     match='initialize .* involves the clients'):
    tff.templates.IterativeProcess(initialize_through_clients,
                                   _round(tff.federated_select))


def test_an_impure_select_fn_is_refused_at_compile_naming_its_line():
  noisy = tff.tensorflow.computation(
      lambda t, k: t[k] + tf.random.uniform([2]), TABLE, np.int32)

  @tff.federated_computation(tff.FederatedType(TABLE, tff.SERVER),
                             tff.FederatedType(KEYS, tff.CLIENTS))
  def next_fn(table, keys):
    rows = tff.federated_select(keys, _max_key(), table, noisy)
    return table, tff.federated_sum(tff.federated_map(total, rows))

  with pytest.raises(tff.FederatedError,
                     match=r"'federated_select\(<lambda>\)' .* is not pure: .*"
                     r'stateful random.*test_federated_select.py'):
    tff.compile(tff.templates.IterativeProcess(initial_table, next_fn))
