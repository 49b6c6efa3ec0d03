"""benchmarks/vectorised_clients.py: its grouped clients compute what the
clients compute one after another, and it reports every row."""

import json

import pytest

import benchmark_runs


@pytest.mark.slow
def test_grouped_clients_train_as_clients_one_after_another(tmp_path):
  out = tmp_path / 'vectorised.json'
  run = benchmark_runs.run(
      'vectorised_clients', '--clients', '3', '--steps', '2', '--repeats', '1',
      '--threads', '1', '--json', out)
  assert run.returncode == 0, run.stderr[-3000:]
  result = json.loads(out.read_text())
  # Each client's weights after two steps of its own data, grouped or not,
  # differ by float summation order: 1e-6 to 5e-3 of the largest change
  # training made, by TensorFlow's kernel instance. Convolving with another
  # client's kernels moved them by 35-89% of it.
  assert result['relative_diff_grouped'] < 0.05
  assert result['max_diff_grouped'] == pytest.approx(
      result['relative_diff_grouped'] * result['max_change'])
  assert result['max_change'] > 0
  rows = {r['row']: r for r in result['rows']}
  assert list(rows) == ['one after another', 'grouped', 'one shared model']
  assert rows['one after another']['over_one_after_another'] == 1.0
  assert all(r['seconds'] > 0 for r in rows.values())
  assert 'grouped' in run.stdout and str(out) in run.stdout
