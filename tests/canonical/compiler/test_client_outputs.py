"""Per-client outputs: a last CLIENTS value `next` returns, routed to the form's Y.

`next(state, data) -> (state, metrics, client_outputs)`, or with client state
`next(state, data, client_state) -> (state, metrics, client_state,
client_outputs)`. The reference executor and the local runner return them,
one per client, after everything else; saved forms keep them.
"""


import numpy as np
import pytest
import tensorflow as tf

import canonical as cf
from canonical.executors import reference
from canonical import form as form_lib

import marked_lines
from tensor_asserts import assert_same


F = tf.TensorSpec([], tf.float32)
I = tf.TensorSpec([], tf.int32)
F2 = tf.TensorSpec([2], tf.float32)
SEEDS = (None, 0, 5)


_where = marked_lines.finder(__file__)


_zero_state = cf.tf_computation(lambda: tf.constant(0.0))


@cf.tf_computation(F2, F)
def _loss(data, center):
  return tf.reduce_sum(tf.square(data - center))


@cf.tf_computation(F2)
def _size(data):
  return tf.size(data)


def _outputs_process():

  @cf.federated_computation(cf.server(F), cf.clients(F2))
  def next_fn(state, data):
    loss = cf.federated_map(_loss, (data, cf.federated_broadcast(state)))
    per_client = {'loss': loss, 'size': cf.federated_map(_size, data)}
    return state, cf.federated_mean(loss), per_client

  return cf.IterativeProcess(_zero_state, next_fn)


DATA = [np.array([1.0, 2.0], np.float32), np.array([0.0, 3.0], np.float32),
        np.array([-1.0, 1.0], np.float32)]


def _check_both_ways(process, state, data, client_states=None):
  expected = reference.run_round(process, state, data, client_states)
  form = cf.compile(process)
  for seed in SEEDS:
    assert_same(cf.run_round(form, state, data, client_states,
                             merge_seed=seed),
                expected, exact=False, what=f'merge_seed {seed}')
  return form, expected


def test_client_outputs_without_client_state():
  process = _outputs_process()
  assert process.has_client_outputs and not process.has_client_state
  form, (state, mean, outputs) = _check_both_ways(process, tf.constant(1.0),
                                                  DATA)
  assert form.has_client_outputs and not form.has_client_state
  assert form.client_output_spec == {'loss': F, 'size': I}
  assert form.work.output_spec[1] == {'loss': F, 'size': I}
  assert float(state) == 1.0
  losses = [float(np.sum((d - 1.0) ** 2)) for d in DATA]
  assert [float(o['loss']) for o in outputs] == losses
  assert [int(o['size']) for o in outputs] == [2, 2, 2]
  assert float(mean) == pytest.approx(np.mean(losses))
  summary = form.summary(print_fn=None)
  assert ('client outputs (per client, in Y): <loss=float32,size=int32>'
          in summary)
  # Outputs never travel: U holds only the mean's parts.
  assert form.aggregated_bits == 32


def test_client_outputs_with_client_state():

  @cf.tf_computation(F2, F)
  def step(data, count):
    return count + tf.reduce_sum(data)

  @cf.federated_computation(cf.server(F), cf.clients(F2), cf.clients(F))
  def next_fn(state, data, client_state):
    new_state = cf.federated_map(step, (data, client_state))
    doubled = cf.federated_map(cf.tf_computation(lambda x: 2.0 * x, F),
                               new_state)
    return state, cf.federated_sum(new_state), new_state, (doubled, data)

  process = cf.IterativeProcess(_zero_state, next_fn,
                                client_state_initializer=_zero_state)
  form, result = _check_both_ways(process, tf.constant(0.0), DATA,
                                  [None, tf.constant(10.0), None])
  _, total, states, outputs = result
  assert [float(s) for s in states] == [3.0, 13.0, 0.0]
  assert [float(o[0]) for o in outputs] == [6.0, 26.0, 0.0]
  np.testing.assert_array_equal(outputs[1][1], DATA[1])
  assert float(total) == 16.0
  assert form.client_state_spec == F
  assert form.client_output_spec == (F, F2)
  assert isinstance(form.work.output_spec[1], form_lib.ClientResult)


def test_client_state_made_of_several_values():
  # The reference returns one structure per client, not one list per part.

  @cf.federated_computation(cf.server(F), cf.clients(F2), cf.clients((F, F)))
  def next_fn(state, data, client_state):
    first = cf.federated_map(_loss, (data, client_state[0]))
    return state, cf.federated_sum(first), (first, client_state[1])

  initializer = cf.tf_computation(lambda: (tf.constant(0.0), tf.constant(7.0)))
  process = cf.IterativeProcess(_zero_state, next_fn,
                                client_state_initializer=initializer)
  _, _, states = _check_both_ways(process, tf.constant(0.0), DATA[:2])[1]
  assert [(float(a), float(b)) for a, b in states] == [(5.0, 7.0), (9.0, 7.0)]


def test_client_outputs_save_and_load(tmp_path):
  form = cf.compile(_outputs_process())
  loaded = cf.load(cf.save(form, str(tmp_path / 'outputs.pb')))
  assert loaded.client_output_spec == form.client_output_spec
  assert_same(cf.run_round(loaded, 1.0, DATA), cf.run_round(form, 1.0, DATA),
              exact=True)


def test_client_outputs_with_state_save_and_load(tmp_path):

  @cf.federated_computation(cf.server(F), cf.clients(F2), cf.clients(F))
  def next_fn(state, data, client_state):
    return state, cf.federated_sum(client_state), client_state, data

  form = cf.compile(cf.IterativeProcess(_zero_state, next_fn,
                                        client_state_initializer=_zero_state))
  loaded = cf.load(cf.save(form, str(tmp_path / 'state_outputs.pb')))
  assert loaded.has_client_state and loaded.client_output_spec == F2
  assert loaded.client_state_spec == F
  assert_same(cf.run_round(loaded, 0.0, DATA, [1.0, 2.0, 3.0]),
              cf.run_round(form, 0.0, DATA, [1.0, 2.0, 3.0]), exact=True)


def _process_error(next_fn, **kwargs):
  with pytest.raises(cf.FederatedError) as error:
    cf.IterativeProcess(_zero_state, next_fn, **kwargs)
  return str(error.value)


def test_client_outputs_must_be_client_tensors():

  @cf.federated_computation(cf.server(F), cf.clients(F2))
  def at_server(state, data):
    total = cf.federated_sum(data)  # line:outputs_at_server
    return state, total, total

  message = _process_error(at_server)
  assert 'per-client outputs' in message
  assert 'federated_sum at ' + _where('outputs_at_server') in message
  assert 'metrics' in message

  @cf.federated_computation(cf.server(F),
                            cf.clients(cf.SequenceType(F)))
  def a_dataset(state, data):
    return state, cf.federated_sum(cf.sequence_sum(data)), data

  assert 'not datasets' in _process_error(a_dataset)

  @cf.federated_computation(cf.server(F), cf.clients(F2))
  def empty(state, data):
    return state, cf.federated_mean(data), ()

  assert 'empty structure' in _process_error(empty)

  @cf.federated_computation(cf.server(F), cf.clients(F2))
  def too_many(state, data):
    return state, cf.federated_mean(data), data, data

  message = _process_error(too_many)
  assert 'must return a tuple of 2' in message and 'per-client outputs' in (
      message)


def test_hand_made_form_with_a_malformed_client_result():
  p = form_lib.Piece
  pieces = dict(
      initialize=p('initialize', lambda: tf.constant(0.0), ()),
      prepare=p('prepare', lambda s: (s,), (F,)),
      work=p('work', lambda d, c: ((d[0] + c[0],), form_lib.ClientResult(
          tf.cast(d[1], tf.int32), d[0])), ((F, F), (F,))),
      zero=p('zero', lambda: (tf.constant(0.0),), ()),
      accumulate=p('accumulate', lambda a, u: (a[0] + u[0],), ((F,), (F,))),
      merge=p('merge', lambda a, b: (a[0] + b[0],), ((F,), (F,))),
      report=p('report', lambda a: a, ((F,),)),
      update=p('update', lambda s, r: (s + r[0], r[0]), (F, (F,))),
      client_state_init=p('client_state_init', lambda: tf.constant(0.0), ()))
  with pytest.raises(cf.FormError, match='work: its new client state is '
                     'int32'):
    cf.CanonicalForm(name='hand', **pieces)


def test_client_state_initializer_as_the_third_argument():
  # As docs/language-and-compiler.md writes it: the same process as by name.

  @cf.federated_computation(cf.server(F), cf.clients(F2), cf.clients(F))
  def next_fn(state, data, client_state):
    new_state = cf.federated_map(_loss, (data, client_state))
    return state, cf.federated_sum(new_state), new_state

  process = cf.IterativeProcess(_zero_state, next_fn, _zero_state)
  assert process.has_client_state
  _, total, states = _check_both_ways(process, tf.constant(0.0), DATA[:2])[1]
  assert [float(s) for s in states] == [5.0, 9.0]
  assert float(total) == 14.0
  with pytest.raises(cf.FederatedError, match='given twice'):
    cf.IterativeProcess(_zero_state, next_fn, _zero_state,
                        client_state_initializer=_zero_state)
