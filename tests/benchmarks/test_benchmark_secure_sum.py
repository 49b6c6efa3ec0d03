"""benchmarks/secure_sum.py times secure against plain rounds, in-process and
on a local Dask cluster, and writes its JSON."""

import json

import pytest

import benchmark_runs


@pytest.mark.slow
def test_quick_secure_sum_benchmark_writes_its_rows(tmp_path):
  out = tmp_path / 'secure_sum.json'
  run = benchmark_runs.run(
      'secure_sum', '--clients', '6', '--elements', '8', '--neighbors',
      'all,2', '--repeats', '1', '--dask-workers', '2', '--json', out)
  assert run.returncode == 0, run.stderr[-3000:]
  rows = json.loads(out.read_text())['rows']
  assert [(r['engine'], r['workers'], r['neighbors']) for r in rows] == [
      ('in-process', 1, 'all'), ('in-process', 1, 2), ('dask', 2, 'all'),
      ('dask', 2, 2)]
  for row in rows:
    assert 0 < row['plain_seconds'] < 60 and 0 < row['secure_seconds'] < 60
    assert row['ratio'] == pytest.approx(row['secure_seconds'] /
                                         row['plain_seconds'])
    assert row['crypto_floor_seconds'] > 0
    assert row['floor_ratio'] == pytest.approx(
        (row['plain_seconds'] + row['crypto_floor_seconds'] / row['workers']) /
        row['plain_seconds'])
    # The protocol alone in one process: some time, less than on Beam.
    assert 0 < row['protocol_seconds'] < row['secure_seconds']
    assert row['protocol_ratio'] == pytest.approx(
        (row['plain_seconds'] + row['protocol_seconds'] / row['workers']) /
        row['plain_seconds'])
    # 16-bit inputs of 6 clients: each value masked at 16 + 3 bits.
    assert row['masked_input_bits'] == 8 * 19
    assert row['plain_bits'] == 8 * 32
    # The semi-honest protocol: timed too, and fewer bits (no signatures).
    assert 0 < row['honest_seconds'] < 60
    assert row['malicious_over_honest'] == pytest.approx(
        row['secure_seconds'] / row['honest_seconds'])
    assert row['honest_bits_sent'] < row['protocol_bits_sent']
    assert row['honest_bits_received'] < row['protocol_bits_received']
  # With k = 2 a client shares with 2 neighbours instead of 5 peers.
  assert rows[1]['protocol_bits_sent'] < rows[0]['protocol_bits_sent']
  assert 'target: secure <= 2.0x plain' not in run.stdout  # Not 100 clients.


def test_only_dask_needs_dask_workers(capsys):
  from benchmarks import secure_sum  # pylint: disable=g-import-not-at-top
  with pytest.raises(SystemExit):
    secure_sum.main(['--only-dask', '--clients', '2'])
  assert '--only-dask needs --dask-workers' in capsys.readouterr().err
