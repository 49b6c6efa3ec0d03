"""benchmarks/runner.py measures Beam rounds against the local loop and writes its JSON."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_quick_runner_benchmark_writes_its_rows(tmp_path):
  out = tmp_path / 'runner.json'
  run = subprocess.run(
      [sys.executable, '-m', 'benchmarks.runner', '--quick', '--sizes', '3',
       '--memory-sizes', '2,6', '--json', str(out)], cwd=ROOT,
      capture_output=True, text=True, timeout=300,
      env={**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '2'})
  assert run.returncode == 0, run.stderr[-3000:]
  result = json.loads(out.read_text())
  rows = result['rows']
  assert [(r['kind'], r['clients'], r['mode']) for r in rows] == [
      ('time', 3, 'in_memory'), ('memory', 2, 'in_memory'),
      ('memory', 6, 'in_memory')]
  for row in rows:
    assert {'clients', 'mode', 'round_seconds', 'local_seconds',
            'peak_rss_mb'} <= set(row)
    assert 0 < row['round_seconds'] < 60
    # TensorFlow and Beam are loaded: hundreds of MB, far from 4 GB here.
    assert 100 < row['base_rss_mb'] <= row['peak_rss_mb'] < 4096
    assert row['metrics']['delta_norm'] > 0
  timed = rows[0]
  assert 0 < timed['local_seconds'] < timed['round_seconds']
  assert timed['ratio'] == pytest.approx(
      timed['round_seconds'] / timed['local_seconds'])
  assert rows[1]['local_seconds'] is None
  assert result['targets']['largest_memory_clients'] == 6
  assert set(result['targets']['growth_mb']) == {'2', '6'}
  assert 'beam/local' in run.stdout and 'peak RSS at 6 clients' in run.stdout
