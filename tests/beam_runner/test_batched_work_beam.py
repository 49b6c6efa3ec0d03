"""Many clients in one call on Beam (`canonical.executors.batched_work`):
a client that fails inside the batch's call is dropped, the rest batched."""

import numpy as np
import pytest

import beam_runner
from beam_runner.pipeline import round as round_lib
import canonical as cf
from regression_process import clients as _clients, dataset as _dataset
from regression_process import regression_process as _regression_process
from regression_process import same as _same


def _one_round_on_beam(tmp_path, form, clients):
  """One round of the saved `form` over every client's file, in process."""
  cf.save(form, str(tmp_path / 'form.pb'))
  directory = beam_runner.write_client_data(
      tmp_path / 'data', {k: _dataset(v) for k, v in clients.items()})
  return beam_runner.run(str(tmp_path / 'form.pb'), directory, 1,
                         len(clients), tmp_path / 'run',
                         progress=lambda _: None)


@pytest.mark.slow
@pytest.mark.parametrize('batch_bytes', [None, 100])
def test_on_beam_a_failing_client_is_dropped_and_the_rest_batched(
    tmp_path, monkeypatch, batch_bytes):
  """One client's work raises inside the batch's call: the runner runs
  that batch client by client, drops that client only, and the round is
  the local loop's over the others, bit for bit (also when an element's
  clients take several calls, each under `batch_bytes` of data)."""
  if batch_bytes is not None:
    monkeypatch.setattr(round_lib, 'BATCHED_BYTES', batch_bytes)
  form = cf.compile(_regression_process(check_inputs=True))
  clients = _clients(6)
  clients['c03'] = [(np.full((1, 2), 1e6, np.float32),
                     np.zeros(1, np.float32))]
  clients['c04'] = [(np.full((1, 2), np.inf, np.float32),
                     np.zeros(1, np.float32))]
  result = _one_round_on_beam(tmp_path, form, clients)
  outcome = result.outcomes[0]
  assert outcome['dropped_reasons'] == {'work failed': 2}
  assert sorted(outcome['dropped_clients']) == ['c03', 'c04']
  ok = [v for k, v in sorted(clients.items()) if k not in ('c03', 'c04')]
  state, loss = cf.run_round(form, form.initialize(), ok)
  assert _same(result.state, state)
  assert outcome['metrics'] == {'value': pytest.approx(float(loss))}


@pytest.mark.slow
def test_on_beam_a_non_finite_client_is_dropped_in_the_batch(tmp_path):
  form = cf.compile(_regression_process())
  clients = _clients(5, seed=3)
  clients['c01'] = [(np.full((2, 2), np.nan, np.float32),
                     np.ones(2, np.float32))]
  result = _one_round_on_beam(tmp_path, form, clients)
  outcome = result.outcomes[0]
  assert outcome['dropped_reasons'] == {'non-finite update': 1}
  assert 'NaN or Inf' in outcome['dropped_clients']['c01']
  assert outcome['clients_ok'] == 4
  ok = [v for k, v in sorted(clients.items()) if k != 'c01']
  state, _ = cf.run_round(form, form.initialize(), ok)
  assert _same(result.state, state)
  assert outcome['bits_aggregated'] == 4 * (2 + 1 + 1) * 32
