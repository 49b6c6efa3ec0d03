"""The encoders benchmark runs end to end and reports rows that make sense."""

import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '../..'))
SCRIPT = os.path.join(ROOT, 'benchmarks', 'encoders.py')
SIZES = (1000, 4096)
TE_ENCODERS = ('identity', 'uniform_8bit', 'uniform_2bit', 'hadamard_2bit')
ROW_KEYS = ('encoder', 'n', 'mbps', 'bits_per_coord', 'rel_err', 'copy_ratio',
            'te_mbps', 'te_bits_per_coord', 'te_rel_err', 'speedup')

# (min, max) bits per coordinate of our encoders at n = 4096 (a power of two, so no
# rotation padding): payload plus a few float32 scalars.
OUR_BITS_AT_4096 = {
    'identity': (32, 32),
    'uniform_8bit': (8, 8.1),
    'uniform_2bit': (2, 2.1),
    'hadamard_2bit': (2, 2.1),
    'top_k_1pct': (0.3, 1.5),
    'sign': (1, 1.1),
    'drive': (1, 1.1),
}
# Upper bounds on relative L2 error on standard normal input.
OUR_MAX_REL_ERR = {
    'identity': 0.0,
    'uniform_8bit': 0.05,
    'uniform_2bit': 1.5,
    'hadamard_2bit': 1.5,
    'top_k_1pct': 1.0,
    'sign': 0.9,
    'drive': 0.9,
}


def _load_benchmark_module():
  spec = importlib.util.spec_from_file_location('encoders_benchmark', SCRIPT)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


bench = _load_benchmark_module()


def _tensor_encoding_installed():
  return importlib.util.find_spec(bench.TE_PACKAGE) is not None


@pytest.fixture(scope='module')
def quick_run(tmp_path_factory):
  """Runs the script as a user would, from the repository root."""
  json_path = tmp_path_factory.mktemp('bench') / 'rows.json'
  result = subprocess.run(
      [sys.executable, SCRIPT, '--quick', '--sizes', ','.join(map(str, SIZES)),
       '--repeats', '1', '--json', str(json_path)],
      cwd=ROOT, capture_output=True, text=True, timeout=240,
      env={**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '2'})
  assert result.returncode == 0, result.stderr[-3000:]
  with open(json_path) as f:
    rows = json.load(f)
  return rows, result.stdout


def _rows_by_key(rows):
  return {(row['encoder'], row['n']): row for row in rows}


def test_quick_run_has_a_row_per_encoder_and_size(quick_run):
  rows, _ = quick_run
  assert sorted(_rows_by_key(rows)) == sorted(
      (name, n) for name in bench.ENCODERS for n in SIZES)
  for row in rows:
    assert set(ROW_KEYS) <= set(row), row


def test_our_columns_are_sane(quick_run):
  rows, _ = quick_run
  for row in rows:
    assert row['mbps'] > 0, row
    assert row['copy_ratio'] > 0, row
    assert row['rel_err'] <= OUR_MAX_REL_ERR[row['encoder']] + 1e-6, row
    if row['n'] == 4096:
      low, high = OUR_BITS_AT_4096[row['encoder']]
      assert low <= row['bits_per_coord'] <= high, row


def test_throughput_matches_time(quick_run):
  rows, _ = quick_run
  for row in rows:
    assert row['mbps'] == pytest.approx(row['n'] * 4 / 1e6 / row['seconds'])


@pytest.mark.skipif(not _tensor_encoding_installed(),
                    reason='tensorflow-model-optimization (bench extra) not installed')
def test_tensor_encoding_columns_where_it_has_the_encoder(quick_run):
  rows, _ = quick_run
  for row in rows:
    if row['encoder'] in TE_ENCODERS:
      assert row['te_mbps'] > 0, row
      assert row['speedup'] == pytest.approx(row['te_seconds'] / row['seconds'])
      assert row['te_rel_err'] <= OUR_MAX_REL_ERR[row['encoder']] + 1e-6, row
    else:
      assert row['te_mbps'] is None and row['speedup'] is None, row
  # tensor_encoding packs 8-bit values 3.5 to an int32 word, plus a float32 min and max.
  te_8bit = _rows_by_key(rows)[('uniform_8bit', 4096)]['te_bits_per_coord']
  assert te_8bit == pytest.approx((-(-4096 * 2 // 7) * 32 + 64) / 4096)


def test_table_is_printed(quick_run):
  _, stdout = quick_run
  lines = stdout.splitlines()
  header = next(line for line in lines if line.startswith('encoder'))
  assert 'MB/s' in header and 'te MB/s' in header
  for name in bench.ENCODERS:
    assert any(line.startswith(name) for line in lines), name


def test_without_tensor_encoding_its_columns_stay_empty():
  ours, note = bench.load_ours()
  assert note is None
  lines = []
  rows = bench.run((1000,), 1, ('uniform_8bit', 'sign'), ours, None,
                   log=lines.append)
  assert [row['encoder'] for row in rows] == ['uniform_8bit', 'sign']
  for row in rows:
    assert row['mbps'] > 0
    assert row['te_mbps'] is None and row['speedup'] is None
  assert len(lines) == 2


def test_missing_tensor_encoding_gives_a_note(monkeypatch):
  real_find_spec = importlib.util.find_spec
  monkeypatch.setattr(
      importlib.util, 'find_spec',
      lambda name, *a: None if name == bench.TE_PACKAGE else real_find_spec(name, *a))
  module, note = bench.load_tensor_encoding()
  assert module is None
  assert 'not installed' in note


@pytest.mark.skipif(bench.TE_PACKAGE in sys.modules,
                    reason='needs tensorflow_model_optimization not yet imported')
def test_broken_tensor_encoding_gives_a_note_and_leaves_no_stub(monkeypatch):
  empty_package = importlib.machinery.ModuleSpec(
      bench.TE_PACKAGE, None, is_package=True)
  real_find_spec = importlib.util.find_spec
  monkeypatch.setattr(
      importlib.util, 'find_spec',
      lambda name, *a: (empty_package if name == bench.TE_PACKAGE
                        else real_find_spec(name, *a)))
  module, note = bench.load_tensor_encoding()
  assert module is None
  assert 'could not be imported' in note
  assert bench.TE_PACKAGE not in sys.modules


def test_parse_sizes():
  assert bench.parse_sizes('1e4,1000') == (10000, 1000)
  for bad in ('0', '1.5', '-3'):
    with pytest.raises(ValueError):
      bench.parse_sizes(bad)


def test_wire_bits_counts_every_tensor_by_dtype_and_size():
  encoded = {'values': tf.zeros([3], tf.uint8), 'scale': tf.zeros([], tf.float32),
             'nested': {'indices': tf.zeros([2, 2], tf.int64)}}
  assert bench.wire_bits(encoded) == 3 * 8 + 32 + 4 * 64


def test_interleaved_samples_alternate_between_functions(monkeypatch):
  monkeypatch.setattr(bench, 'MIN_SAMPLE_SECONDS', 0.0)
  order = []
  medians = bench.interleaved_median_seconds(
      [lambda: order.append('a'), lambda: order.append('b')], repeats=3)
  assert len(medians) == 2 and all(m >= 0 for m in medians)
  # One call each to size the samples, then a, b, a, b, a, b.
  assert ''.join(order) == 'ab' + 'ab' * 3
