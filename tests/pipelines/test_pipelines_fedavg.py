"""pipelines.fedavg and pipelines.compression_study end to end on the digits.

Each run partitions scikit-learn's digits into TFRecord shards with Beam,
compiles and saves federated averaging, and runs its rounds on Beam's
in-process runner, evaluating the server model on the test split.
"""

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import beam_runner
from beam_runner.secure import round as secure_round
from beam_runner.worker_io import tensor_io
import canonical
from canonical.privacy import spending
from canonical import io as storage
from pipelines import compression_study
from pipelines import encoder_choice
from pipelines import fedavg
from s3_server import refusing_port

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '../..'))


def _config(tmp_path, name='run', **fields):
  fields.setdefault('rounds', 3)
  fields.setdefault('clients_per_round', 5)
  fields.setdefault('num_clients', 10)
  return fedavg.Config(output_dir=str(tmp_path / name),
                       data_dir=str(tmp_path / 'data'), **fields)


@pytest.mark.slow
def test_encoded_fedavg_learns_and_counts_the_forms_bits(tmp_path):
  lines = []
  result = fedavg.run_experiment(
      _config(tmp_path, rounds=4, broadcast_encoder='uniform:8',
              aggregation_encoder='hadamard:4', threshold=100),
      print_fn=lines.append)
  curve, form = result.curve, result.form
  assert [p['round'] for p in curve] == [1, 2, 3, 4]
  accuracies = [p['test_accuracy'] for p in curve]
  assert accuracies[-1] > 0.3 and accuracies[-1] > accuracies[0]  # Chance: 0.1.
  for point in curve:
    assert point['round_broadcast_bits'] == 5 * form.broadcast_bits
    assert point['round_aggregated_bits'] == 5 * form.aggregated_bits
  assert curve[-1]['aggregated_bits'] == 4 * 5 * form.aggregated_bits
  # The dense kernel (4096 weights) travels as 8-bit levels packed four to an
  # int32 word, so C is far below the float32 model's 4538 weights.
  assert [1024, 1] in [s.shape.as_list() for s in
                       tf.nest.flatten(form.broadcast_spec)]
  assert form.broadcast_bits < 0.3 * 32 * 4538
  assert 'round   4/4' in lines[-1] and 'test accuracy' in lines[-1]
  assert 'Kibit (cumulative)' in lines[-1]
  with open(result.plot_path, 'rb') as f:
    assert f.read(8) == b'\x89PNG\r\n\x1a\n'
  with open(result.summary_path) as f:
    assert json.load(f)['curve'] == curve
  board = beam_runner.tensorboard_log.read(
      os.path.join(result.run_dir, 'tensorboard'))
  assert [step for step, _ in board['evaluation/accuracy']] == [1, 2, 3, 4]
  # The saved form is the one that ran.
  loaded = canonical.load(result.form_path)
  assert loaded.aggregated_bits == form.aggregated_bits


def _sampled_twice(client_ids, per_round, seed):
  """(client, r1, r2): a client sampled in r1 and next in r2 > r1 + 1."""
  last_seen = {}
  for round_number in range(1, 50):
    for client in beam_runner.sample_clients(client_ids, per_round, seed,
                                             round_number):
      if client in last_seen and round_number > last_seen[client] + 1:
        return client, last_seen[client], round_number
      last_seen[client] = round_number
  raise AssertionError('no client sampled twice')


@pytest.mark.slow
def test_top_k_with_error_feedback_keeps_each_clients_residual(tmp_path):
  config = _config(tmp_path, clients_per_round=2, num_clients=4,
                   aggregation_encoder='top_k:0.05', error_feedback=True,
                   threshold=100, eval_every=100)
  ids = [f'client_{i:04d}' for i in range(4)]
  client, first, second = _sampled_twice(ids, 2, config.seed)
  config.rounds = second - 1
  result = fedavg.run_experiment(config, print_fn=lambda _: None)
  form = result.form
  run = beam_runner.RunDir(result.run_dir)
  path = run.client_state_paths()[client]
  assert f'/rounds/{first:06d}/' in path  # Its state from round `first`.
  residual = tensor_io.read_tensors(path, form.client_state_spec)
  assert any(np.any(np.asarray(r) != 0) for r in tf.nest.flatten(residual))
  state_before = tensor_io.read_tensors(run.state_path(second - 1),
                                        form.state_spec)

  config.rounds = second  # Resumes: runs only round `second`.
  fedavg.run_experiment(config, print_fn=lambda _: None)
  path = beam_runner.RunDir(result.run_dir).client_state_paths()[client]
  assert f'/rounds/{second:06d}/' in path
  after = tensor_io.read_tensors(path, form.client_state_spec)

  # Round `second` ran the client's work on its old residual: rerunning that
  # work locally with the old residual gives the stored new one, bit for bit,
  # and with a fresh (zero) residual it does not.
  data = beam_runner.TFRecordClientData(config.data_dir).read(
      client, form.client_data_spec)
  broadcast = form.prepare(state_before)
  _, replayed = form.work((data, residual), broadcast)
  for a, b in zip(tf.nest.flatten(replayed), tf.nest.flatten(after)):
    np.testing.assert_array_equal(a, b)
  _, fresh = form.work((data, form.client_state_init()), broadcast)
  assert any(np.any(np.asarray(a) != np.asarray(b)) for a, b in
             zip(tf.nest.flatten(fresh), tf.nest.flatten(after)))


@pytest.mark.slow
def test_a_rerun_resumes_and_keeps_the_cumulative_bits(tmp_path, monkeypatch):
  config = _config(tmp_path, rounds=2, eval_every=2)
  first = fedavg.run_experiment(config, print_fn=lambda _: None)
  config.rounds = 3
  lines = []
  run, engine_settings = beam_runner.run, []
  def recording_run(*args, **kwargs):
    engine_settings.append((kwargs['rounds_per_pipeline'],
                            kwargs['clients_per_element']))
    return run(*args, **kwargs)
  monkeypatch.setattr(beam_runner, 'run', recording_run)
  again = fedavg.run_experiment(config, print_fn=lines.append,
                                rounds_per_pipeline=1, clients_per_element=2)
  assert engine_settings == [(1, 2)]
  assert any('resuming after round 2' in line for line in lines)
  rounds = [line for line in lines if line.startswith('round')]
  assert [line[:11] for line in rounds] == [
      'round   1/3', 'round   2/3', 'round   3/3']
  assert again.curve[:2] == first.curve
  assert again.curve[2]['broadcast_bits'] == 3 * first.curve[0][
      'round_broadcast_bits']
  # Round 2 was evaluated (every 2), round 3 as the last; round 1 was not.
  assert [p['test_accuracy'] is None for p in again.curve] == [
      True, False, False]


def test_an_output_directory_of_another_experiment_is_refused(tmp_path):
  os.makedirs(tmp_path / 'run')
  fedavg._check_output_dir(_config(tmp_path), claim=True)
  with pytest.raises(fedavg.ConfigError, match='aggregation_encoder'):
    fedavg._check_output_dir(_config(tmp_path, aggregation_encoder='drive'),
                             claim=False)
  fedavg._check_output_dir(_config(tmp_path, rounds=7), claim=True)


def test_a_run_of_the_older_fedavg_builder_is_not_resumed(tmp_path):
  """Its state is the older builder's, which TFF's FedAvg cannot take up:
  its directory (recorded without `fed_avg_builder`) is another experiment;
  a --tff-aggregator run's directory is the same experiment as before."""
  os.makedirs(tmp_path / 'run')
  older = _config(tmp_path).run_description()
  del older['fed_avg_builder']
  (tmp_path / 'run' / fedavg.CONFIG_FILE).write_text(json.dumps(older))
  with pytest.raises(fedavg.ConfigError, match='differs in fed_avg_builder'):
    fedavg._check_output_dir(_config(tmp_path), claim=False)
  assert 'fed_avg_builder' not in _config(
      tmp_path, tff_aggregator='mean').run_description()


def test_a_refused_run_leaves_nothing_that_refuses_its_corrected_rerun(
    tmp_path):
  # The digits are 8x8: this model is refused after the data is prepared.
  with pytest.raises(fedavg.ConfigError, match=r'takes \[28, 28, 1\] images'):
    fedavg.run_experiment(_config(tmp_path, model='cnn_28x28'),
                          print_fn=lambda line: None)
  assert not os.path.exists(tmp_path / 'run' / fedavg.CONFIG_FILE)
  fedavg._check_output_dir(_config(tmp_path), claim=False)


@pytest.mark.parametrize('fields, message', [
    ({'error_feedback': True}, 'needs a lossy --aggregation-encoder'),
    ({'broadcast_encoder': 'uniform:99'}, 'bits must be 1..16'),
    ({'aggregation_encoder': 'zip'}, "Unknown encoder 'zip'"),
    ({'rounds': 0}, '--rounds must be at least 1'),
    ({'num_clients': 4, 'clients_per_round': 5},
     '--clients-per-round 5 is more than the 4 clients'),
    ({'model': 'resnet'}, "Unknown --model 'resnet'"),
    ({'client_lr': -1.0}, 'must be positive'),
    ({'broadcast_encoder': 'secure:8'}, 'use it as --aggregation-encoder'),
    ({'target_epsilon': 3.0}, 'need --noise-multiplier'),
    ({'dp_mechanism': 'tree'}, 'need --noise-multiplier'),
    ({'noise_multiplier': 1.0, 'dp_mechanism': 'laplace'},
     "Unknown --dp-mechanism 'laplace'"),
    ({'noise_multiplier': 1.0, 'dp_mechanism': 'banded', 'bands': 4,
      'rounds': 3}, '--bands must be between 1 and --rounds \\(3\\)'),
    ({'noise_multiplier': 1.0, 'dp_mechanism': 'banded',
      'adaptive_clip': True}, 'banded does not combine with --adaptive-clip'),
    ({'noise_multiplier': 0.8, 'dp_mechanism': 'tree',
      'adaptive_clip': True}, 'clipped_count_stddev = 0.25 .* is too low'),
    ({'noise_multiplier': 1.0, 'dp_mechanism': 'distributed_skellam',
      'aggregation_encoder': 'secure:8'},
     'does not combine with --aggregation-encoder'),
    ({'noise_multiplier': 1.0, 'aggregation_encoder': 'drive'},
     'combines with --aggregation-encoder secure:BITS .* but not with '
     'drive'),
    ({'noise_multiplier': 1.0, 'adaptive_clip': True,
      'aggregation_encoder': 'secure:8'}, '--adaptive-clip does not combine'),
    ({'noise_multiplier': -1.0}, 'noise_multiplier must be finite and >= 0'),
    ({'noise_multiplier': 1.0, 'clip': 0.0}, '--clip must be positive'),
    ({'noise_multiplier': 1.0, 'rounds': 50, 'target_epsilon': 2.0},
     'exceeds its privacy budget: 50 rounds .* at most \\d+ rounds fit'),
    ({'aggregation_encoder': 'secure:8', 'error_feedback': True},
     'does not combine with --aggregation-encoder secure'),
    ({'secure_neighbors': 'auto'}, 'needs --aggregation-encoder secure:BITS'),
    ({'secure_server': 'paranoid'}, '--secure-server must be malicious or '
     'honest'),
    ({'aggregation_encoder': 'secure:8', 'secure_neighbors': '3'},
     'must be auto or an even number'),
    ({'tff_aggregator': 'zip'}, "Unknown --tff-aggregator 'zip'"),
    ({'tff_aggregator': 'compression', 'aggregation_encoder': 'drive'},
     "drop --aggregation-encoder \\(they choose ours\\)"),
    ({'tff_aggregator': 'dp'}, '--tff-aggregator dp needs --noise-multiplier'),
    ({'tff_aggregator': 'mean', 'noise_multiplier': 0.5},
     'drop --noise-multiplier'),
    ({'tff_aggregator': 'dp', 'noise_multiplier': 0.4, 'adaptive_clip': True},
     'drop --adaptive-clip'),
    ({'tff_aggregator': 'dp', 'noise_multiplier': 1.0},
     'clipped_count_stddev = 0.25 .* is too low'),
])
def test_bad_flags_are_refused_before_any_work(tmp_path, fields, message):
  with pytest.raises(fedavg.ConfigError, match=message):
    _config(tmp_path, **fields)
  assert not os.path.exists(tmp_path / 'run')


def test_an_output_inside_the_data_is_refused(tmp_path):
  with pytest.raises(fedavg.ConfigError, match='--output-dir .* is inside '
                     '--data-dir .*among the clients'):
    fedavg.Config(output_dir=str(tmp_path / 'data' / 'run'),
                  data_dir=str(tmp_path / 'data'))
  # The default puts the data inside the output, which is fine.
  config = fedavg.Config(output_dir=str(tmp_path / 'out'))
  assert config.data_dir == str(tmp_path / 'out' / 'data')


def test_tffs_fedavg_with_its_compression_aggregator_is_the_job(tmp_path):
  config = _config(tmp_path, tff_aggregator='compression', rounds=2)
  assert config.epochs == 1  # TFF's FedAvg: one pass a round.
  lines = []
  result = fedavg.run_experiment(config, print_fn=lines.append)
  assert "TFF's FedAvg with the compression aggregator" in lines[0]
  state = result.form.initialize()
  assert state.global_model_weights.trainable  # TFF's LearningAlgorithmState
  first, last = result.curve
  assert last['loss'] < first['loss']
  assert 0.0 <= last['test_accuracy'] <= 1.0
  loaded = canonical.load(result.form_path)
  assert loaded.initialize.output_spec._fields == (
      'global_model_weights', 'distributor', 'client_work', 'aggregator',
      'finalizer')


def test_defaults_depend_on_the_dataset(tmp_path):
  digits = _config(tmp_path, num_clients=None)
  other = _config(tmp_path, dataset='fashion_mnist', num_clients=None)
  assert (digits.num_clients, digits.epochs, digits.client_lr) == (20, 3, 0.3)
  assert (other.num_clients, other.epochs, other.client_lr) == (100, 1, 0.1)
  assert _config(tmp_path, epochs=2).epochs == 2


def test_a_model_that_does_not_fit_the_images_is_refused(tmp_path):
  with pytest.raises(fedavg.ConfigError, match=r'takes \[28, 28, 1\] images'):
    fedavg.model_for(_config(tmp_path, model='cnn_28x28'), (8, 8, 1), 10)
  with pytest.raises(fedavg.ConfigError, match='No ready model'):
    fedavg.model_for(_config(tmp_path), (32, 32, 3), 10)


def test_main_reports_a_bad_dataset_path_clearly(tmp_path, capsys):
  missing = tmp_path / 'no_such_idx_dir'
  code = fedavg.main(['--dataset', str(missing), '--output-dir',
                      str(tmp_path / 'out')])
  err = capsys.readouterr().err
  assert code == 2
  assert err.startswith('error: ') and str(missing) in err
  assert 'Traceback' not in err


def test_main_says_how_to_install_fashion_mnist(tmp_path, capsys,
                                                monkeypatch):
  monkeypatch.setenv('FASHION_MNIST_DIR', str(tmp_path / 'empty'))
  code = fedavg.main(['--dataset', 'fashion_mnist', '--output-dir',
                      str(tmp_path / 'out')])
  assert code == 2
  assert 'apt-get install dataset-fashion-mnist' in capsys.readouterr().err


def test_engine_and_storage_flags_reach_the_run(tmp_path, monkeypatch):
  seen = {}
  def run_experiment(config, options, **kwargs):
    seen.update(kwargs, config=config, options=options.get_all_options(
        drop_default=True))
    raise fedavg.ConfigError('stopped here')
  monkeypatch.setattr(fedavg, 'run_experiment', run_experiment)
  try:
    code = fedavg.main([
        '--output-dir', str(tmp_path / 'out'), '--rounds', '4',
        '--rounds-per-pipeline', '2', '--clients-per-element', '3',
        '--runner', 'DaskRunner', '--dask_client_address', 'tcp://h:8786',
        '--dask_connection_timeout', '2', '--dask_npartitions', '4',
        '--s3_endpoint_url', 'http://127.0.0.1:9', '--s3_access_key_id', 'a',
        '--s3_secret_access_key', 'b', '--s3_region_name', 'r'])
    assert code == 2
  finally:
    storage.configure(None)
  assert not storage.default().settings  # Settings go down as a value.
  assert storage.Settings.of(seen['options']).as_dict() == {
      's3_endpoint_url': 'http://127.0.0.1:9', 's3_access_key_id': 'a',
      's3_secret_access_key': 'b', 's3_region_name': 'r'}
  assert seen['rounds_per_pipeline'] == 2 and seen['clients_per_element'] == 3
  assert seen['config'].rounds == 4
  assert {k: seen['options'].get(k) for k in (
      'runner', 'address', 'timeout', 'npartitions', 's3_endpoint_url',
      's3_access_key_id', 's3_secret_access_key', 's3_region_name')} == {
          'runner': 'DaskRunner', 'address': 'tcp://h:8786', 'timeout': 2,
          'npartitions': 4, 's3_endpoint_url': 'http://127.0.0.1:9',
          's3_access_key_id': 'a', 's3_secret_access_key': 'b',
          's3_region_name': 'r'}


def test_a_flag_nobody_knows_is_one_error_line(tmp_path, capsys):
  code = fedavg.main(['--output-dir', str(tmp_path / 'out'),
                      '--no_such_flag', '3'])
  err = capsys.readouterr().err
  assert code == 2 and 'Traceback' not in err
  errors = [l for l in err.splitlines() if l.startswith('error: ')]
  assert len(errors) == 1 and '--no_such_flag' in errors[0]
  assert not os.path.exists(tmp_path / 'out')


@pytest.mark.slow  # ~8 s: a fresh Python, and the 2 s connection timeout.
def test_an_unreachable_dask_scheduler_is_one_error_before_any_round(
    tmp_path):
  with refusing_port() as port:
    completed = subprocess.run(
        [sys.executable, '-m', 'pipelines.fedavg', '--rounds', '2',
         '--num-clients', '5', '--clients-per-round', '3', '--output-dir',
         str(tmp_path / 'out'), '--runner', 'DaskRunner',
         '--dask_client_address', f'tcp://127.0.0.1:{port}',
         '--dask_connection_timeout', '2'],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'))
  assert completed.returncode == 2, completed.stderr[-3000:]
  errors = [l for l in completed.stderr.splitlines()
            if l.startswith('error: ')]
  assert len(errors) == 1 and 'Traceback' not in completed.stderr
  assert 'Dask scheduler' in errors[0] and f'127.0.0.1:{port}' in errors[0]
  assert not [l for l in completed.stdout.splitlines()
              if l.startswith('round')]
  assert not os.path.exists(tmp_path / 'out' / fedavg.RUN_DIR)


def test_encoder_choice_leaves_small_and_integer_tensors_alone():
  encoder_fn = encoder_choice.encoder_fn('hadamard:2', 'aggregation',
                                         threshold=1000)
  large = encoder_fn(tf.TensorSpec([40, 25], tf.float32))
  small = encoder_fn(tf.TensorSpec([999], tf.float32))
  integers = encoder_fn(tf.TensorSpec([4000], tf.int32))
  assert large.encoded_bits < 1000 * 3
  assert small.encoded_bits == 999 * 32
  assert integers.encoded_bits == 4000 * 32


@pytest.mark.parametrize('text, parsed', [
    ('uniform', ('uniform', 8)), ('uniform:4', ('uniform', 4)),
    ('top_k:0.01', ('top_k', 0.01)), ('drive', ('drive', None)),
    (' none ', ('none', None)),
])
def test_encoder_names_parse(text, parsed):
  assert encoder_choice.parse(text) == parsed


@pytest.mark.parametrize('text, message', [
    ('drive:3', 'takes no argument'), ('top_k:2', r'in \(0, 1\]'),
    ('hadamard:two', 'must be a number'), ('gzip', 'choose one of'),
])
def test_bad_encoder_names_are_explained(text, message):
  with pytest.raises(encoder_choice.EncoderChoiceError, match=message):
    encoder_choice.parse(text)


@pytest.mark.slow
def test_main_job_command_prints_the_tutorial_lines(tmp_path):
  completed = subprocess.run(
      [sys.executable, '-m', 'pipelines.fedavg', '--rounds', '2',
       '--num-clients', '6', '--clients-per-round', '3', '--output-dir',
       str(tmp_path / 'out'), '--aggregation-encoder', 'drive',
       '--threshold', '100'],
      cwd=ROOT, capture_output=True, text=True, timeout=600,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'))
  assert completed.returncode == 0, completed.stderr[-3000:]
  rounds = [l for l in completed.stdout.splitlines() if l.startswith('round')]
  assert len(rounds) == 2 and 'aggregated' in rounds[1]
  assert 'final test accuracy' in completed.stdout.splitlines()[-1]
  assert os.path.exists(tmp_path / 'out' / fedavg.PLOT_FILE)


@pytest.mark.slow
def test_compression_study_writes_rows_table_and_plot(tmp_path):
  benchmarks = tmp_path / 'BENCHMARKS.md'
  benchmarks.write_text('# Benchmarks\n\nOther figures stay.\n')
  rows_path = tmp_path / 'rows.json'
  argv = ['--quick', '--settings', 'uncompressed,subsampled_drive', '--output-dir',
           str(tmp_path / 'study'), '--json', str(rows_path),
           '--write-benchmarks', '--benchmarks-md', str(benchmarks)]
  assert compression_study.main(argv) == 0
  rows = json.loads(rows_path.read_text())
  assert [r['setting'] for r in rows] == ['uncompressed', 'subsampled_drive']
  base, squeezed = rows
  assert base['uplink_ratio'] == 1.0 and base['downlink_ratio'] == 1.0
  # DRIVE on half the coordinates: about 0.5 bit instead of 32 for the
  # large tensors; the small ones (under the threshold) stay float32.
  assert squeezed['uplink_ratio'] > 4 and squeezed['downlink_ratio'] > 4
  for row in rows:
    assert 0.0 <= row['test_accuracy'] <= 1.0
    assert row['rounds'] == 5
  text = benchmarks.read_text()
  start, _ = compression_study.markers('digits-iid')
  assert text.startswith('# Benchmarks\n\nOther figures stay.')
  assert text.count(start) == 1
  assert '| subsampled_drive' in text
  # A second study of the same data replaces its section, never duplicates
  # it; a study of other data gets its own.
  compression_study.update_benchmarks_md(str(benchmarks), 'replaced',
                                         'digits-iid')
  compression_study.update_benchmarks_md(str(benchmarks), 'non-iid',
                                         'digits-dirichlet0.3')
  text = benchmarks.read_text()
  assert text.count(start) == 1
  assert 'replaced' in text and '| subsampled_drive' not in text
  assert text.index('replaced') < text.index('non-iid')
  assert os.path.exists(tmp_path / 'study' / 'compression_study.png')


def test_study_sections_are_keyed_by_dataset_and_partition(tmp_path):
  key = compression_study.study_key
  assert key(_config(tmp_path, dataset='fashion_mnist')) == 'fashion_mnist-iid'
  assert key(_config(tmp_path, partition='dirichlet', alpha=0.3)) == \
      'digits-dirichlet0.3'
  assert key(_config(tmp_path, partition='shards', shards_per_client=2)) == \
      'digits-shards2'
  assert key(_config(tmp_path, dataset='/data/emnist/')) == 'emnist-iid'


@pytest.mark.parametrize('up, down, change, meets', [
    (32.0, 8.0, -1.0, True), (60.0, 10.0, 0.5, True),
    (31.9, 10.0, 0.0, False), (40.0, 7.9, 0.0, False),
    (40.0, 10.0, -1.01, False), (None, None, None, False),
])
def test_the_target_needs_all_three(up, down, change, meets):
  row = {'uplink_ratio': up, 'downlink_ratio': down,
         'accuracy_change_points': change}
  assert compression_study.meets_target(row) is meets


def test_private_rows_get_an_epsilon_column():
  row = dict(setting='a', description='d', downlink_bits_per_round=8,
             uplink_bits_per_round=8, downlink_ratio=1.0, uplink_ratio=1.0,
             test_accuracy=0.5, accuracy_change_points=0.0, meets_target=False,
             epsilon=None, delta=None)
  plain = compression_study.markdown_table([row])
  assert 'epsilon' not in plain
  private = compression_study.markdown_table(
      [row, dict(row, setting='b', epsilon=2.345, delta=1e-5)])
  header, _, first, second = private.splitlines()
  assert header.endswith(' epsilon |') and first.endswith('| no | — |')
  assert second.endswith('| no | 2.35 at delta 1e-05 |')


@pytest.mark.slow
def test_secure_aggregation_learns_and_counts_masked_bits(tmp_path):
  """--aggregation-encoder secure:8: the update goes through secure sums as
  8-bit levels, counted at their masked width (8 + ceil(log2 5) bits)."""
  result = fedavg.run_experiment(
      _config(tmp_path, rounds=4, aggregation_encoder='secure:8'),
      print_fn=lambda line: None)
  curve, form = result.curve, result.form
  assert [s.kind for s in form.secure_sums] == [
      'federated_secure_sum_bitwidth', 'federated_secure_sum',
      'federated_secure_sum']
  accuracies = [p['test_accuracy'] for p in curve]
  assert accuracies[-1] > 0.3 and accuracies[-1] > accuracies[0]
  trainable = sum(s.shape.num_elements()
                  for s in tf.nest.flatten(form.secure_update_spec[0]))
  # Per client: every level at 8 + 3 bits, two counters at their moduli
  # (6: clients + 1 -> 3 bits; 5 * trainable + 1), and the float metrics.
  plain_bits = form.aggregated_bits - 32 * (trainable + 2)
  masked = trainable * 11 + 3 + (5 * trainable).bit_length()
  assert curve[0]['round_aggregated_bits'] == 5 * (plain_bits + masked)


@pytest.mark.slow
def test_dp_fedavg_through_secure_aggregation(tmp_path, monkeypatch):
  """DP with its levels through secure sums: the same accounting; a DP
  run resumes (its secret noise seed stays with the run, so the rebuilt
  form is the same); --secure-neighbors reaches every round."""
  degrees, start = [], secure_round.SecureRound.start
  monkeypatch.setattr(
      secure_round.SecureRound, 'start',
      lambda self, *args: degrees.append(args[-1]) or start(self, *args))
  lines = []
  config = _config(tmp_path, rounds=1, noise_multiplier=0.5, clip=1.0,
                   aggregation_encoder='secure:8', secure_neighbors='2')
  fedavg.run_experiment(config, print_fn=lines.append)
  seed = (tmp_path / 'run' / fedavg.NOISE_SEED_FILE).read_text()
  config = dataclasses.replace(config, rounds=2)
  result = fedavg.run_experiment(config, print_fn=lines.append)
  assert any('resuming after round 1' in line for line in lines)
  assert (tmp_path / 'run' / fedavg.NOISE_SEED_FILE).read_text() == seed
  assert degrees and set(degrees) == {2}  # Every round: the ring.
  assert [p['epsilon'] for p in result.curve] == pytest.approx(
      [canonical.privacy.epsilon(0.5, 0.5, r, 1e-5) for r in (1, 2)])
  assert 'Poisson sampling q=0.5, through secure:8)' in lines[0]
  form = canonical.load(result.form_path)
  assert [s.kind for s in form.secure_sums] == [
      'federated_secure_modular_sum']
  assert all(np.isfinite(p['accuracy']) for p in result.curve
             if 'accuracy' in p)


def test_secure_server_reaches_every_secure_round(tmp_path, monkeypatch):
  """--secure-server honest runs the semi-honest protocol (the default,
  against a malicious server, runs in the other secure tests)."""
  seen, start = [], secure_round.SecureRound.start
  monkeypatch.setattr(
      secure_round.SecureRound, 'start',
      lambda self, *args: seen.append(self.malicious_server) or start(
          self, *args))
  assert fedavg.Config().secure_server == 'malicious'
  fedavg.run_experiment(
      _config(tmp_path, rounds=1, aggregation_encoder='secure:8',
              secure_server='honest'), print_fn=lambda line: None)
  assert seen and not any(seen)


@pytest.mark.slow
def test_tffs_dp_aggregator_is_the_job_with_its_epsilon(tmp_path):
  """--tff-aggregator dp: TFF's unweighted FedAvg with its dp_aggregator,
  clients sampled by Poisson, epsilon at the round's total noise multiplier
  (TFF's convention) after each round; a rerun resumes on the same form (the
  run's noise seed is kept beside it)."""
  lines = []
  config = _config(tmp_path, tff_aggregator='dp', noise_multiplier=0.4,
                   rounds=2, eval_every=2)
  result = fedavg.run_experiment(config, print_fn=lines.append)
  assert "TFF's unweighted FedAvg with its dp aggregator (noise multiplier " \
      '0.4, adaptive clip, Poisson sampling q=0.5)' in lines[0]
  epsilons = [p['epsilon'] for p in result.curve]
  assert epsilons == pytest.approx(
      [canonical.privacy.epsilon(0.4, 0.5, r, 1e-5) for r in (1, 2)])
  state = result.form.initialize()
  query = state.aggregator['inner_agg']['query_state']
  assert 'quantile_estimator_state' in query['numerator_state']
  config.rounds = 3
  again = fedavg.run_experiment(config, print_fn=lines.append)
  assert [p['round'] for p in again.curve] == [1, 2, 3]
  assert 'resuming after round 2' in ''.join(lines)


def test_banded_dp_ftrl_samples_cyclically_and_reports_its_epsilon(tmp_path):
  """--dp-mechanism banded: the form's banded release, clients in
  clients // clients-per-round groups taken in turn, epsilon of the run's
  one Gaussian mechanism after each round; a target it passes is refused
  before the form is written."""
  lines = []
  config = _config(tmp_path, rounds=2, noise_multiplier=0.8,
                   dp_mechanism='banded', bands=2, eval_every=2)
  result = fedavg.run_experiment(config, print_fn=lines.append)
  assert 'DP-FTRL, banded matrix factorization (noise multiplier 0.8, ' \
      'clip 1, cyclic sampling)' in lines[0]
  (release,) = result.form.privacy_releases
  assert release.mechanism == 'banded' and len(release.coefficients) == 2
  run = beam_runner.RunDir(result.run_dir)
  # 10 clients, 5 a round: 2 groups, each client once in 2 rounds, so its
  # one column is cut to the rows released: c_0, then (c_0, c_1).
  c0 = release.coefficients[0]
  assert [run.outcome(r)['privacy']['epsilon'] for r in (1, 2)] == \
      pytest.approx([canonical.privacy.epsilon(0.8 / c0, 1.0, 1, 1e-5),
                     canonical.privacy.epsilon(0.8, 1.0, 1, 1e-5)])
  assert run.outcome(2)['privacy']['rounds_per_client'] == 1
  with pytest.raises(fedavg.ConfigError, match='spend epsilon .* above '
                     '--target-epsilon 1'):
    fedavg.run_experiment(_config(
        tmp_path, name='over', rounds=2, noise_multiplier=0.8,
        dp_mechanism='banded', bands=2, target_epsilon=1.0),
                          print_fn=lines.append)
  assert not os.path.exists(tmp_path / 'over' / fedavg.FORM_FILE)


def test_tree_dp_ftrl_with_an_adaptive_clip_is_tffs_tree_adaptive(tmp_path):
  """--dp-mechanism tree --adaptive-clip: TFF's tree_adaptive (the value's
  tree and the count's), sampled cyclically, each round's epsilon the
  runtime's for those releases."""
  config = _config(tmp_path, rounds=2, noise_multiplier=0.2,
                   dp_mechanism='tree', adaptive_clip=True, eval_every=2)
  result = fedavg.run_experiment(config, print_fn=lambda line: None)
  releases = result.form.privacy_releases
  assert [r.mechanism for r in releases] == ['tree', 'tree']
  assert canonical.privacy.combined_noise_multiplier(
      [r.noise_multiplier for r in releases]) == pytest.approx(0.2)
  run = beam_runner.RunDir(result.run_dir)
  for r in (1, 2):
    assert run.outcome(r)['privacy']['epsilon'] == pytest.approx(
        spending.spent(releases, sampling='cyclic', clients_per_round=5,
                       population=10, rounds=r, delta=1e-5)['epsilon'])


def test_distributed_dp_noises_at_each_client_through_the_secure_sums(
    tmp_path):
  """--dp-mechanism distributed_skellam: DistributedDpSumFactory's sum
  through the masking protocol (a modular secure sum), its release, and
  each round's epsilon as zCDP rounds (no amplification by sampling)."""
  config = _config(tmp_path, rounds=2, noise_multiplier=0.3,
                   dp_mechanism='distributed_skellam', eval_every=2)
  result = fedavg.run_experiment(config, print_fn=lambda line: None)
  (release,) = result.form.privacy_releases
  assert release.mechanism == 'distributed_skellam'
  assert release.noise_multiplier == pytest.approx(0.3, rel=1e-3)
  assert release.parameters['clients'] == 5
  assert 'federated_secure_modular_sum' in [
      s.kind for s in result.form.secure_sums]
  run = beam_runner.RunDir(result.run_dir)
  spent = [run.outcome(r)['privacy']['epsilon'] for r in (1, 2)]
  assert spent == pytest.approx([
      spending.spent((release,), sampling='poisson', clients_per_round=5,
                     population=10, rounds=r, delta=1e-5)['epsilon']
      for r in (1, 2)])
  assert spent[0] > canonical.privacy.epsilon(0.3, 0.5, 1, 1e-5)
  assert all(np.isfinite(p['accuracy']) for p in result.curve
             if 'accuracy' in p)


@pytest.mark.slow
def test_dp_fedavg_reports_epsilon_every_round(tmp_path):
  lines = []
  config = _config(tmp_path, rounds=3, noise_multiplier=0.5, clip=1.0,
                   eval_every=2)
  result = fedavg.run_experiment(config, print_fn=lines.append)
  epsilons = [p['epsilon'] for p in result.curve]
  q = 5 / 10
  assert epsilons == pytest.approx(
      [canonical.privacy.epsilon(0.5, q, r, 1e-5) for r in (1, 2, 3)])
  assert epsilons[0] < epsilons[1] < epsilons[2]
  assert f'epsilon {epsilons[-1]:.3f}' in lines[-1]
  assert 'DP-FedAvg (noise multiplier 0.5, clip 1, Poisson sampling q=0.5)' \
      in lines[0]
  run = beam_runner.RunDir(result.run_dir)
  assert run.outcome(3)['privacy'] == {
      'epsilon': pytest.approx(epsilons[-1]), 'delta': 1e-5,
      'accountant': 'rdp', 'noise_multiplier': 0.5,
      'sampling_probability': q, 'neighbours': 'add or remove one client'}
  assert 'epsilon' not in run.outcome(3)['evaluation']
  tags = set()
  board = os.path.join(result.run_dir, 'tensorboard')
  for name in os.listdir(board):
    for event in tf.compat.v1.train.summary_iterator(
        os.path.join(board, name)):
      tags.update(v.tag for v in event.summary.value)
  assert 'privacy/epsilon' in tags
