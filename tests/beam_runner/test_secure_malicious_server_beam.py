"""The Beam runner's secure rounds against a malicious server: the driver's
role played by this file (a round id replayed, a client's keys substituted
in the roster), against the clients' code on the pipeline's workers.
Library-level attacks are in tests/canonical/secagg/test_malicious_server.py.
"""

import shutil

import numpy as np

import beam_runner
from beam_runner.driver import run_dir
from beam_runner.pipeline import round as round_pipeline
from beam_runner.secure import messages as secure_messages
from beam_runner.secure import protocol_steps
from canonical import compiler
from canonical import secagg
from example_processes import secure_sums_process

QUIET = lambda line: None


def _data(n, seed=0):
  rng = np.random.default_rng(seed)
  return {f'c{i}': rng.integers(0, 16, [3]).astype(np.int32)
          for i in range(n)}


def _fixed_attempts(monkeypatch):
  """A driver that gives every attempt one id (as a replaying server)."""
  monkeypatch.setattr(
      run_dir.RunDir, 'new_attempt', lambda self, number: run_dir.Attempt(
          self.directory, number, 'replayed0000', self.storage))


def test_a_replayed_round_is_refused_by_every_client(monkeypatch, tmp_path):
  """The server runs round 1 again under the id the clients served (their
  devices kept their secrets and records) on new inputs, whose masks would
  then be the first's: each client refuses, and the round fails with
  nothing learned. The same inputs again (a retried step) run to the same
  masked inputs and sum: nothing new to learn."""
  data = _data(5)
  form = compiler.compile(secure_sums_process())
  _fixed_attempts(monkeypatch)
  first = beam_runner.run(form, data, 1, 5, tmp_path / 'first',
                          progress=QUIET)
  assert first.outcomes[0]['secure_aggregation']['contributors'] == 5

  def served_again(name, inputs, **options):
    directory = tmp_path / name
    directory.mkdir()
    shutil.copytree(tmp_path / 'first' / 'client_secrets',
                    directory / 'client_secrets')
    return beam_runner.run(form, inputs, 1, 5, directory, progress=QUIET,
                           **options)

  try:
    served_again('again', _data(5, seed=1))
    raise AssertionError('the replayed round ran')
  except beam_runner.RoundError as e:
    message = str(e)
  assert '0 clients advertised keys' in message, message
  assert f'5 {round_pipeline.SECURE_REPLAYED}' in message, message
  retried = served_again('retried', data)
  assert retried.outcomes[0]['secure_aggregation']['contributors'] == 5
  assert retried.outcomes[0]['metrics'] == first.outcomes[0]['metrics']
  # A server the clients trust gets its replay through (what the record
  # prevents).
  result = served_again('honest', _data(5, seed=1), secure_server='honest')
  assert result.outcomes[0]['secure_aggregation']['contributors'] == 5


def test_a_client_whose_keys_the_server_substitutes_is_dropped(monkeypatch,
                                                               tmp_path):
  """The server publishes keys of its own as c2's: every other client
  refuses them (the signature is not c2's enrolled key's), c2 refuses a
  roster without its keys, and the round sums the other four."""
  data = _data(5)
  form = compiler.compile(secure_sums_process())
  original = protocol_steps.RosterFn.process

  def substituting(fn, aggregate):
    for batch in original(fn, aggregate):
      secure = fn._plan.secure  # pylint: disable=protected-access
      roster = secure_messages.read_messages(secure.storage,
                                             secure.roster_path)
      config = secure_messages.round_of(form, secure).config
      _, fake = secagg.advertise_keys('c2', config,
                                      secagg.SeededRandom(b'server'))
      secure_messages.write_messages(secure.storage, secure.roster_path, [
          a if a.sender != 'c2' else fake for a in roster])
      yield batch

  monkeypatch.setattr(protocol_steps.RosterFn, 'process', substituting)
  result = beam_runner.run(form, data, 1, 5, tmp_path / 'run', seed=1,
                           progress=QUIET)
  outcome = result.outcomes[0]
  assert outcome['secure_aggregation']['contributors'] == 4
  (reason,) = outcome['dropped_clients']['c2'].split('\n')[:1]
  assert 'does not carry this client\'s own public keys' in reason, outcome
  total = np.sum([v for c, v in data.items() if c != 'c2'], axis=0)
  assert outcome['metrics']['bitwidth'] == total.tolist()
