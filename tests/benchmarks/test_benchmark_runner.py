"""benchmarks/runner.py measures Beam rounds against the local loop and writes its JSON."""

import json
import os

import pytest

import benchmark_runs

TARGETS = {'cnn_dask_over_loop_one_thread',
           'cnn_dask_over_loop_default_threads', 'rounds_in_memory_over_loop',
           'dask_fixed_cost', 's3_over_local', 'memory'}


@pytest.mark.slow
def test_quick_runner_benchmark_writes_its_rows(tmp_path):
  out = tmp_path / 'runner.json'
  run = benchmark_runs.run(
      'runner', '--quick', '--sizes', '3', '--memory-sizes', '2,6',
      '--rounds', '2', '--rounds-clients', '4', '--repeats', '2', '--json',
      out, timeout=300)
  assert run.returncode == 0, run.stderr[-3000:]
  result = json.loads(out.read_text())
  rows = result['rows']
  assert [(r['kind'], r['clients'], r['mode'], r['storage']) for r in rows] == [
      ('time', 3, 'in_memory', 'local'), ('time', 1, 'dask', 'local'),
      ('rounds', 4, 'in_memory', 'local'), ('rounds', 4, 'in_memory', 'local'),
      ('rounds', 4, 'in_memory', 's3'),
      ('memory', 2, 'in_memory', 'local'), ('memory', 6, 'in_memory', 'local')]
  for row in rows:
    assert {'clients', 'mode', 'round_seconds', 'local_seconds',
            'peak_rss_mb', 'runner_round_seconds', 'stage_seconds'} <= set(row)
    assert 0 < row['round_seconds'] < 60
    # TensorFlow and Beam are loaded: hundreds of MB, far from 4 GB here.
    assert 100 < row['base_rss_mb'] <= row['peak_rss_mb'] < 4096
    assert row['metrics']['delta_norm'] > 0
    # The runner committed every timed round and timed each itself.
    assert len(row['runner_round_seconds']) == row['rounds']
    assert all(s > 0 for s in row['runner_round_seconds'])
    if row['local_seconds'] is not None:
      assert 0 < row['local_seconds'] < row['round_seconds']
      assert row['ratio'] == pytest.approx(
          row['round_seconds'] / row['local_seconds'])
    else:
      assert 'ratio' not in row
    # CPU seconds of the row's process per round: some, and no more than
    # its cores could give in the wall time measured.
    assert 0 < row['cpu_seconds'] <= 1.2 * os.cpu_count() * row[
        'round_seconds'] + 0.05
  timed, dask, chained, again, on_s3, memory = rows[:6]
  # The judged ratio's rows are measured --repeats times.
  assert (chained['repeat'], again['repeat']) == (0, 1)
  assert 'repeat 2' in run.stdout
  assert timed['rounds'] == 1 and memory['local_seconds'] is None
  # Dask: the row's own cluster of 2 single-threaded worker processes, polled.
  assert dask['worker_threads'] == 2
  assert dask['worker_env']['TF_NUM_INTRAOP_THREADS'] == ['1']
  assert dask['workers_cpu_seconds'] > 0
  assert 'workers_cpu_seconds' not in timed
  assert dask['worker_processes'] >= 2
  assert dask['workers_peak_rss_mb'] > 100
  assert dask['total_peak_rss_mb'] > dask['peak_rss_mb']
  assert dask['engine'].startswith('DaskRunner at tcp://127.0.0.1:')
  # Rounds: 2 rounds in one call after a warm-up; the loop ran the same
  # clients from the same state, so it reached the same metrics.
  assert chained['rounds'] == 2
  assert chained['local_metrics']['delta_norm'] == pytest.approx(
      chained['metrics']['delta_norm'], rel=1e-4)
  # On S3: the same rounds (the same result), the files uploaded first, no
  # loop; the moto server is not counted as a worker.
  assert on_s3['rounds'] == 2 and on_s3['upload_bytes'] > 0
  assert on_s3['metrics']['delta_norm'] == pytest.approx(
      chained['metrics']['delta_norm'], rel=1e-4)
  assert on_s3['worker_processes'] == 0
  assert on_s3['s3_over_local'] == pytest.approx(
      on_s3['round_seconds'] / chained['round_seconds'])
  assert on_s3['s3_judged'] is False  # The S3 target is judged on the CNN.

  # The machine's parallelism is measured once and kept beside the rows.
  assert result['cpus'] == os.cpu_count() and result['parallel_speedup'] > 0
  assert result['workers'] == 2 and result['rounds'] == 2
  assert result['repeats'] == 2

  targets = result['targets']
  assert set(targets) == TARGETS
  for name in ('cnn_dask_over_loop_one_thread',
               'cnn_dask_over_loop_default_threads'):
    assert targets[name]['figure'] is None and targets[name]['met'] is None
  ratio = targets['rounds_in_memory_over_loop']
  assert ratio['clients'] == 4 and ratio['rounds'] == 2
  assert ratio['ratios'] == [chained['ratio'], again['ratio']]
  assert ratio['figure'] == pytest.approx(
      (chained['ratio'] + again['ratio']) / 2)  # Their median.
  assert ratio['met'] == (ratio['figure'] <= 1.5)
  fixed = targets['dask_fixed_cost']
  assert fixed['figure'] == dask['round_seconds']
  assert fixed['met'] == (fixed['figure'] <= 1.0)
  s3 = targets['s3_over_local']
  assert s3['figure'] is None  # Judged on the CNN run, not measured here.
  assert s3['small_in_memory'] == pytest.approx(
      on_s3['round_seconds'] / chained['round_seconds'])
  assert targets['memory']['largest_memory_clients'] == 6
  assert set(targets['memory']['growth_mb']) == {'2', '6'}
  assert targets['memory']['met'] is True
  assert 'beam/local' in run.stdout and 's3/local' in run.stdout
  for name in TARGETS:
    assert f'\n{name}: ' in run.stdout
  assert 'dask_fixed_cost: ' in run.stdout and (
      ' met' in run.stdout or ' missed' in run.stdout)
  assert 's3_over_local: ' in run.stdout and 'not measured' in run.stdout
