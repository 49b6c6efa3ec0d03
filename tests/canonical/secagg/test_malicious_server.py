"""Secure aggregation against a malicious server (Bonawitz et al. 2017's
active version), at the library's level: this file plays the server, and
tries each attack on our client code. Where an attack needs the defence to
fail, the same attack is shown to work on clients that trust their server
(no identity keys), so that each test could fail.
"""

import numpy as np
import pytest

from canonical import secagg
from canonical.secagg import client
from canonical.secagg import identity
from canonical.secagg import keys as keys_lib
from canonical.secagg import randomness
from canonical.secagg import server

MODULUS = 2**16
ROUND = 7


def _inputs(n):
  return {u: np.array([10 * u + 1, u], np.int64) for u in range(1, n + 1)}


def _advertised(n, threshold, enrolled=True, neighbors=None):
  """n clients' round keys and the advertisements they sent."""
  inputs = _inputs(n)
  config = secagg.make_config(inputs[1], MODULUS, threshold, ROUND, neighbors)
  identities = {u: identity.identity_from_secret(bytes([u]) * 32)
                for u in inputs}
  trust = identity.enroll(identities) if enrolled else None
  keys, roster = {}, []
  for u in inputs:
    keys[u], advertisement = client.advertise_keys(
        u, config, randomness.source(f'keys-{u}'),
        identities[u] if enrolled else None, trust)
    roster.append(advertisement)
  return inputs, config, keys, tuple(roster)


def _masked(keys, roster, inputs, sharers):
  """Steps 2 and 3 for `sharers`, every one given `roster`: their masking
  states and the aggregator's total."""
  sharing, encrypted = {}, []
  for u in sharers:
    sharing[u], outgoing = client.share_keys(
        keys[u], roster, randomness.source(f'share-{u}'))
    encrypted.extend(outgoing)
  inbox = server.relay_shares(encrypted, sharers)
  config = keys[sharers[0]].config
  masking, total = {}, secagg.aggregation.zero(config)
  for u in sharers:
    masking[u], masked = client.masked_input(sharing[u], inputs[u], inbox[u])
    total = secagg.aggregation.accumulate(config, total, masked)
  return sharing, masking, total


def test_an_honest_round_sums_and_every_message_is_signed():
  inputs = _inputs(5)
  result = secagg.secure_sum_round(inputs, MODULUS, 3, seed=0,
                                   malicious_server=True,
                                   dropped_before_unmasking=[2])
  np.testing.assert_array_equal(result.sum, sum(inputs.values()))
  advertisements = [m for m in result.messages_to_server
                    if isinstance(m, secagg.KeyAdvertisement)]
  assert all(len(a.signature) == identity.SIGNATURE_BYTES
             for a in advertisements)
  whole = secagg.secure_sum_round(inputs, MODULUS, 3, seed=0,
                                  malicious_server=True)
  measured = secagg.measured_cost_bits(whole)
  expected = secagg.client_cost_bits(whole.config, 5, malicious_server=True)
  assert measured[1] == expected
  assert expected['consistency'] == secagg.StepBits(512, 0)


def test_substituted_keys_are_refused_and_open_nothing():
  """The server advertises key pairs of its own as client 5's, to learn the
  shares the others encrypt for 5 (and with them, their secrets)."""
  for enrolled in (False, True):
    inputs, config, keys, roster = _advertised(5, 3, enrolled)
    server_keys, fake = client.advertise_keys(5, config,
                                              randomness.source('server'))
    # The server even signs with an identity of its own.
    own = identity.identity_from_secret(b'the server' * 4)
    signed_fake = secagg.KeyAdvertisement(
        5, fake.cipher_public_key, fake.mask_public_key, identity.sign(
            own, *identity.advertisement_label(
                ROUND, 5, fake.cipher_public_key, fake.mask_public_key)))
    forged = tuple(a if a.sender != 5 else signed_fake for a in roster)
    state, outgoing = client.share_keys(keys[1], forged,
                                        randomness.source('share'))
    for_five = [m for m in outgoing if m.recipient == 5]
    if not enrolled:  # The attack works on clients that trust the server:
      plaintext = keys_lib.decrypt_shares(
          config, server_keys.cipher_key, roster[0].cipher_public_key, 1, 5,
          for_five[0].ciphertext)
      assert len(plaintext) == secagg.messages.SHARES_PLAINTEXT_BYTES
      continue
    assert not for_five  # Nothing of client 1's is encrypted to 5's keys.
    assert state.dropped == {
        5: "its advertisement's signature does not verify"}


def test_a_client_not_enrolled_is_dropped_named():
  inputs, config, keys, roster = _advertised(4, 3)
  _, stranger = client.advertise_keys(9, config, randomness.source(9))
  state, outgoing = client.share_keys(keys[1], roster + (stranger,),
                                      randomness.source('share'))
  assert state.dropped == {9: 'not enrolled in the trust store'}
  assert {m.recipient for m in outgoing} == {2, 3, 4}


def test_a_round_goes_on_without_a_client_whose_keys_were_tampered_with():
  """Client 5's advertisement reaches every other client altered: each drops
  it, and the round sums the other four."""
  inputs, config, keys, roster = _advertised(5, 3)
  five = roster[4]
  tampered = roster[:4] + (secagg.KeyAdvertisement(
      5, five.mask_public_key, five.cipher_public_key, five.signature),)
  sharing, masking, total = _masked(keys, tampered, inputs, [1, 2, 3, 4])
  assert all(sharing[u].dropped == {
      5: "its advertisement's signature does not verify"} for u in sharing)
  contributors = tuple(sorted(total.contributors))
  assert contributors == (1, 2, 3, 4)
  signatures = {u: client.sign_contributors(masking[u], contributors).signature
                for u in contributors}
  responses = [client.unmasking_shares(masking[u], contributors, signatures)
               for u in contributors]
  total_sum = server.unmask(config, tampered, [1, 2, 3, 4], total, responses)
  np.testing.assert_array_equal(total_sum,
                                sum(inputs[u] for u in contributors))


def test_a_replayed_round_id_is_refused():
  inputs, config, keys, roster = _advertised(3, 2)
  me = identity.identity_from_secret(bytes([1]) * 32)
  trust = identity.enroll({1: me, 2: identity.identity_from_secret(b'2' * 32)})
  served = identity.ServedRounds()
  first, _ = client.advertise_keys(1, config, randomness.source(1), me, trust,
                                   served)
  with pytest.raises(secagg.ProtocolViolationError,
                     match=f'round {ROUND} was served before'):
    client.advertise_keys(1, config, randomness.source(1), me, trust, served)
  later = secagg.make_config(inputs[1], MODULUS, 2, ROUND + 1)
  client.advertise_keys(1, later, randomness.source(1), me, trust, served)
  assert first.config.round_id == ROUND


@pytest.mark.parametrize('n, threshold, neighbors', [
    (6, 3, None), (4, 2, None), (12, 2, 4)])
def test_a_threshold_of_half_the_holders_is_refused(n, threshold, neighbors):
  """With t at most half, two disjoint contributor lists could each reach t:
  their two sums differ by the inputs of the clients in one only."""
  inputs, config, keys, roster = _advertised(n, threshold,
                                             neighbors=neighbors)
  hood = secagg.server.roster_for(config, roster, 1)
  with pytest.raises(secagg.ProtocolViolationError,
                     match=f'threshold {threshold} is not more than half'):
    client.share_keys(keys[1], hood.advertisements, randomness.source(1),
                      hood.client_ids or None)
  # Trusting its server, a client takes it (the attack's first step).
  plain = _advertised(n, threshold, enrolled=False, neighbors=neighbors)
  hood = secagg.server.roster_for(plain[1], plain[3], 1)
  client.share_keys(plain[2][1], hood.advertisements, randomness.source(1),
                    hood.client_ids or None)


def test_two_contributor_lists_cannot_both_be_unmasked():
  """t = 3 of 5. The server shows {1, 2, 3, 4} to clients 1-3 and
  {2, 3, 4, 5} to 4 and 5, to unmask both sums: their difference is
  x1 - x5. A client signs one list a round, so the second list never
  gathers t signatures, forged ones do not count, and no client reveals a
  share for a list it did not sign."""
  inputs, config, keys, roster = _advertised(5, 3)
  _, masking, _ = _masked(keys, roster, inputs, [1, 2, 3, 4, 5])
  first, second = (1, 2, 3, 4), (2, 3, 4, 5)
  on_first = {u: client.sign_contributors(masking[u], first).signature
              for u in (1, 2, 3)}
  on_second = {u: client.sign_contributors(masking[u], second).signature
               for u in (4, 5)}
  with pytest.raises(secagg.ProtocolViolationError,
                     match='already signed another contributor list'):
    client.sign_contributors(masking[2], second)
  forged = {**on_second, 2: on_first[2], 3: bytes(64)}
  with pytest.raises(secagg.ProtocolViolationError,
                     match='carries 2 valid signatures of its members '
                     'holding its shares, fewer than the threshold 3'):
    client.unmasking_shares(masking[4], second, forged)
  with pytest.raises(secagg.ProtocolViolationError,
                     match='a contributor list it did not sign'):
    client.unmasking_shares(masking[4], first, on_first)
  # The first list is unmasked as usual.
  shares = client.unmasking_shares(masking[1], first, on_first)
  assert not set(shares.self_mask_shares) & set(shares.key_shares)
  assert set(shares.key_shares) == {5}


def test_without_the_check_a_split_unmasks_both_lists():
  """The same split on clients that trust their server: each list is
  unmasked, and the two sums give x1 - x5 (what the check prevents)."""
  inputs, config, keys, roster = _advertised(5, 3, enrolled=False)
  sums = []
  for contributors in ((1, 2, 3, 4), (2, 3, 4, 5)):
    _, masking, total = _masked(keys, roster, inputs, list(contributors))
    responses = [client.unmasking_shares(masking[u], contributors)
                 for u in contributors]
    sums.append(server.unmask(config, roster, list(contributors), total,
                              responses))
  np.testing.assert_array_equal((sums[0] - sums[1]) % MODULUS,
                                (inputs[1] - inputs[5]) % MODULUS)


def test_the_trust_store_round_trips_and_refuses_garbage():
  identities = {u: identity.identity_from_secret(u.encode() * 32)
                for u in ('a', 'b')}
  trust = identity.enroll(identities)
  again = identity.TrustStore.from_bytes(trust.to_bytes())
  signature = identity.sign(identities['a'], 'x', 1)
  assert again.verifies('a', signature, 'x', 1)
  assert not again.verifies('b', signature, 'x', 1)
  assert not again.verifies('a', signature, 'x', 2)
  assert not again.verifies('c', signature, 'x', 1)
  with pytest.raises(secagg.SecAggError, match='malformed trust store'):
    identity.TrustStore.from_bytes(b'{"clients": []}')
  with pytest.raises(secagg.SecAggError, match='not 32 bytes'):
    identity.TrustStore({'a': b'short'})
