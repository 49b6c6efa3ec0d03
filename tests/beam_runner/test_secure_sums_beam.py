"""Secure sums on the Beam runner: the masking protocol as pipeline stages.

The sums equal the reference's bit for bit, the aggregation (the CombineFn)
never sees a client's secure input or a partial sum of inputs, clients that
fail drop out of the protocol, and a round below the threshold fails whole.
"""

import json
import os
import types

import numpy as np
import pytest

import beam_runner
from beam_runner.driver import run_dir
from beam_runner.pipeline import round as round_pipeline
from beam_runner.secure import clients as secure_clients
from beam_runner.secure import kept as secure_kept
from beam_runner.secure import messages as secure_messages
from beam_runner.secure import protocol_steps
from beam_runner.secure import round as secure_round
from beam_runner import testing
from canonical import compiler
from canonical.executors import reference
from canonical import form as form_lib
from canonical import io as storage

from example_processes import secure_sums_process
import storage_spy

QUIET = lambda line: None


def _data(n, seed=0, high=16):
  rng = np.random.default_rng(seed)
  return {f'c{i}': rng.integers(0, high, [3]).astype(np.int32)
          for i in range(n)}


@pytest.mark.parametrize('mode', [
    'in_memory', pytest.param('multi_processing', marks=pytest.mark.slow)])
def test_beam_equals_the_reference_bit_for_bit(mode):
  # Two rounds chained in one pipeline on 2 processes (one start of the
  # workers, ~10 s): the second starts from the first's state.
  multi = mode == 'multi_processing'
  testing.assert_rounds_match(secure_sums_process(), _data(9),
                              rounds=2 if multi else 3,
                              clients_per_round=5, rtol=0, atol=0,
                              running_mode=mode, clients_per_element=2,
                              rounds_per_pipeline=2 if multi else None)


class _Spy:
  """Records every partial that reaches the two CombineFns."""

  def __init__(self, monkeypatch):
    self.plain, self.masked = [], []
    for fn, seen in ((round_pipeline.AggregateFn, self.plain),
                     (protocol_steps.MaskedSumFn, self.masked)):
      monkeypatch.setattr(fn, 'merge_accumulators',
                          self._recording(fn.merge_accumulators, seen))

  @staticmethod
  def _recording(original, seen):
    def merge_accumulators(fn, accumulators):
      accumulators = list(accumulators)
      seen.extend(a for a in accumulators if a is not None and
                  a[0] is not None)
      return original(fn, accumulators)
    return merge_accumulators


def test_the_aggregation_sees_only_masked_inputs(monkeypatch, tmp_path):
  spy = _Spy(monkeypatch)
  data = _data(8, seed=3)
  form = compiler.compile(secure_sums_process())
  result = beam_runner.run(form, data, 1, 8, tmp_path / 'run', seed=1,
                           progress=QUIET, clients_per_element=1)
  # The plain tier folds the mean's (total, count) only.
  assert spy.plain and all(len(arrays) == 2 for arrays, _ in spy.plain)
  assert spy.masked
  inputs = {c: np.asarray(v, np.uint64) for c, v in data.items()}
  for plain, _, values, contributors in spy.masked:
    assert len(plain) == 2  # The mean's plain parts travel with the masked.
    assert len(values) == 3 and all(v.dtype == np.uint64 for v in values)
    # Not any client's input, nor the sum of the inputs it holds. Only the
    # exact sums' leaves (moduli >= 161: a chance match of 3 uniform values
    # has odds below 1e-6); modulo 7, masked values match 1 time in 343.
    partial = sum(inputs[c] for c in contributors)
    for leaf in values[:2]:
      for value in inputs.values():
        assert not np.array_equal(leaf, value)
      assert not np.array_equal(leaf, partial)
  metrics = result.outcomes[0]['metrics']
  assert result.outcomes[0]['secure_aggregation'] == {
      'neighbors': 'all', 'threshold': 5, 'contributors': 8, 'responders': 8,
      'silent': {}}
  total = np.sum(list(data.values()), axis=0)
  assert metrics['bitwidth'] == total.tolist()
  assert metrics['modular'] == (total % 7).tolist()
  # The protocol's files (the kept inputs too) are gone with the commit;
  # each client's secret stays with it.
  attempt = run_dir.RunDir(tmp_path / 'run').attempt(1)
  assert storage.exists(attempt.state_path)
  assert not os.path.exists(attempt.secure_directory)
  # Against a malicious server (the default) each client is enrolled in
  # the trust store and remembers the round it served and the list it
  # signed, all on its side.
  secrets = tmp_path / 'run' / 'client_secrets'
  assert sorted(p.name for p in secrets.glob('*.key')) == sorted(
      f'{c}.key' for c in data)
  assert sorted(p.name for p in (secrets / 'identities').iterdir()) == sorted(
      f'{c}.pub' for c in data)
  for c in data:
    (served,) = os.listdir(secrets / 'served' / c)
    assert served.startswith('1-')  # round 1's attempt
    (signed,) = (secrets / 'signed' / c).iterdir()
    assert json.loads(signed.read_text()) == sorted(data)


def test_a_round_of_one_client_sums_it_alone(tmp_path):
  data = _data(3, seed=6)
  form = compiler.compile(secure_sums_process())
  result = beam_runner.run(form, data, 2, 1, tmp_path / 'run', seed=1,
                           progress=QUIET)
  out = run_dir.RunDir(tmp_path / 'run')
  for number, outcome in zip((1, 2), result.outcomes):
    (client,) = out.clients(number)
    assert outcome['metrics']['max_input'] == data[client].tolist()


def test_a_client_out_of_range_drops_out_and_the_rest_sum_exactly(tmp_path):
  data = _data(6, seed=4)
  data['c2'] = np.array([99, 0, 0], np.int32)  # Above 2**4 - 1.
  form = compiler.compile(secure_sums_process())
  result = beam_runner.run(form, data, 1, 6, tmp_path / 'run', seed=1,
                           progress=QUIET, clients_per_element=2)
  outcome = result.outcomes[0]
  assert outcome['clients_ok'] == 5
  assert outcome['dropped_reasons'] == {'secure input out of range': 1}
  assert 'c2' in outcome['dropped_clients']
  assert 'values must be in [0, 15]' in outcome['dropped_clients']['c2']
  others = [v for c, v in data.items() if c != 'c2']
  process = secure_sums_process()
  expected = reference.run_round(process, process.initialize.invoke(),
                                 others)[1]
  for name in ('bitwidth', 'max_input', 'modular'):
    assert outcome['metrics'][name] == np.asarray(expected[name]).tolist()


def test_below_the_threshold_the_round_fails_and_commits_nothing(tmp_path):
  data = _data(4, seed=5)
  data['c0'] = np.array([0, 99, 0], np.int32)
  form = compiler.compile(secure_sums_process())
  with pytest.raises(beam_runner.RoundError,
                     match='secure aggregation: 3 clients advertised keys, '
                           'fewer than the threshold 4'):
    beam_runner.run(form, data, 1, 4, tmp_path / 'run', seed=1,
                    progress=QUIET, clients_per_element=2,
                    secure_threshold=4)
  assert run_dir.RunDir(tmp_path / 'run').last_committed() == 0
  metrics = (tmp_path / 'run' / 'metrics.jsonl').read_text()
  assert not metrics.strip()


def test_a_threshold_that_cannot_be_met_or_means_nothing_is_refused(tmp_path):
  form = compiler.compile(secure_sums_process())
  with pytest.raises(ValueError, match='secure_threshold 5 is more than the '
                                       '4 clients sampled per round'):
    beam_runner.run(form, _data(4), 1, 4, tmp_path / 'a', secure_threshold=5)
  with pytest.raises(ValueError, match='secure_threshold must be an integer '
                                       'of at least 1'):
    beam_runner.run(form, _data(4), 1, 4, tmp_path / 'b', secure_threshold=0)
  with pytest.raises(ValueError, match='secure_threshold 2 is not more than '
                     'half of the 4 clients holding each client'):
    beam_runner.run(form, _data(4), 1, 4, tmp_path / 'd', secure_threshold=2)
  with pytest.raises(ValueError, match='secure_threshold 2 is not more than '
                     'half of the 4 clients'):  # 'auto': the complete graph.
    beam_runner.run(form, _data(4), 1, 4, tmp_path / 'd', secure_threshold=2,
                    secure_neighbors='auto')
  with pytest.raises(ValueError, match='secure_threshold 2 is not more than '
                     'half of the 5 clients'):  # 4 ring neighbors and itself.
    beam_runner.run(form, _data(9), 1, 9, tmp_path / 'e', secure_threshold=2,
                    secure_neighbors=4)
  with pytest.raises(ValueError, match="secure_server must be one of "
                     "malicious, honest, got 'curious'"):
    beam_runner.run(form, _data(4), 1, 4, tmp_path / 'f',
                    secure_server='curious')
  plain = compiler.compile(_plain_process())
  for kwargs in ({'secure_threshold': 3}, {'secure_server': 'honest'}):
    with pytest.raises(form_lib.FormError, match='has no secure sums'):
      beam_runner.run(plain, _data(4), 1, 4, tmp_path / 'c', **kwargs)
  assert not list(tmp_path.glob('*/rounds'))  # Nothing written.
  # A server one trusts may have half the clients unmask.
  result = beam_runner.run(form, _data(4), 1, 4, tmp_path / 'g',
                           secure_threshold=2, secure_server='honest',
                           progress=QUIET)
  assert result.outcomes[0]['secure_aggregation']['threshold'] == 2


def test_ring_neighbors_sum_exactly_and_share_with_neighbors_only(
    monkeypatch, tmp_path):
  """A sparse round (each client masks with 2 ring neighbors) equals the
  reference; every client's shares went to its 2 neighbors only."""
  sent = []
  original = protocol_steps.ShareKeysFn.step
  monkeypatch.setattr(protocol_steps.ShareKeysFn, 'step',
                      lambda fn, client, kept: sent.append(
                          original(fn, client, kept)) or sent[-1])
  data = _data(9, seed=8)
  form = compiler.compile(secure_sums_process())
  result = beam_runner.run(form, data, 1, 9, tmp_path / 'run', seed=1,
                           progress=QUIET, clients_per_element=2,
                           secure_neighbors=2)
  process = secure_sums_process()
  expected = reference.run_round(process, process.initialize.invoke(),
                                 list(data.values()))[1]
  for name in ('bitwidth', 'max_input', 'modular'):
    assert result.outcomes[0]['metrics'][name] == np.asarray(
        expected[name]).tolist()
  assert len(sent) == 9 and all(len(messages) == 2 for messages in sent)
  assert result.outcomes[0]['secure_aggregation'] == {
      'neighbors': 2, 'threshold': 2, 'contributors': 9, 'responders': 9,
      'silent': {}}


def _silent(monkeypatch, clients, step_fn=protocol_steps.UnmaskFn):
  """`clients` fail `step_fn`'s step (by default unmasking), as devices
  gone offline."""
  original = step_fn.step

  def step(fn, client, kept):
    if client.id in clients:
      raise ConnectionError(f'{client.id} is offline')
    return original(fn, client, kept)

  monkeypatch.setattr(step_fn, 'step', step)


def test_contributors_that_go_silent_before_unmasking_stay_in_the_sum(
    monkeypatch, tmp_path):
  """Four of nine contributors never answer step 4: the other five (the
  threshold) unmask every input, the silent ones' included."""
  _silent(monkeypatch, {'c1', 'c4', 'c6', 'c8'})
  data = _data(9, seed=9)
  form = compiler.compile(secure_sums_process())
  result = beam_runner.run(form, data, 1, 9, tmp_path / 'run', seed=1,
                           progress=QUIET, clients_per_element=3)
  outcome = result.outcomes[0]
  total = np.sum(list(data.values()), axis=0)
  assert outcome['metrics']['bitwidth'] == total.tolist()
  protocol = outcome['secure_aggregation']
  assert (protocol['contributors'], protocol['responders']) == (9, 5)
  assert protocol['silent'] == {
      c: f'ConnectionError: {c} is offline' for c in ('c1', 'c4', 'c6', 'c8')}


def test_too_few_answers_fail_the_round_and_commit_nothing(monkeypatch,
                                                           tmp_path):
  _silent(monkeypatch, {'c1', 'c4', 'c6', 'c7', 'c8'})
  form = compiler.compile(secure_sums_process())
  with pytest.raises(beam_runner.RoundError,
                     match="'unmasking': 4 client\\(s\\) survived, fewer than "
                           'the threshold 5'):
    beam_runner.run(form, _data(9, seed=9), 1, 9, tmp_path / 'run', seed=1,
                    progress=QUIET, clients_per_element=3)
  assert run_dir.RunDir(tmp_path / 'run').last_committed() == 0


def _failing(monkeypatch, step_fn, clients):
  """`clients` fail `step_fn`'s step for one of its clients (ShareKeysFn's
  step, or the masking in MaskFn), as devices gone offline."""
  if step_fn is protocol_steps.ShareKeysFn:
    _silent(monkeypatch, clients, step_fn)
    return
  _failing_to_mask(monkeypatch,
                   lambda state: state.keys.client_id in clients)


def _failing_to_mask(monkeypatch, fails):
  """Clients whose `fails(sharing state)` fail their masking step, once
  they have the others' shares (the others mask with them)."""
  original = protocol_steps.secagg.masked_input

  def masked_input(state, value, received):
    client_id = state.keys.client_id
    if fails(state):
      raise ConnectionError(f'{client_id} is offline')
    return original(state, value, received)

  monkeypatch.setattr(protocol_steps.secagg, 'masked_input', masked_input)


def _expected_round(data, without):
  process = secure_sums_process()
  state, metrics = reference.run_round(
      process, process.initialize.invoke(),
      [v for c, v in data.items() if c not in without])
  return np.asarray(state['w']).tolist(), {
      name: np.asarray(metrics[name]).tolist()
      for name in ('bitwidth', 'max_input', 'modular')}


@pytest.mark.parametrize('step_fn, reason, per_element', [
    (protocol_steps.ShareKeysFn, 'secure protocol: sharing keys failed', 3),
    (protocol_steps.MaskFn, 'secure protocol: masking failed', 3),
    (protocol_steps.MaskFn, 'secure protocol: masking failed', 9)])
def test_clients_that_drop_out_mid_protocol_are_in_no_sum(
    monkeypatch, tmp_path, step_fn, reason, per_element):
  """Three of nine clients fail to share keys, or to mask (after the others
  masked with them): the round goes on without them, its secure sums and
  its plain mean exactly the reference's over the other six, and they keep
  their old state (9 per element: the round as one Beam step)."""
  dropped = {'c0', 'c4', 'c7'}
  _failing(monkeypatch, step_fn, dropped)
  data = _data(9, seed=10)
  form = compiler.compile(secure_sums_process())
  result = beam_runner.run(form, data, 1, 9, tmp_path / 'run', seed=1,
                           progress=QUIET, clients_per_element=per_element)
  outcome = result.outcomes[0]
  weights, metrics = _expected_round(data, dropped)
  assert {name: outcome['metrics'][name] for name in metrics} == metrics
  assert np.asarray(result.state['w']).tolist() == weights
  assert outcome['clients_ok'] == 6
  assert outcome['dropped_reasons'] == {reason: 3}
  assert sorted(outcome['dropped_clients']) == sorted(dropped)
  assert all('ConnectionError: ' in why
             for why in outcome['dropped_clients'].values())
  protocol = outcome['secure_aggregation']
  assert (protocol['contributors'], protocol['responders']) == (6, 6)
  clients = json.loads(storage.read_bytes(
      run_dir.RunDir(tmp_path / 'run').attempt(1).clients_path))
  assert clients['dropped'] == sorted(dropped)


@pytest.mark.parametrize('step_fn, step', [
    (protocol_steps.ShareKeysFn, 'shared keys'),
    (protocol_steps.MaskFn, 'sent masked inputs')])
def test_too_many_mid_protocol_dropouts_fail_the_round(monkeypatch, tmp_path,
                                                       step_fn, step):
  _failing(monkeypatch, step_fn, {'c0', 'c2', 'c4', 'c6', 'c8'})
  form = compiler.compile(secure_sums_process())
  with pytest.raises(beam_runner.RoundError,
                     match=f'secure aggregation: 4 clients {step}, fewer '
                           'than the threshold 5'):
    beam_runner.run(form, _data(9, seed=11), 1, 9, tmp_path / 'run', seed=1,
                    progress=QUIET, clients_per_element=3)
  assert run_dir.RunDir(tmp_path / 'run').last_committed() == 0


def _kept_files(writes):
  """The names of the kept-update files among the recorded writes."""
  return [os.path.basename(p) for _, p in writes if '/kept/' in p]


@pytest.mark.parametrize('part_bytes, files', [(None, 3), (1, 9 + 3)])
def test_a_batch_keeps_its_clients_updates_in_files_of_bounded_size(
    monkeypatch, tmp_path, part_bytes, files):
  """Between work and masking a batch's clients keep their U in one file
  (a request each on object storage), or in parts when it would pass
  KEPT_PART_BYTES (1 byte: a part per client, then an empty last part);
  the sums are exact either way."""
  if part_bytes is not None:
    monkeypatch.setattr(secure_kept, 'KEPT_PART_BYTES', part_bytes)
  writes = storage_spy.record_local_writes(monkeypatch, ('write_bytes',))
  data = _data(9, seed=13)
  form = compiler.compile(secure_sums_process())
  result = beam_runner.run(form, data, 1, 9, tmp_path / 'run', seed=1,
                           progress=QUIET, clients_per_element=3)
  weights, metrics = _expected_round(data, without=())
  outcome = result.outcomes[0]
  assert {name: outcome['metrics'][name] for name in metrics} == metrics
  assert np.asarray(result.state['w']).tolist() == weights
  written = _kept_files(writes)
  assert len(written) == files
  assert len({name.rsplit('-', 1)[0] for name in written}) == 3  # Batches.


def test_clients_whose_kept_update_cannot_be_read_drop_out(monkeypatch,
                                                          tmp_path):
  """A batch's kept file fails to read at client c4: c4 and the clients of
  its batch not yet read drop out masking; the rest sum exactly."""
  original = secure_round.SecureRound.kept_updates

  def kept_updates(self, form, batch):
    for kept in original(self, form, batch):
      if kept[0] == 'c4':
        raise OSError('the device lost its storage')
      yield kept

  monkeypatch.setattr(secure_round.SecureRound, 'kept_updates', kept_updates)
  data = _data(9, seed=14)
  form = compiler.compile(secure_sums_process())
  result = beam_runner.run(form, data, 1, 9, tmp_path / 'run', seed=1,
                           progress=QUIET, clients_per_element=3)
  outcome = result.outcomes[0]
  dropped = set(outcome['dropped_clients'])
  assert 'c4' in dropped and len(dropped) <= 3
  assert outcome['dropped_reasons'] == {
      'secure protocol: masking failed': len(dropped)}
  assert all('the device lost its storage' in why
             for why in outcome['dropped_clients'].values())
  weights, metrics = _expected_round(data, dropped)
  assert {name: outcome['metrics'][name] for name in metrics} == metrics
  assert np.asarray(result.state['w']).tolist() == weights


def test_dropouts_that_cut_the_ring_fail_before_anyone_unmasks(monkeypatch,
                                                              tmp_path):
  """On a k=2 ring, two clients that drop out masking leave the others in
  two arcs: unmasking would reveal each arc's sum, so the server asks no
  one (no client answers, the round fails, nothing committed)."""
  data = _data(8, seed=12)
  form = compiler.compile(secure_sums_process())
  answered = []
  original = protocol_steps.UnmaskFn.step
  monkeypatch.setattr(protocol_steps.UnmaskFn, 'step',
                      lambda fn, client, kept: answered.append(client.id) or
                      original(fn, client, kept))
  # Two clients opposite on the round's ring, whatever its order.
  def fails(state):
    ring = protocol_steps.secagg.graph.ring_order(state.keys.config.round_id,
                                                  sorted(state.points))
    return state.keys.client_id in (ring[0], ring[4])

  _failing_to_mask(monkeypatch, fails)
  with pytest.raises(beam_runner.RoundError, match='not connected'):
    beam_runner.run(form, data, 1, 8, tmp_path / 'run', seed=1,
                    progress=QUIET, clients_per_element=2, secure_neighbors=2,
                    secure_threshold=2)
  assert not answered
  assert run_dir.RunDir(tmp_path / 'run').last_committed() == 0


def test_bad_neighbors_are_refused_before_anything_runs(tmp_path):
  form = compiler.compile(secure_sums_process())
  with pytest.raises(ValueError, match='secure_neighbors 3: expected None'):
    beam_runner.run(form, _data(4), 1, 4, tmp_path / 'a', secure_neighbors=3)
  with pytest.raises(ValueError, match='secure_threshold 4 is more than the 3 '
                                       'clients'):
    beam_runner.run(form, _data(4), 1, 4, tmp_path / 'b', secure_threshold=4,
                    secure_neighbors=2)
  plain = compiler.compile(_plain_process())
  with pytest.raises(form_lib.FormError, match='a secure_neighbors means '
                                               'nothing'):
    beam_runner.run(plain, _data(4), 1, 4, tmp_path / 'c', secure_neighbors=2)
  assert not list(tmp_path.glob('*/rounds'))  # Nothing written.


def _plain_process():
  import canonical as cf  # pylint: disable=g-import-not-at-top
  from example_processes import I3, SECURE_STATE, secure_state_init  # pylint: disable=g-import-not-at-top

  @cf.federated_computation(cf.server(SECURE_STATE), cf.clients(I3))
  def next_fn(state, data):
    return state, cf.federated_sum(data)

  return cf.IterativeProcess(secure_state_init, next_fn)


@pytest.mark.slow
def test_secure_rounds_run_in_the_sandbox(tmp_path):
  """With isolation, every piece (secure_parameters too) runs in the
  sandbox process and the protocol's stages around it are unchanged."""
  data = _data(6, seed=7)
  beam_runner.write_client_data(tmp_path / 'clients', data)
  form = compiler.compile(secure_sums_process())
  result = beam_runner.run(form, str(tmp_path / 'clients'), 1, 4,
                           tmp_path / 'run', progress=QUIET,
                           clients_per_element=2,
                           isolation=beam_runner.Isolation(120, 2048))
  sampled = run_dir.RunDir(tmp_path / 'run').clients(1)
  total = np.sum([data[c] for c in sampled], axis=0)
  assert result.outcomes[0]['metrics']['max_input'] == total.tolist()
  assert result.outcomes[0]['metrics']['modular'] == (total % 7).tolist()


def test_a_worker_keeps_the_clients_of_its_last_two_rounds(monkeypatch):
  """A client's draws are made once per round and process, and go with
  the round: two rounds are kept (chained in one pipeline), not more."""

  class Drawn:

    def __init__(self, the_round, client_id):
      self.round, self.id = the_round, client_id

  monkeypatch.setattr(secure_clients, 'Client', Drawn)
  monkeypatch.setattr(secure_clients, '_CLIENTS_BY_ROUND',  # pylint: disable=protected-access
                      secure_messages.Cache(2))
  rounds = [types.SimpleNamespace(paths=types.SimpleNamespace(
      round_path=f'run/attempts/{i}')) for i in range(3)]
  first = secure_clients.client_of(rounds[0], 'c1')
  assert secure_clients.client_of(rounds[0], 'c1') is first
  second = secure_clients.client_of(rounds[1], 'c1')
  assert second is not first and second.round is rounds[1]
  assert secure_clients.client_of(rounds[0], 'c1') is first
  secure_clients.client_of(rounds[2], 'c1')  # A third round: the others go.
  assert secure_clients.client_of(rounds[0], 'c1') is not first
