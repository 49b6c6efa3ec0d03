"""The pipelines' command lines: prompt (--help and bad flags without
TensorFlow or Beam), quiet (third-party noise silenced, ours kept), with
progress, default directories that do not collide, and warnings for encoder
flags that compress nothing."""

import dataclasses
import logging
import os
import subprocess
import sys
import textwrap

import pytest

from canonical import quiet
from pipelines import compression_study
from pipelines import encoder_choice
from pipelines import fedavg
from pipelines import reporting

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '../..'))

_IMPORTS_AT_EXIT = textwrap.dedent('''
    import runpy, sys
    module = sys.argv[1]
    sys.argv = [module] + sys.argv[2:]
    try:
      runpy.run_module(module, run_name='__main__', alter_sys=True)
    except SystemExit:
      pass
    print(sorted({m.split('.')[0] for m in sys.modules} &
                 {'tensorflow', 'apache_beam'}))
''')


def _run(*argv, env=None):
  return subprocess.run([sys.executable, *argv], cwd=ROOT,
                        capture_output=True, text=True, timeout=300,
                        env=dict(os.environ, **(env or {})))


@pytest.mark.parametrize('module, argv', [
    ('pipelines.fedavg', ['--help']),
    ('pipelines.fedavg', ['--rounds', 'ten']),
    ('pipelines.fedavg', ['--rounds', '0']),
    ('pipelines.fedavg', ['--aggregation-encoder', 'gzip']),
    ('pipelines.prepare_data', ['--help']),
    ('pipelines.prepare_data', ['--dataset', 'digits']),
    ('pipelines.compression_study', ['--help']),
    ('pipelines.compression_study', ['--settings', 'nope']),
    ('beam_runner', ['--help']),
    ('beam_runner', ['run', '--help']),
    ('beam_runner', ['run', '--form', 'f.pb']),
    ('beam_runner', ['run', '--form', 'f.pb', '--clients', 'c', '--rounds',
                     '-1', '--clients-per-round', '2', '--output', 'o']),
])
def test_help_and_bad_flags_import_neither_tensorflow_nor_beam(module, argv):
  run = _run('-c', _IMPORTS_AT_EXIT, module, *argv)
  assert run.stdout.strip().splitlines()[-1] == '[]', run.stderr[-2000:]
  assert 'Traceback' not in run.stderr


def test_a_flag_only_beam_could_know_imports_beam_not_tensorflow():
  run = _run('-c', _IMPORTS_AT_EXIT, 'pipelines.fedavg', '--bogus_flag')
  assert run.stdout.strip().splitlines()[-1] == "['apache_beam']", run.stderr
  # One line says it; Beam's own notice of it is silenced.
  assert run.stderr.splitlines() == [
      "error: unknown flag(s) --bogus_flag: neither pipelines.fedavg nor "
      "Beam's PipelineOptions knows them."]


_A_SCRIPT = textwrap.dedent('''
    import os, tempfile
    import canonical as tff
    import beam_runner
    import numpy as np
    import tensorflow as tf
    process = tff.templates.IterativeProcess(
        tff.federated_computation(lambda: tff.federated_value(0.0, tff.SERVER)),
        tff.federated_computation(
            lambda s, d: (s, tff.federated_sum(d)), tff.type_at_server(
                tf.float32), tff.type_at_clients(tf.float32)))
    beam_runner.run(tff.compile(process),
                    beam_runner.InMemoryClientData({'a': np.float32(1)}), 1,
                    1, os.path.join(tempfile.mkdtemp(), 'run'),
                    progress=lambda line: None)
    os.write(2, b'our own line\\n')
    print(os.environ.get('TF_CPP_MIN_LOG_LEVEL'))
''')


@pytest.mark.slow
@pytest.mark.parametrize('env, level', [
    ({}, '2'),
    ({'FEDCANON_VERBOSE': '1'}, 'None'),
    ({'TF_CPP_MIN_LOG_LEVEL': '1'}, '1'),  # The user's own setting wins.
], ids=['quiet', 'verbose', 'users_level'])
def test_a_script_importing_canonical_is_as_quiet_as_the_command_lines(
    env, level):
  """TensorFlow's load-time lines and Beam's apitools notice go, by their
  text, unless FEDCANON_VERBOSE=1 asks for them; every other line stays."""
  base = dict(os.environ)
  base.pop('TF_CPP_MIN_LOG_LEVEL', None)
  run = subprocess.run([sys.executable, '-c', _A_SCRIPT], cwd=ROOT,
                       env=dict(base, **env), capture_output=True, text=True,
                       timeout=300)
  assert run.returncode == 0, run.stderr
  assert run.stdout.strip() == level
  assert 'our own line' in run.stderr
  noise = [line for line in run.stderr.splitlines() if any(
      text in line for text in ('absl::InitializeLog', 'cpu_feature_guard',
                                'oneDNN custom operations',
                                'Could not find cuda drivers', 'cuInit',
                                'apitools'))]
  if 'FEDCANON_VERBOSE' in env:  # What this machine's TF and Beam print.
    assert any('apitools' in line for line in noise), run.stderr
    assert len(noise) > 1, run.stderr
  else:
    assert not noise, run.stderr


def test_third_party_noise_is_dropped_by_its_text_only(caplog):
  quiet.third_party()
  quiet.third_party()  # Once is enough; twice adds nothing.
  assert sum(isinstance(f, quiet._DropMessages)  # pylint: disable=protected-access
             for f in logging.getLogger('absl').filters) == 1
  from canonical import privacy  # pylint: disable=g-import-not-at-top
  with caplog.at_level(logging.WARNING):
    privacy.epsilon(1.0, 0.5, 3, 1e-5)  # dp_accounting fails to converge.
    logging.getLogger('absl').warning('another absl warning')
    logging.warning('apitools not found, and bigquery client libraries are '
                    'not available despite the import not raising')
    logging.getLogger('distributed.nanny').warning(
        'Worker process still alive after 4.0 seconds, killing')
    logging.getLogger('distributed.nanny').warning('Restarting worker')
  messages = [r.getMessage() for r in caplog.records]
  assert messages == ['another absl warning', 'Restarting worker']


def test_time_left():
  assert reporting.time_left(10.0, 0, 5) == ''
  assert reporting.time_left(10.0, 2, 0) == ''
  assert reporting.time_left(10.0, 2, 3) == '~15 s left'
  assert reporting.time_left(0.2, 2, 1) == '~1 s left'
  assert reporting.time_left(600.0, 2, 3) == '~15 min left'
  assert reporting.time_left(7200.0, 1, 1) == '~2.0 h left'


def test_the_study_counts_settings_and_estimates_the_rest(monkeypatch):
  def run_experiment(config, options, print_fn):
    del options, print_fn
    point = {'round': 1, 'round_broadcast_bits': 10,
             'round_aggregated_bits': 10, 'test_accuracy': 0.5}
    return fedavg.Result(config, 'small_8x8', [point], None, '', '', '', '')
  monkeypatch.setattr(fedavg, 'run_experiment', run_experiment)
  clock = iter([0, 0, 60, 90])  # The start, then each setting's start.
  monkeypatch.setattr(compression_study.time, 'monotonic',
                      lambda: next(clock))
  lines = []
  settings = compression_study.SETTINGS[:3]
  compression_study.run_study(fedavg.Config(output_dir='out'), settings,
                              print_fn=lines.append)
  assert lines[0] == ('== setting 1 of 3, uncompressed: float32 both ways')
  assert lines[1].startswith('== setting 2 of 3, tutorial_8bit: ')
  assert lines[1].endswith('(~2 min left)')  # 60 s for one, two to go.
  assert lines[2].startswith('== setting 3 of 3, hadamard: ')
  assert lines[2].endswith('(~45 s left)')


def _fake_rows(base, settings, options, print_fn):
  del options, print_fn
  return [dict(setting=s.name, description=s.description, model='small_8x8',
               rounds=1, downlink_bits_per_round=10.0,
               uplink_bits_per_round=10.0, test_accuracy=0.5,
               downlink_ratio=1.0, uplink_ratio=1.0,
               accuracy_change_points=0.0, epsilon=None, delta=None,
               meets_target=False,
               curve=[{'round': 1, 'test_accuracy': 0.5,
                       'broadcast_bits': 10, 'aggregated_bits': 10}])
          for s in settings if base]


def test_the_study_writes_benchmarks_md_only_when_asked(tmp_path, monkeypatch,
                                                        capsys):
  monkeypatch.setattr(compression_study, 'run_study', _fake_rows)
  monkeypatch.chdir(tmp_path)
  argv = ['--quick', '--settings', 'uncompressed', '--output-dir', 'study']
  assert compression_study.main(argv) == 0
  assert not (tmp_path / 'BENCHMARKS.md').exists()
  assert compression_study.main(argv + ['--no-benchmarks-md']) == 0
  assert not (tmp_path / 'BENCHMARKS.md').exists()
  assert compression_study.main(argv + ['--write-benchmarks']) == 0
  assert '| uncompressed' in (tmp_path / 'BENCHMARKS.md').read_text()
  assert compression_study.main(argv + ['--write-benchmarks',
                                        '--benchmarks-md', 'B.md']) == 0
  assert '| uncompressed' in (tmp_path / 'B.md').read_text()
  capsys.readouterr()
  with pytest.raises(SystemExit) as exit_:
    compression_study.main(argv + ['--benchmarks-md', 'B.md'])
  assert exit_.value.code == 2
  assert 'add --write-benchmarks' in capsys.readouterr().err


def _args(*argv):
  args, _ = fedavg.build_parser().parse_known_args(list(argv))
  return args


def test_each_experiment_gets_its_own_default_directory():
  plain = fedavg.config_from_args(_args())
  again = fedavg.config_from_args(_args('--rounds', '20'))
  drive = fedavg.config_from_args(_args('--aggregation-encoder', 'drive'))
  lr = fedavg.config_from_args(_args('--aggregation-encoder', 'drive',
                                     '--client-lr', '0.1'))
  # More rounds of the same experiment resume it; any other flag that
  # shapes the experiment gets another directory.
  assert plain.output_dir == again.output_dir
  assert plain.output_dir.startswith('fedavg_output/digits_iid_down-none_')
  assert drive.output_dir.startswith(
      'fedavg_output/digits_iid_down-none_up-drive_')
  assert len({plain.output_dir, drive.output_dir, lr.output_dir}) == 3
  assert drive.data_dir == f'{drive.output_dir}/data'
  chosen = fedavg.config_from_args(_args('--output-dir', 'mine',
                                         '--data-dir', 'shared'))
  assert (chosen.output_dir, chosen.data_dir) == ('mine', 'shared')


def _digits_model():
  config = fedavg.Config(output_dir='out')
  return config, fedavg.model_for(config, (8, 8, 1), 10)[1]


def test_an_encoder_that_compresses_nothing_is_a_warning(caplog):
  config, model = _digits_model()
  assert config.threshold == 1000  # The digits' default: their kernel is
  specs = model.weights_spec.trainable  # encoded.
  assert encoder_choice.encodes_nothing('--aggregation-encoder', 'drive',
                                        specs, config.threshold) is None
  text = encoder_choice.encodes_nothing('--aggregation-encoder', 'drive',
                                        specs, 10000)
  assert text == ('--aggregation-encoder drive compresses nothing: it encodes '
                  'tensors of --threshold 10,000 or more elements, and the '
                  'largest, float32[128, 32], has 4,096; lower --threshold '
                  'to compress.')
  for quiet_choice in ('none', 'secure:8'):
    assert encoder_choice.encodes_nothing('--aggregation-encoder',
                                          quiet_choice, specs, 10000) is None
  with caplog.at_level(logging.WARNING, logger='pipelines.fedavg'):
    fedavg.build_process(dataclasses.replace(
        config, broadcast_encoder='uniform:8', threshold=10000), model)
  assert [r.getMessage() for r in caplog.records] == [
      '--broadcast-encoder uniform:8 compresses nothing: it encodes tensors '
      'of --threshold 10,000 or more elements, and the largest, '
      'float32[128, 32], has 4,096; lower --threshold to compress.']


@pytest.mark.slow
def test_the_quick_starts_drive_example_sends_fewer_bits():
  import canonical  # pylint: disable=g-import-not-at-top
  config, model = _digits_model()
  plain = canonical.compile(fedavg.build_process(config, model))
  drive = canonical.compile(fedavg.build_process(dataclasses.replace(
      config, aggregation_encoder='drive'), model))
  assert drive.aggregated_bits < plain.aggregated_bits / 4
