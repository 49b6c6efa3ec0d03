"""The secure aggregation protocol (canonical/secagg): exact sums, what the
server sees, dropouts, attempts to learn more than the sum, and bad input."""

import dataclasses
import itertools
import pathlib
import re
import time
import types

import numpy as np
import pytest
import tensorflow as tf
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric import x25519
from scipy import stats

from canonical import secagg
from canonical.secagg import keys as keys_lib
from canonical.secagg import masks
from canonical.secagg import shamir


def _modular_sum(values, modulus):
  """numpy's modular sum, on Python ints so that nothing overflows."""
  return sum(np.asarray(v).astype(object) for v in values) % modulus


def _assert_sum(result, inputs, moduli, contributors):
  for key, modulus in moduli.items():
    expected = _modular_sum([inputs[u][key] for u in contributors], modulus)
    got = result[key]
    assert got.dtype == inputs[contributors[0]][key].dtype
    assert np.array_equal(np.asarray(got).astype(object), expected), key


def _run_to_masked(inputs, moduli, threshold, *, seed=0, dropped=(),
                   neighbors=None, round_id=0):
  """Steps 1-3 through the public step functions, as separate parties would."""
  ids = sorted(inputs)
  config = secagg.make_config(inputs[ids[0]], moduli, threshold, round_id,
                              neighbors)
  rng = secagg.SeededRandom(seed)
  keys, roster = {}, []
  for u in ids:
    keys[u], advertisement = secagg.advertise_keys(u, config, rng.child(u, 1))
    roster.append(advertisement)
  sharing, encrypted = {}, []
  for u in ids:
    sharing[u], outgoing = secagg.share_keys(keys[u], roster, rng.child(u, 2))
    encrypted.extend(outgoing)
  inbox = secagg.relay_shares(encrypted, ids)
  masking, masked, total = {}, {}, secagg.aggregation.zero(config)
  for u in ids:
    if u in dropped:
      continue
    masking[u], masked[u] = secagg.masked_input(sharing[u], inputs[u],
                                                inbox[u])
    total = secagg.aggregation.accumulate(config, total, masked[u])
  return types.SimpleNamespace(
      config=config, ids=ids, roster=roster, keys=keys, sharing=sharing,
      inbox=inbox, encrypted=encrypted, masking=masking, masked=masked,
      total=total)


def _answers(run, contributors, responders=None):
  """The responders' UnmaskingShares, each told `contributors`."""
  responders = contributors if responders is None else responders
  return [secagg.unmasking_shares(run.masking[u], contributors)
          for u in responders]


def _unmask(run, responses, total=None):
  return secagg.unmask(run.config, run.roster, run.ids,
                       run.total if total is None else total, responses)


def _masked_values(result):
  return [m.values[0] for m in result.messages_to_server
          if isinstance(m, secagg.MaskedInput)]


# Exact sums.

def _random_leaf(rng, modulus):
  if modulus - 1 > np.iinfo(np.int64).max:
    dtype = np.uint64
  elif modulus <= 2**31 and rng.random() < 0.5:
    dtype = np.int32
  else:
    dtype = np.int64
  shape = tuple(rng.integers(1, 4, size=rng.integers(0, 3)))
  return dtype, shape


_MODULI = [2, 2**3, 2**8, 2**16, 2**32, 1000003, 10, 2**63 + 25, 2**64]


@pytest.mark.parametrize('trial', range(30))
def test_random_rounds_give_numpys_modular_sum(trial):
  rng = np.random.default_rng(trial)
  n = int(rng.integers(2, 7))
  threshold = int(rng.integers(1, n + 1))
  moduli = {f'leaf{i}': int(rng.choice(_MODULI))
            for i in range(rng.integers(1, 4))}
  leaves = {key: _random_leaf(rng, m) for key, m in moduli.items()}
  inputs = {}
  for u in range(n):
    inputs[u] = {}
    for key, (dtype, shape) in leaves.items():
      values = rng.integers(0, moduli[key], size=shape, dtype=np.uint64)
      flat = values.reshape(-1)
      flat[:1] = moduli[key] - 1 if rng.random() < 0.5 else 0  # An edge.
      inputs[u][key] = values.astype(dtype)
  order = [int(u) for u in rng.permutation(n)]
  spare = n - threshold
  before_input = order[:int(rng.integers(0, spare + 1))]
  before_unmasking = order[len(before_input):][:spare - len(before_input)]
  result = secagg.secure_sum_round(
      inputs, moduli, threshold, dropped_before_input=before_input,
      dropped_before_unmasking=before_unmasking, seed=trial, round_id=trial)
  contributors = [u for u in range(n) if u not in before_input]
  assert list(result.contributors) == contributors
  _assert_sum(result.sum, inputs, moduli, contributors)


@pytest.mark.parametrize('modulus', [2, 2**3, 2**32, 1000003, 2**64])
def test_sums_at_the_edges_wrap_exactly(modulus):
  dtype = np.uint64 if modulus == 2**64 else np.int64
  inputs = {u: {'top': np.full([5], modulus - 1, dtype),
                'zero': np.zeros([5], dtype)} for u in range(4)}
  result = secagg.secure_sum_round(inputs, modulus, 3, seed=1)
  top = (4 * (modulus - 1)) % modulus
  assert [int(v) for v in result.sum['top']] == [top] * 5
  assert [int(v) for v in result.sum['zero']] == [0] * 5


def test_the_step_functions_alone_give_the_sum():
  inputs = {f'c{u}': (np.arange(6, dtype=np.int64).reshape(2, 3) * u,
                      np.array(u, np.uint8)) for u in range(4)}
  run = _run_to_masked(inputs, (2**16, 2**8), 3)
  total = _unmask(run, _answers(run, sorted(run.total.contributors)))
  assert isinstance(total, tuple)
  assert np.array_equal(total[0], np.arange(6).reshape(2, 3) * 6)
  assert total[1] == 6 and total[1].dtype == np.uint8


def test_tensor_specs_and_tensors_work_like_arrays():
  moduli = {'a': 2**16, 'b': 2**8}
  spec = {'a': tf.TensorSpec([2, 2], tf.int32),
          'b': tf.TensorSpec([], tf.uint8)}
  example = {'a': np.zeros([2, 2], np.int32), 'b': np.uint8(0)}
  assert (secagg.make_config(spec, moduli, 2).leaves
          == secagg.make_config(example, moduli, 2).leaves)
  inputs = {u: {'a': tf.fill([2, 2], u), 'b': tf.constant(u, tf.uint8)}
            for u in range(3)}
  result = secagg.secure_sum_round(inputs, moduli, 2, seed=0)
  assert result.sum['a'].dtype == np.int32 and np.all(result.sum['a'] == 3)
  assert result.sum['b'] == 3


def test_a_single_client_round():
  result = secagg.secure_sum_round({'only': np.array([3, 4], np.int64)}, 10, 1,
                                   seed=0)
  assert list(result.sum) == [3, 4]


def test_merging_partial_sums_in_any_order_is_exact():
  inputs = {u: np.arange(20, dtype=np.int64) * u % 97 for u in range(6)}
  run = _run_to_masked(inputs, 97, 3)
  config = run.config
  partials = []
  for group in ([0, 3], [1], [5, 2, 4]):
    partial = secagg.aggregation.zero(config)
    for u in group:
      partial = secagg.aggregation.accumulate(config, partial, run.masked[u])
    partials.append(partial)
  merged = secagg.aggregation.merge(
      config, partials[2],
      secagg.aggregation.merge(config, partials[0], partials[1]))
  assert all(np.array_equal(a, b)
             for a, b in zip(merged.values, run.total.values))
  with pytest.raises(secagg.SecAggError, match='added twice'):
    secagg.aggregation.merge(config, partials[0], partials[0])
  total = _unmask(run, _answers(run, range(6)), total=merged)
  expected = _modular_sum(inputs.values(), 97).astype(np.int64)
  assert np.array_equal(total, expected)


def test_a_hundred_clients_with_a_thousand_elements():
  rng = np.random.default_rng(100)
  inputs = {f'client{u:03d}': rng.integers(0, 2**32, size=1000,
                                           dtype=np.uint64).astype(np.int64)
            for u in range(100)}
  ids = sorted(inputs)
  start = time.perf_counter()
  result = secagg.secure_sum_round(
      inputs, 2**32, 51, dropped_before_sharing=ids[:3],
      dropped_before_input=ids[3:13], dropped_before_unmasking=ids[13:49],
      seed=5)
  elapsed = time.perf_counter() - start
  assert result.contributors == tuple(ids[13:])
  assert len(result.responders) == 51
  expected = _modular_sum([inputs[u] for u in ids[13:]], 2**32)
  assert np.array_equal(result.sum.astype(object), expected)
  assert elapsed < 30, elapsed


# What the server and the aggregator see.

def test_masked_inputs_differ_from_inputs_and_from_every_partial_sum():
  modulus = 2**32
  rng = np.random.default_rng(3)
  inputs = {u: rng.integers(0, 1000, size=300).astype(np.int64)
            for u in range(5)}
  run = _run_to_masked(inputs, modulus, 3)
  subsets = [s for k in range(1, 6)
             for s in itertools.combinations(range(5), k)]
  plain = {s: _modular_sum([inputs[u] for u in s], modulus) for s in subsets}
  masked = {s: _modular_sum([run.masked[u].values[0] for u in s], modulus)
            for s in subsets}
  for u in range(5):
    y = run.masked[u].values[0].astype(object)
    assert np.count_nonzero((y - inputs[u]) % modulus == 0) <= 1
    for s in subsets:
      assert np.count_nonzero(y == plain[s]) <= 1, (u, s)
  for s in subsets:
    # Masks cancel in no subset, not even all of them (self masks remain).
    assert np.count_nonzero(masked[s] == plain[s]) <= 1, s


@pytest.mark.parametrize('modulus', [16, 10])
@pytest.mark.parametrize('fill', ['zeros', 'top'])
def test_masked_inputs_are_uniform_whatever_the_input(modulus, fill):
  value = 0 if fill == 'zeros' else modulus - 1
  inputs = {u: np.full([6000], value, np.int64) for u in range(3)}
  result = secagg.secure_sum_round(inputs, modulus, 2, seed=modulus)
  masked = _masked_values(result)
  assert len(masked) == 3
  for values in masked:
    counts = np.bincount(values.astype(int), minlength=modulus)
    assert stats.chisquare(counts).pvalue > 1e-4, counts
  assert np.all(result.sum == (3 * value) % modulus)


def test_the_server_sees_shares_only_encrypted_for_their_recipient():
  inputs = {u: np.arange(3, dtype=np.int64) for u in range(4)}
  run = _run_to_masked(inputs, 2**8, 3)
  message = next(m for m in run.encrypted if (m.sender, m.recipient) == (0, 1))
  sender_public = run.roster[0].cipher_public_key

  def open_with(private_key):
    return keys_lib.decrypt_shares(run.config, private_key, sender_public, 0,
                                   1, message.ciphertext)

  plaintext = open_with(run.keys[1].cipher_key)
  seed_share = int.from_bytes(plaintext[:shamir.FIELD_BYTES], 'big')
  assert seed_share == run.masking[1].held_shares[0][0]
  assert plaintext not in message.ciphertext
  for wrong in (2, 3):  # Another client's key opens nothing.
    with pytest.raises(InvalidTag):
      open_with(run.keys[wrong].cipher_key)
  # The mask key, which the server reconstructs for a dropped client, is not
  # the key that encrypts its shares.
  with pytest.raises(InvalidTag):
    open_with(run.keys[1].mask_key)
  # Its key binds the direction and the round: the pair's one agreement
  # opens it as 0 -> 1 of this round only.
  with pytest.raises(InvalidTag):
    keys_lib.decrypt_shares(run.config, run.keys[0].cipher_key,
                            run.roster[1].cipher_public_key, 1, 0,
                            message.ciphertext)
  with pytest.raises(InvalidTag):
    keys_lib.decrypt_shares(
        dataclasses.replace(run.config, round_id='another round'),
        run.keys[1].cipher_key, sender_public, 0, 1, message.ciphertext)
  flipped = bytes([message.ciphertext[0] ^ 1]) + message.ciphertext[1:]
  tampered = dataclasses.replace(message, ciphertext=flipped)
  inbox = [tampered if m is message else m for m in run.inbox[1]]
  with pytest.raises(secagg.SecAggError,
                     match='client 1: shares from 0 do not decrypt'):
    secagg.masked_input(run.sharing[1], inputs[1], inbox)


def test_a_late_input_stays_hidden_by_its_self_mask():
  # The server treats client 4 as dropped and so learns its mask key; if 4's
  # masked input then arrives late, removing the pairwise masks still leaves
  # x_4 + PRG(b_4), which is not x_4.
  modulus = 2**32
  inputs = {u: np.arange(200, dtype=np.int64) + u for u in range(5)}
  run = _run_to_masked(inputs, modulus, 3)
  total = secagg.aggregation.zero(run.config)
  for u in range(4):
    total = secagg.aggregation.accumulate(run.config, total, run.masked[u])
  responses = _answers(run, list(range(4)))
  expected = _modular_sum([inputs[u] for u in range(4)], modulus)
  assert np.array_equal(_unmask(run, responses, total=total),
                        expected.astype(np.int64))
  assert all(4 not in r.self_mask_shares for r in responses)
  with_late = secagg.aggregation.accumulate(run.config, total, run.masked[4])
  with pytest.raises(secagg.ProtocolViolationError,
                     match=r'mask key shares of clients \[4\]'):
    _unmask(run, responses, total=with_late)
  mask_key = shamir.reconstruct(shamir.Share(r.x, r.key_shares[4])
                                for r in responses[:3])
  private = x25519.X25519PrivateKey.from_private_bytes(
      mask_key.to_bytes(32, 'big'))
  assert keys_lib.public_bytes(private) == run.roster[4].mask_public_key
  y = run.masked[4].values[0]
  for v in range(4):  # Client 4 > v subtracted PRG(s_4v): add it back.
    seed = keys_lib.pair_seed(run.config, private, 4,
                              run.roster[v].mask_public_key, v)
    y = masks.add_masks(y, [keys_lib.pair_mask_key(run.config, seed, 0)], [],
                        modulus)
  x = inputs[4].astype(np.uint64)
  assert np.count_nonzero(y == x) <= 1
  # What is left is exactly x_4 + PRG(b_4); b_4 never left client 4.
  self_mask = keys_lib.self_mask_key(run.config,
                                     run.sharing[4].self_mask_seed, 4, 0)
  assert np.array_equal(masks.add_masks(y, [], [self_mask], modulus), x)


# Dropouts.

def _inputs(n, size=4):
  return {u: {'w': np.arange(size, dtype=np.int64) + 10 * u} for u in range(n)}


@pytest.mark.parametrize('k', [0, 1, 2, 3])
def test_dropouts_before_input_leave_the_survivors_exact_sum(k):
  inputs = _inputs(6)
  dropped = [5, 0, 3][:k]
  result = secagg.secure_sum_round(inputs, {'w': 1000}, 3,
                                   dropped_before_input=dropped, seed=k)
  survivors = [u for u in range(6) if u not in dropped]
  assert list(result.contributors) == survivors
  _assert_sum(result.sum, inputs, {'w': 1000}, survivors)


@pytest.mark.parametrize('k', [0, 1, 3])
def test_dropouts_during_unmasking_keep_the_sum_exact(k):
  inputs = _inputs(6)
  dropped = [1, 4, 2][:k]
  result = secagg.secure_sum_round(inputs, {'w': 1000}, 3,
                                   dropped_before_unmasking=dropped, seed=k)
  assert len(result.responders) == 6 - k
  _assert_sum(result.sum, inputs, {'w': 1000}, list(range(6)))


def test_dropouts_at_every_step_together():
  inputs = _inputs(7)
  result = secagg.secure_sum_round(
      inputs, {'w': 2**32}, 3, dropped_before_sharing=[6],
      dropped_before_input=[2, 0], dropped_before_unmasking=[1], seed=9)
  assert result.share_senders == (0, 1, 2, 3, 4, 5)
  _assert_sum(result.sum, inputs, {'w': 2**32}, [1, 3, 4, 5])


@pytest.mark.parametrize('dropouts, step, survivors', [
    ({'dropped_before_sharing': [0, 1, 2, 3]}, 'share_keys', 2),
    ({'dropped_before_input': [0, 1, 2, 3]}, 'masked_input', 2),
    ({'dropped_before_input': [0, 1], 'dropped_before_sharing': [2, 3]},
     'masked_input', 2),
    ({'dropped_before_unmasking': [0, 1, 2, 4]}, 'unmasking', 2),
    ({'dropped_before_input': [5], 'dropped_before_unmasking': [0, 1, 2, 4]},
     'unmasking', 1),
])
def test_fewer_than_t_survivors_fail_the_round_with_no_result(
    dropouts, step, survivors):
  with pytest.raises(secagg.RoundFailedError) as failure:
    secagg.secure_sum_round(_inputs(6), {'w': 1000}, 3, seed=0, **dropouts)
  error = failure.value
  assert (error.step, error.survivors, error.threshold) == (step, survivors, 3)
  assert re.search(f"at step '{step}': {survivors} client\\(s\\) survived, "
                   'fewer than the threshold 3', str(error))


def test_clients_refuse_to_unmask_fewer_than_t_contributors():
  run = _run_to_masked(_inputs(5), {'w': 1000}, 3)
  with pytest.raises(secagg.RoundFailedError, match='2 client'):
    secagg.unmasking_shares(run.masking[0], [0, 1])
  assert run.masking[0].answered is None
  partial = secagg.aggregation.zero(run.config)
  for u in (0, 1):
    partial = secagg.aggregation.accumulate(run.config, partial, run.masked[u])
  with pytest.raises(secagg.RoundFailedError, match="'masked_input'"):
    _unmask(run, [], total=partial)


# Attempts to learn more than the sum.

def test_the_server_cannot_collect_both_secrets_of_a_client():
  run = _run_to_masked(_inputs(5), {'w': 1000}, 3)
  everyone = list(range(5))
  # The server claims to clients 3 and 4 that client 0 dropped, hoping for
  # shares of its mask key alongside the others' shares of its self-mask seed.
  honest = _answers(run, everyone, responders=(0, 1, 2))
  lied_to = _answers(run, [1, 2, 3, 4], responders=(3, 4))
  assert all(0 in r.key_shares and 0 not in r.self_mask_shares
             for r in lied_to)
  with pytest.raises(
      secagg.ProtocolViolationError,
      match=r'both the self-mask seed and the mask key of clients \[0\]'):
    _unmask(run, honest + lied_to)
  # And a client that answered once will not answer a different list.
  with pytest.raises(secagg.ProtocolViolationError,
                     match=r'client 3: already revealed .* clients \[0\]'):
    secagg.unmasking_shares(run.masking[3], everyone)
  again = secagg.unmasking_shares(run.masking[3], [4, 3, 2, 1])  # Same set.
  assert again == lied_to[0]


def test_mask_key_shares_of_a_contributor_are_refused():
  run = _run_to_masked(_inputs(5), {'w': 1000}, 3)
  lies = _answers(run, [1, 2, 3, 4], responders=(2, 3, 4))
  with pytest.raises(
      secagg.ProtocolViolationError,
      match=r'mask key shares of clients \[0\], whose inputs are in the sum'):
    _unmask(run, lies)


def test_self_mask_seed_shares_of_a_non_contributor_are_refused():
  run = _run_to_masked(_inputs(5), {'w': 1000}, 3, dropped=[4])
  responses = _answers(run, list(range(4)))
  forged = dataclasses.replace(
      responses[0], self_mask_shares={**responses[0].self_mask_shares,
                                      4: run.masking[0].held_shares[4][0]})
  with pytest.raises(secagg.ProtocolViolationError,
                     match=r'both .* clients \[4\]'):
    _unmask(run, [forged] + responses[1:])


@pytest.mark.parametrize('contributors, match', [
    ([0, 1, 2, 9], r'contributors \[9\] did not share keys'),
    ([1, 2, 3], 'not listed among the contributors'),
    ([0, 0, 1, 2], 'names a client twice'),
])
def test_clients_refuse_contributor_lists_that_make_no_sense(contributors,
                                                             match):
  run = _run_to_masked(_inputs(5), {'w': 1000}, 3)
  with pytest.raises(secagg.ProtocolViolationError, match=match):
    secagg.unmasking_shares(run.masking[0], contributors)


def test_a_corrupted_seed_share_gives_a_wrong_sum_undetected():
  run = _run_to_masked(_inputs(5), {'w': 1000}, 3)
  responses = _answers(run, list(range(5)))
  shares = responses[0].self_mask_shares
  corrupted = dataclasses.replace(
      responses[0], self_mask_shares={**shares, 2: shares[2] + 1})
  good = _unmask(run, responses)
  bad = _unmask(run, [corrupted] + responses[1:])
  assert not np.array_equal(good['w'], bad['w'])


def test_a_corrupted_key_share_is_caught_by_the_public_key():
  run = _run_to_masked(_inputs(5), {'w': 1000}, 3, dropped=[2])
  responses = _answers(run, [0, 1, 3, 4])
  corrupted = dataclasses.replace(
      responses[0], key_shares={2: responses[0].key_shares[2] + 1})
  with pytest.raises(
      secagg.SecAggError,
      match='client 2: its reconstructed mask key does not match'):
    _unmask(run, [corrupted] + responses[1:])


def test_responses_must_come_from_contributors_once_each():
  run = _run_to_masked(_inputs(5), {'w': 1000}, 3, dropped=[4])
  responses = _answers(run, list(range(4)))
  with pytest.raises(secagg.SecAggError, match='client 1 responded twice'):
    _unmask(run, responses + [responses[1]])
  moved = dataclasses.replace(responses[1], x=9)
  with pytest.raises(secagg.SecAggError, match='share point 9'):
    _unmask(run, [moved] + responses[2:])


# Randomness.

def test_a_seed_repeats_a_round_and_rounds_differ():
  inputs = _inputs(4, size=50)

  def run(**kwargs):
    return secagg.secure_sum_round(inputs, {'w': 2**32}, 2, **kwargs)

  def unmasked_messages(result):
    return [m for m in result.messages_to_server
            if not isinstance(m, secagg.MaskedInput)]

  a, b = run(seed=1, round_id=0), run(seed=1, round_id=0)
  assert unmasked_messages(a) == unmasked_messages(b)
  assert all(np.array_equal(x, y)
             for x, y in zip(_masked_values(a), _masked_values(b)))
  for other in (run(seed=1, round_id=1), run(seed=2, round_id=0), run()):
    for x, y in zip(_masked_values(a), _masked_values(other)):
      assert np.count_nonzero(x == y) <= 1
    assert np.array_equal(other.sum['w'], a.sum['w'])


def test_masks_differ_per_leaf_and_per_round_from_the_same_keys():
  inputs = {u: {'a': np.zeros(100, np.int64), 'b': np.zeros(100, np.int64)}
            for u in range(3)}
  run = _run_to_masked(inputs, 2**32, 2)
  first, second = run.masked[0].values
  assert np.count_nonzero(first == second) <= 1
  config = run.config
  other_round = dataclasses.replace(config, round_id=1)

  def seed(config, u, v):
    return keys_lib.pair_seed(config, run.keys[u].mask_key, u,
                              run.roster[v].mask_public_key, v)

  assert seed(config, 0, 1) == seed(config, 1, 0)
  assert seed(config, 0, 1) != seed(other_round, 0, 1)
  assert (keys_lib.pair_mask_key(config, seed(config, 0, 1), 0) !=
          keys_lib.pair_mask_key(other_round, seed(config, 0, 1), 0))


def test_no_secret_comes_from_pythons_random_module():
  source = pathlib.Path(secagg.__file__).parent
  pattern = r'^\s*(import random|from random)|np\.random|numpy\.random'
  for path in source.glob('*.py'):
    assert not re.search(pattern, path.read_text(), re.M), path


# Bad input: a clear error naming the client and the leaf.

@pytest.mark.parametrize('bad, match', [
    (np.array([1, 16, 0], np.int64),
     r"client 2, leaf 'w': value 16 at index \(1,\) is outside \[0, 16\)"),
    (np.array([1, -1, 0], np.int64),
     r"client 2, leaf 'w': value -1 at index \(1,\)"),
    (np.array([1., 2., 3.], np.float32),
     "client 2, leaf 'w': dtype float32 is not an integer dtype"),
    (np.array([True, False, True]),
     "client 2, leaf 'w': dtype bool is not an integer"),
    (np.array([1, 2, 3], np.int32),
     "client 2, leaf 'w': dtype int32 differs from the round's int64"),
    (np.array([1, 2], np.int64), r"client 2, leaf 'w': shape \(2,\) differs"),
])
def test_bad_values_are_refused_naming_client_and_leaf(bad, match):
  inputs = {u: {'v': np.zeros([2], np.int64), 'w': np.zeros([3], np.int64)}
            for u in range(4)}
  inputs[2]['w'] = bad
  with pytest.raises(secagg.SecAggError, match=match):
    secagg.secure_sum_round(inputs, 16, 2, seed=0)


_V, _W = np.zeros([2], np.int64), np.zeros([3], np.int64)


@pytest.mark.parametrize('bad, match', [
    ({'v': _V}, r"client 3: .* missing leaves \['w'\]"),
    ({'v': _V, 'w': _W, 'x': _W}, r"client 3: .* unexpected leaves \['x'\]"),
    ({'v': _V, 'w': [_W]},
     r"client 3: .* missing leaves \['w'\], unexpected leaves \['w/0'\]"),
    ((_V, _W), r'client 3: .*structure'),
])
def test_mismatched_structures_are_refused_naming_the_client(bad, match):
  inputs = {u: {'v': _V, 'w': _W} for u in range(4)}
  inputs[3] = bad
  with pytest.raises(secagg.SecAggError, match=match):
    secagg.secure_sum_round(inputs, 16, 2, seed=0)


def test_the_first_clients_input_is_checked_like_the_others():
  inputs = {u: {'w': np.zeros([3], np.int64)} for u in range(3)}
  inputs[0] = {'w': np.zeros([3], np.float64)}
  with pytest.raises(
      secagg.SecAggError,
      match="client 0 .*leaf 'w': dtype float64 is not an integer"):
    secagg.secure_sum_round(inputs, 16, 2, seed=0)


@pytest.mark.parametrize('moduli, threshold, match', [
    (16, 0, r'threshold 0 is out of range \[1, 4\]'),
    (16, 5, r'threshold 5 is out of range \[1, 4\]'),
    (16, True, 'threshold True is not an int'),
    (16, 2.0, 'threshold 2.0 is not an int'),
    (1, 2, r"leaf 'w': modulus 1 is out of range \[2, 2\*\*64\]"),
    (2**64 + 1, 2, "leaf 'w': modulus 18446744073709551617 is out of range"),
    ({'w': 2**63 + 1}, 2,
     "leaf 'w': a sum modulo 9223372036854775809 does not fit its dtype int64"),
    ({'w': 2.5}, 2, "leaf 'w': modulus 2.5 is not an int"),
    ({'v': 16}, 2, r"moduli do not match .* missing leaves \['w'\]"),
])
def test_bad_parameters_are_refused(moduli, threshold, match):
  inputs = {u: {'w': np.zeros([3], np.int64)} for u in range(4)}
  with pytest.raises(secagg.SecAggError, match=match):
    secagg.secure_sum_round(inputs, moduli, threshold, seed=0)


def test_a_modulus_must_fit_the_leafs_dtype():
  inputs = {u: {'w': np.zeros([3], np.int8)} for u in range(3)}
  with pytest.raises(
      secagg.SecAggError,
      match="leaf 'w': a sum modulo 256 does not fit its dtype int8"):
    secagg.secure_sum_round(inputs, 256, 2, seed=0)
  result = secagg.secure_sum_round(inputs, 128, 2, seed=0)
  assert result.sum['w'].dtype == np.int8


@pytest.mark.parametrize('ids, dropouts, match', [
    ([0, 1, '2'], {}, 'mix ints and strs'),
    ([0, 1, 2], {'dropped_before_input': [7]},
     r'dropped_before_input: \[7\] are not clients'),
    ([0, 1, 2], {'dropped_before_input': [1], 'dropped_before_unmasking': [1]},
     'client 1 is in both dropped_before_input and dropped_before_unmasking'),
    ([0, 1, 2.5], {}, 'client id 2.5: expected an int or a str'),
])
def test_bad_clients_are_refused(ids, dropouts, match):
  inputs = {u: np.zeros([2], np.int64) for u in ids}
  with pytest.raises(secagg.SecAggError, match=match):
    secagg.secure_sum_round(inputs, 16, 2, seed=0, **dropouts)


def test_a_roster_without_the_clients_own_keys_is_refused():
  config = secagg.make_config(np.zeros([2], np.int64), 16, 2)
  keys, _ = secagg.advertise_keys('a', config, secagg.SeededRandom(0))
  _, other = secagg.advertise_keys('b', config, secagg.SeededRandom(1))
  _, impostor = secagg.advertise_keys('a', config, secagg.SeededRandom(2))
  mine = keys.advertisement()
  with pytest.raises(secagg.SecAggError,
                     match="client 'a': the roster does not"):
    secagg.share_keys(keys, [impostor, other])
  with pytest.raises(secagg.RoundFailedError,
                     match="'advertise_keys': 1 client"):
    secagg.share_keys(keys, [mine])
  with pytest.raises(secagg.SecAggError,
                     match=r"\['a'\] appear more than once"):
    secagg.share_keys(keys, [mine, other, mine])


# Cost.

def test_measured_bits_match_the_cost_formula():
  inputs = {u: {'a': np.zeros([10], np.int64), 'b': np.zeros([2, 3], np.int32)}
            for u in range(4)}
  result = secagg.secure_sum_round(inputs, {'a': 2**32, 'b': 10}, 3, seed=0)
  assert secagg.masked_input_bits(result.config) == 10 * 32 + 6 * 4
  expected = secagg.client_cost_bits(result.config, 4)
  share_bits = (2 * 33 + 16) * 8
  assert expected == {
      'advertise_keys': secagg.StepBits(512, 3 * 512),
      'share_keys': secagg.StepBits(3 * share_bits, 3 * share_bits),
      'masked_input': secagg.StepBits(344, 0),
      'consistency': secagg.StepBits(0, 0),
      'unmasking': secagg.StepBits(4 * 257, 4),
  }
  measured = secagg.measured_cost_bits(result)
  assert sorted(measured) == [0, 1, 2, 3]
  for u in range(4):
    assert measured[u] == expected, u


def test_dropped_clients_send_less():
  result = secagg.secure_sum_round(_inputs(5), {'w': 2**8}, 2, seed=0,
                                   dropped_before_input=[1],
                                   dropped_before_unmasking=[2])
  measured = secagg.measured_cost_bits(result)
  assert measured[1]['masked_input'].sent == 0
  assert measured[1]['unmasking'] == secagg.StepBits(0, 0)
  assert measured[2]['unmasking'] == secagg.StepBits(0, 5)
  # A survivor reveals one share per client that shared keys.
  assert measured[0]['unmasking'] == secagg.StepBits(5 * 257, 5)


def test_a_stateless_worker_redraws_a_clients_sharing_state():
  """`sharing_state` with the client's seeded source gives what `share_keys`
  kept, without encrypting, and the redrawn state masks and unmasks alike."""
  config = secagg.make_config(np.zeros(3, np.uint64), 2**20, 3)
  keys = {}
  for u in range(4):
    keys[u], _ = secagg.advertise_keys(u, config,
                                       secagg.SeededRandom(f'k{u}'))
  roster = tuple(k.advertisement() for k in keys.values())
  for u, k in keys.items():
    kept, outgoing = secagg.share_keys(k, roster, secagg.SeededRandom(u))
    redrawn = secagg.sharing_state(k, roster, secagg.SeededRandom(u))
    assert redrawn == kept and len(outgoing) == 3
    other = secagg.sharing_state(k, roster, secagg.SeededRandom(u + 10))
    assert other.self_mask_seed != kept.self_mask_seed
  foreign = secagg.advertise_keys(9, config, secagg.SeededRandom('x'))[1]
  with pytest.raises(secagg.SecAggError, match='does not carry this client'):
    secagg.sharing_state(keys[0], roster[1:] + (foreign,),
                         secagg.SeededRandom(0))
