"""Secure sums in the language, the compiled form, saved forms and the runners.

`federated_secure_sum_bitwidth`, `federated_secure_sum` and
`federated_secure_modular_sum` mean what TFF's do; the local runner adds them
with the masking protocol and must agree with the reference executor, which
adds them in the clear.
"""


import numpy as np
import pytest
import tensorflow as tf

import canonical as cf
from canonical import compiler
from canonical import errors
from canonical.executors import local as local_runner
from canonical.executors import reference
from canonical import form as form_lib
from canonical import saving
from canonical.saving import envelope
from canonical.saving import inspection
from canonical import secagg
from canonical.secagg import sums as secure_sums

from example_processes import (
    I3,
    SECURE_STATE,
    secure_state_init,
    secure_sums_process,
    state_bits,
    total_as_float,
)
import marked_lines
from tensor_asserts import assert_same


_where = marked_lines.finder(__file__)


DATA = [np.array([1, 2, 3], np.int32), np.array([15, 0, 9], np.int32),
        np.array([4, 4, 4], np.int32), np.array([0, 7, 13], np.int32)]


@pytest.fixture(scope='module')
def mixed():
  process = secure_sums_process()
  return process, compiler.compile(process)


def test_the_form_separates_secure_sums_from_the_plain_update(mixed):
  _, form = mixed
  assert [s.kind for s in form.secure_sums] == [
      'federated_secure_sum_bitwidth', 'federated_secure_sum',
      'federated_secure_modular_sum']
  assert [s.static_parameters for s in form.secure_sums] == [
      None, (20,), (7,)]
  assert form.client_update_spec == (tf.TensorSpec([], tf.float32),)
  assert form.secure_update_spec == (I3, I3, I3)
  # U's bits count the secure part at its dtype: 32 (mean) + 3 * 96.
  assert form.aggregated_bits == 32 + 3 * 96
  state = form.initialize()
  assert [p.numpy().item() for p in form.secure_parameters(state)] == [
      4, 20, 7]
  text = form.summary(print_fn=None)
  assert 'secure sum 0: federated_secure_sum_bitwidth, bitwidth from the ' \
      'server state on int32[3]' in text
  assert 'secure sum 2: federated_secure_modular_sum, modulus 7' in text


def test_local_runner_with_masks_equals_the_reference_in_the_clear(mixed):
  process, form = mixed
  state, ref_state = form.initialize(), process.initialize.invoke()
  for _ in range(3):  # The bitwidth grows: 4, 5, 6 bits.
    state, metrics = local_runner.run_round(form, state, DATA)
    ref_state, ref_metrics = reference.run_round(process, ref_state, DATA)
    assert_same(state, ref_state, exact=True)
    assert_same(metrics, ref_metrics, exact=True)
  total = np.sum(DATA, axis=0)
  np.testing.assert_array_equal(metrics['bitwidth'], total)
  np.testing.assert_array_equal(metrics['max_input'], total)
  np.testing.assert_array_equal(metrics['modular'], total % 7)


def test_a_value_outside_the_bitwidth_fails_naming_client_and_leaf(mixed):
  _, form = mixed
  data = DATA[:2] + [np.array([1, 16, 0], np.int32)]  # 16 > 2**4 - 1.
  with pytest.raises(secure_sums.SecureSumError,
                     match=r'secure sum 0 \(federated_secure_sum_bitwidth\), '
                           r'client 2: values must be in \[0, 15\] '
                           r'\(bitwidth 4\), leaf <root> has 16 at index '
                           r'\(1,\)'):
    local_runner.run_round(form, form.initialize(), data)


def test_a_value_above_max_input_fails_in_the_reference_too():
  @cf.federated_computation(cf.clients(I3))
  def total(data):
    return cf.federated_secure_sum(data, 20)  # line:max_input

  data = DATA[:1] + [np.array([1, 2, 21], np.int32)]
  with pytest.raises(secure_sums.SecureSumError,
                     match=rf'federated_secure_sum at {_where("max_input")} '
                           r'.*, client 1: values must be in \[0, 20\]'):
    reference.run(total, data)


def test_modular_sums_project_negative_values():
  @cf.federated_computation(cf.clients(I3))
  def modular(data):
    return cf.federated_secure_modular_sum(data, 5)

  data = [np.array([-1, -7, 3], np.int32), np.array([2, 0, -5], np.int32)]
  np.testing.assert_array_equal(reference.run(modular, data), [1, 3, 3])


def _structured(parameter):
  spec = {'a': tf.TensorSpec([2], tf.int64), 'b': tf.TensorSpec([], tf.int32)}

  @cf.federated_computation(cf.clients(spec))
  def total(data):
    return cf.federated_secure_sum_bitwidth(data, parameter)

  return total


def test_a_structure_takes_one_bitwidth_per_tensor_or_one_for_all():
  data = [{'a': np.array([3, 1], np.int64), 'b': np.int32(200)},
          {'a': np.array([2, 0], np.int64), 'b': np.int32(100)}]
  result = reference.run(_structured({'a': 2, 'b': 8}), data)
  np.testing.assert_array_equal(result['a'], [5, 1])
  assert result['b'] == 300
  with pytest.raises(secure_sums.SecureSumError, match=r"client 0: .* leaf b has 200"):
    reference.run(_structured(2), data)


def test_an_exact_sum_that_overflows_its_dtype_is_an_error():
  spec = tf.TensorSpec([], tf.int8)

  @cf.federated_computation(cf.clients(spec))
  def total(data):
    return cf.federated_secure_sum(data, 100)

  assert reference.run(total, [np.int8(100), np.int8(27)]) == 127
  with pytest.raises(secure_sums.SecureSumError,
                     match='reaches 128, more than its dtype int8 holds'):
    reference.run(total, [np.int8(100), np.int8(28)])


@pytest.mark.parametrize('kind, parameter, clients, expected', [
    ('federated_secure_sum_bitwidth', 8, 1, 2**8),
    ('federated_secure_sum_bitwidth', 8, 3, 2**10),  # > 3 * 255.
    ('federated_secure_sum_bitwidth', 1, 1000, 2**10),
    ('federated_secure_sum', 20, 4, 81),
    ('federated_secure_modular_sum', 7, 100, 7),
])
def test_the_modulus_holds_every_possible_sum(kind, parameter, clients,
                                              expected):
  modulus = secure_sums.modulus(kind, parameter, clients)
  assert modulus == expected
  if kind != 'federated_secure_modular_sum':
    largest = 2**parameter - 1 if 'bitwidth' in kind else parameter
    assert modulus > largest * clients


def test_a_sum_needing_more_than_63_bits_is_refused():
  with pytest.raises(secure_sums.SecureSumError, match='more than 2\\*\\*63'):
    secure_sums.modulus('federated_secure_sum_bitwidth', 62, 4)


def test_every_value_reaching_the_aggregation_is_masked(mixed):
  """What the aggregation adds are masked inputs only: none equals a client's
  input (or a partial sum of inputs), and the unmasked sums are exact."""
  _, form = mixed
  state = form.initialize()
  broadcast = form.prepare(state)
  data = [np.random.default_rng(i).integers(0, 16, 3).astype(np.int32)
          for i in range(8)]
  secure = [form.split_update(form.work(d, broadcast)[0])[1] for d in data]
  parameters, stddevs = secure_sums.round_parameters(
      form.secure_sums, form.secure_parameters(state))
  assert stddevs == [None] * 3  # No sum here adds client noise.
  sums, result = secure_sums.masked_sum(
      form.secure_sums, parameters, secure, form.secure_update_spec)
  masked = [m for m in result.messages_to_server
            if isinstance(m, secagg.MaskedInput)]
  assert len(masked) == len(data)
  plain = [np.concatenate([np.asarray(v, np.uint64).ravel() for v in s])
           for s in secure]
  for message in masked:
    seen = np.concatenate([np.asarray(v).ravel() for v in message.values])
    for k in range(1, len(plain) + 1):
      partial = np.sum(plain[:k], axis=0).astype(np.uint64)
      assert not np.array_equal(seen, partial)
    # Masks are uniform mod 2**k: the masked values are nowhere near the
    # inputs (all < 16) but spread over the modulus.
    assert seen.max() > 16
  total = np.sum(data, axis=0)
  for value in sums[:2]:
    np.testing.assert_array_equal(value, total)
  np.testing.assert_array_equal(sums[2], total % 7)


def test_the_local_runner_sums_exactly_with_ring_neighbors(mixed):
  process, form = mixed
  data = [np.random.default_rng(i).integers(0, 16, 3).astype(np.int32)
          for i in range(9)]
  expected = reference.run_round(process, process.initialize.invoke(), data)
  state = form.initialize()
  for neighbors in (2, 4, 'auto'):
    _, metrics = local_runner.run_round(form, state, data, secure_seed=3,
                                        secure_neighbors=neighbors)
    for name in ('bitwidth', 'max_input', 'modular'):
      np.testing.assert_array_equal(metrics[name], expected[1][name])
  with pytest.raises(secagg.SecAggError, match='threshold 4 is more than the '
                                               '3 clients'):
    local_runner.run_round(form, state, data, secure_threshold=4,
                           secure_neighbors=2)


def test_too_few_clients_for_the_threshold_fail_the_round(mixed):
  _, form = mixed
  with pytest.raises(secagg.SecAggError, match='threshold 5 is out of range'):
    local_runner.run_round(form, form.initialize(), DATA, secure_threshold=5)


def test_saved_forms_keep_their_secure_sums(mixed, tmp_path):
  _, form = mixed
  path = saving.save(form, tmp_path / 'secure.fcf')
  loaded = saving.load(path)
  assert loaded.secure_sums == form.secure_sums
  state = loaded.initialize()
  a = local_runner.run_round(loaded, state, DATA, secure_seed=1)
  b = local_runner.run_round(form, form.initialize(), DATA, secure_seed=2)
  assert_same(a, b, exact=True)
  text = inspection.describe_file(path)
  assert 'secure_parameters' in text
  assert 'secure sum 0: federated_secure_sum_bitwidth, bitwidth from the ' \
      'server state' in text
  assert 'secure sum 1: federated_secure_sum, max_input 20' in text


def test_a_file_whose_secure_sums_do_not_fit_its_pieces_is_refused(
    mixed, tmp_path):
  _, form = mixed
  proto = saving.form_file.to_proto(form)
  del proto.secure_sums[2]
  data = envelope.wrap(proto.SerializeToString())
  with pytest.raises(form_lib.FormError,
                     match='expected 2 values \\(one per secure sum\\)'):
    saving.form_file.from_bytes(data, 'bad.fcf')
  proto = saving.form_file.to_proto(form)
  proto.secure_sums[1].static_parameters.append(3)
  with pytest.raises(form_lib.FormError,
                     match='secure sum 1: 2 static parameters for 1 tensors'):
    saving.form_file.from_bytes(envelope.wrap(proto.SerializeToString()),
                                'bad.fcf')
  proto = saving.form_file.to_proto(form)
  proto.secure_sums[0].kind = 'federated_plain_sum'
  with pytest.raises(form_lib.FormError, match="unknown kind"):
    saving.form_file.from_bytes(envelope.wrap(proto.SerializeToString()),
                                'bad.fcf')


# ----------------------------------------------------------------------------
# Misuse names the user's line.


def _trace(body, spec=I3):
  @cf.federated_computation(cf.server(SECURE_STATE), cf.clients(spec))
  def next_fn(state, data):
    return body(state, data)
  return next_fn.trace


@pytest.mark.parametrize('line, body, match', [
    ('float', lambda s, d: cf.federated_secure_sum(  # line:float
        cf.federated_map(total_as_float, d), 3),
     'cannot securely sum float32 tensors'),
    ('server', lambda s, d: cf.federated_secure_sum(s, 3),  # line:server
     'expects a value placed at CLIENTS'),
    ('zero', lambda s, d: cf.federated_secure_sum_bitwidth(d, 0),  # line:zero
     r'bitwidth 0 is out of range \[1, 62\]'),
    ('one', lambda s, d: cf.federated_secure_modular_sum(d, 1),  # line:one
     r'modulus 1 is out of range \[2,'),
    ('float_param', lambda s, d: cf.federated_secure_sum(d, 2.5),  # line:float_param
     'the max_input must be an int'),
    ('structure', lambda s, d: cf.federated_secure_sum(d, [1, 2]),  # line:structure
     'must be one int or a structure like the value int32\\[3\\]'),
    ('at_clients', lambda s, d: cf.federated_secure_sum_bitwidth(  # line:at_clients
        d, cf.federated_broadcast(cf.federated_map(state_bits, s))),
     'expects a value placed at SERVER'),
    ('float_state', lambda s, d: cf.federated_secure_sum_bitwidth(  # line:float_state
        d, s['w']),
     'the bitwidth must be integer scalars at SERVER'),
])
def test_misuse_is_an_error_at_the_users_line(line, body, match):
  with pytest.raises(errors.FederatedError, match=match) as raised:
    _trace(body)()
  assert f' at {_where(line)} (' in str(raised.value)


def test_a_parameter_from_an_aggregation_of_the_same_round_is_refused():
  @cf.tf_computation(I3)
  def _first(x):
    return x[0]

  @cf.federated_computation(cf.server(SECURE_STATE), cf.clients(I3))
  def next_fn(state, data):
    bits = cf.federated_max(cf.federated_map(_first, data))
    return state, cf.federated_secure_sum_bitwidth(data, bits)  # line:dep

  process = cf.IterativeProcess(secure_state_init, next_fn)
  with pytest.raises(errors.FederatedError,
                     match=f'federated_secure_sum_bitwidth at '
                           f'{_where("dep")} .* depends on federated_max'):
    compiler.compile(process)
