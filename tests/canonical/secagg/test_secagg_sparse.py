"""Sparse secure aggregation (SecAgg+, `neighbors=k`): the ring graph, exact
sums with dropouts, what each client sends, and the refusals that keep a
disconnected set of contributors from being unmasked part by part."""

import numpy as np
import pytest

from canonical import secagg
from canonical.secagg import graph
from canonical.secagg import sums as secure_sums

from test_secagg_protocol import _run_to_masked


def _inputs(n, size=4):
  return {u: np.arange(size, dtype=np.int64) + 10 * u for u in range(n)}


def _config(neighbors, threshold=2, round_id=0):
  return secagg.make_config(np.zeros(4, np.int64), 2**20, threshold,
                            round_id, neighbors)


def _exact(result, inputs, modulus=2**20):
  expected = sum(inputs[u] for u in result.contributors) % modulus
  assert np.array_equal(result.sum, expected)


# The graph.

@pytest.mark.parametrize('n,k', [(5, 2), (9, 4), (20, 6), (21, 8)])
def test_the_ring_gives_every_client_k_mutual_neighbors(n, k):
  hoods = graph.neighborhoods(_config(k), range(n))
  assert sorted(hoods) == list(range(n))
  for u, hood in hoods.items():
    assert len(hood) == k and u not in hood
    assert all(u in hoods[v] for v in hood)
  assert graph.is_connected(hoods, range(n))


def test_the_ring_order_comes_from_the_round_id():
  ids = list(range(40))
  orders = {tuple(graph.ring_order(r, ids)) for r in ('1/a', '2/a', '1/b')}
  assert len(orders) == 3
  assert graph.ring_order('1/a', ids) == graph.ring_order('1/a', ids[::-1])
  assert tuple(graph.ring_order('1/a', ids)) != tuple(ids)


@pytest.mark.parametrize('k', [None, 8, 10])
def test_k_of_at_least_n_minus_1_is_the_complete_graph(k):
  hoods = graph.neighborhoods(_config(k), range(9))
  assert all(hood == set(range(9)) - {u} for u, hood in hoods.items())


def test_is_connected_sees_a_split_ring():
  ring = {u: frozenset({(u - 1) % 6, (u + 1) % 6}) for u in range(6)}
  assert graph.is_connected(ring, [5, 0, 1, 2])  # Two neighbors removed.
  assert not graph.is_connected(ring, [0, 2, 4])  # Two clients removed.
  assert not graph.is_connected(ring, [0, 1, 3, 4])


@pytest.mark.parametrize('neighbors,match', [
    (3, 'even int'), (0, 'even int'), (True, 'even int'), ('4', 'even int')])
def test_bad_neighbors_are_refused(neighbors, match):
  with pytest.raises(secagg.SecAggError, match=match):
    _config(neighbors)


def test_a_threshold_above_the_neighborhood_is_refused():
  with pytest.raises(secagg.SecAggError,
                     match=r'threshold 6 is more than the 5 clients'):
    _config(4, threshold=6)
  with pytest.raises(secagg.SecAggError, match='threshold 6 is more'):
    secagg.secure_sum_round(_inputs(10), 2**20, 6, neighbors=4, seed=0)


# Sums.

@pytest.mark.parametrize('n,k,t', [(7, 2, 2), (12, 4, 3), (30, 6, 4),
                                   (9, 8, 5)])
def test_sparse_rounds_sum_exactly(n, k, t):
  inputs = _inputs(n)
  result = secagg.secure_sum_round(inputs, 2**20, t, neighbors=k, seed=n)
  assert result.contributors == tuple(range(n))
  _exact(result, inputs)


def test_sparse_rounds_sum_exactly_with_dropouts_at_every_step():
  inputs = _inputs(30)
  result = secagg.secure_sum_round(
      inputs, 2**20, 4, neighbors=8, seed=1, dropped_before_sharing=[3],
      dropped_before_input=[11, 20], dropped_before_unmasking=[5, 27])
  assert set(result.contributors) == set(range(30)) - {3, 11, 20}
  _exact(result, inputs)


def test_each_client_talks_to_its_neighbors_only():
  inputs = _inputs(25, size=10)
  result = secagg.secure_sum_round(inputs, 2**20, 3, neighbors=4, seed=2)
  expected = secagg.client_cost_bits(result.config, 25)
  measured = secagg.measured_cost_bits(result)
  complete = secagg.client_cost_bits(_config(None), 25)
  for u in range(25):
    assert measured[u] == expected, u
  assert expected['share_keys'].sent == 4 * 8 * (2 * 33 + 16)
  assert complete['share_keys'].sent == 24 * 8 * (2 * 33 + 16)
  hoods = graph.neighborhoods(result.config, range(25))
  for message in result.messages_to_server:
    if isinstance(message, secagg.EncryptedShares):
      assert message.recipient in hoods[message.sender]


def test_a_client_receives_its_neighbors_keys_and_the_round_ids_only():
  """In a sparse round the server sends each client its neighborhood's
  advertisements and every client id; in a complete round, every
  advertisement. A client's received roster bits are counted so."""
  result = secagg.secure_sum_round(_inputs(40), 2**20, 3, neighbors=4,
                                   seed=3)
  hoods = graph.neighborhoods(result.config, range(40))
  rosters = [m for m in result.messages_to_clients
             if isinstance(m, secagg.Roster)]
  assert sorted(m.recipient for m in rosters) == list(range(40))
  for m in rosters:
    assert {a.sender for a in m.advertisements} == hoods[m.recipient] | {
        m.recipient}
    assert m.client_ids == tuple(range(40))
    assert m.num_bits == 4 * 512 + 35 * 64
  complete = secagg.secure_sum_round(_inputs(6), 2**20, 3, seed=3)
  for m in complete.messages_to_clients:
    if isinstance(m, secagg.Roster):
      assert len(m.advertisements) == 6 and m.client_ids == ()
  assert secagg.client_cost_bits(_config(22), 1000, id_bits=48)[
      'advertise_keys'].received == 22 * 512 + 977 * 48
  assert secagg.messages.id_bits('c00042') == 48


# Refusals.

def test_a_roster_that_is_not_the_clients_neighborhood_is_refused():
  config = _config(2, round_id='r')
  rng = secagg.SeededRandom(b'roster')
  keys = {u: secagg.advertise_keys(u, config, rng.child(u))[0]
          for u in range(8)}
  roster = tuple(k.advertisement() for k in keys.values())
  ids = tuple(range(8))
  hood = graph.neighborhoods(config, ids)[0] | {0}
  mine = secagg.roster_for(config, roster, 0)
  assert {a.sender for a in mine.advertisements} == hood
  secagg.share_keys(keys[0], mine.advertisements, rng.child('ok'), ids)
  missing = [a for a in mine.advertisements if a.sender != max(hood - {0})]
  stranger = next(a for a in roster if a.sender not in hood)
  for bad in (missing, list(mine.advertisements) + [stranger]):
    with pytest.raises(secagg.SecAggError,
                       match='should carry the keys of its neighborhood'):
      secagg.share_keys(keys[0], bad, rng.child('bad'), ids)
    with pytest.raises(secagg.SecAggError,
                       match='should carry the keys of its neighborhood'):
      secagg.sharing_state(keys[0], bad, rng.child('bad'), ids)
  outsider = secagg.advertise_keys(8, config, rng.child(8))[1]
  with pytest.raises(secagg.SecAggError,
                     match=r'advertises clients \[8\] that are not in'):
    secagg.share_keys(keys[0], list(mine.advertisements) + [outsider],
                      rng.child('bad'), ids)

def _split_pair(config, n):
  """Two clients two apart on the ring: without them, a ring of degree 2
  falls into two parts."""
  ring = graph.ring_order(config.round_id, range(n))
  return ring[0], ring[n // 2]


def test_a_disconnected_set_of_contributors_fails_the_round():
  inputs = _inputs(10)
  config = _config(2, round_id='r')
  dropped = _split_pair(config, 10)
  with pytest.raises(secagg.RoundFailedError, match='not connected'):
    secagg.secure_sum_round(inputs, 2**20, 2, neighbors=2, round_id='r',
                            seed=0, dropped_before_input=dropped)
  # One dropout leaves the ring in one piece: the others' sum is exact.
  result = secagg.secure_sum_round(inputs, 2**20, 2, neighbors=2,
                                   round_id='r', seed=0,
                                   dropped_before_input=dropped[:1])
  _exact(result, inputs)


def test_clients_and_server_refuse_to_unmask_a_disconnected_set():
  """A server that skipped its own check still gets no shares from any
  client, and `unmask` refuses the set too."""
  run = _run_to_masked(_inputs(10), 2**20, 2, neighbors=2, round_id='r',
                       dropped=_split_pair(_config(2, 2, 'r'), 10))
  contributors = sorted(run.total.contributors)
  for u in contributors:
    with pytest.raises(secagg.ProtocolViolationError, match='not connected'):
      secagg.unmasking_shares(run.masking[u], contributors)
  with pytest.raises(secagg.RoundFailedError, match='not connected'):
    secagg.unmask(run.config, run.roster, run.ids, run.total, [])


def test_shares_from_a_client_that_is_not_a_neighbor_are_refused():
  run = _run_to_masked(_inputs(12), 2**20, 2, neighbors=2, round_id='r')
  hoods = graph.neighborhoods(run.config, range(12))
  stranger = next(m for m in run.encrypted if m.recipient != 0
                  and m.sender not in hoods[0] and m.sender != 0)
  forged = secagg.EncryptedShares(stranger.sender, 0, stranger.ciphertext)
  state = run.masking[0].sharing
  with pytest.raises(secagg.SecAggError, match='not one of its neighbors'):
    secagg.receive_shares(state, [forged])


def test_too_few_responders_among_a_clients_neighbors_fail_the_round():
  """Each client's secret is rebuilt from its own neighbors' shares: with
  k=2 and t=3, a neighbor that does not respond leaves too few."""
  inputs = _inputs(8)
  with pytest.raises(secagg.RoundFailedError,
                     match='responders hold shares of client'):
    secagg.secure_sum_round(inputs, 2**20, 3, neighbors=2, seed=0,
                            dropped_before_unmasking=[4])


# Choosing k.

def test_neighbors_for_picks_the_fewest_that_meet_the_failure_bound():
  for n, dropout in ((100, 0.05), (1000, 0.05), (1000, 0.1), (300, 0.01)):
    k = graph.neighbors_for(n, dropout, failure=1e-6)
    assert k % 2 == 0 and k < n - 1
    assert graph.failure_bound(n, k, dropout) <= 1e-6
    assert graph.failure_bound(n, k - 2, dropout) > 1e-6
  # Grows like log n, not like n.
  assert graph.neighbors_for(1000) < 2 * graph.neighbors_for(100)
  assert graph.neighbors_for(10, 0.05) is None  # Only the complete graph.
  assert graph.resolve('auto', 100) == graph.neighbors_for(100)
  with pytest.raises(secagg.SecAggError, match='dropout 1'):
    graph.neighbors_for(100, dropout=1)


def test_the_failure_bound_holds_in_simulated_rounds():
  """Rounds of 60 clients at 10% dropouts with the k the bound gives for
  1e-3 failures (16): none fails; with k=2 most do."""
  n, dropout = 60, 0.1
  k = graph.neighbors_for(n, dropout, failure=1e-3)
  assert k == 16
  inputs = _inputs(n)
  rng = np.random.default_rng(0)
  failed = {k: 0, 2: 0}
  for trial in range(6):
    dropped = [int(u) for u in np.flatnonzero(rng.random(n) < dropout)]
    for degree in failed:
      try:
        result = secagg.secure_sum_round(
            inputs, 2**20, secure_sums.default_threshold(n, degree), neighbors=degree,
            seed=trial, round_id=trial, dropped_before_input=dropped)
        _exact(result, inputs)
      except secagg.RoundFailedError:
        failed[degree] += 1
  assert failed[k] == 0 and failed[2] >= 3
