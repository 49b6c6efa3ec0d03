"""The compression study: one federated averaging experiment per encoder setting.

    python -m pipelines.compression_study                     # Fashion-MNIST, CNN
    python -m pipelines.compression_study --quick             # digits, a few rounds
    python -m pipelines.compression_study --json rows.json --settings uncompressed,tutorial_8bit

Every setting runs with the same data, seeds, rounds and sampled clients, so
its curve differs from the uncompressed one only by what its encoders lose;
each setting names its own size threshold, so the study's figures keep their
meaning whatever the main job's default. Writes each run under
OUTPUT_DIR/<setting>/, one PNG of every setting's test accuracy against
cumulative bits, a markdown table (also into BENCHMARKS.md between markers,
with --write-benchmarks), and with --json the rows. Reruns resume: settings
and rounds already committed are not run again.
Outputs go through `canonical.io`: OUTPUT_DIR may be s3://bucket/study
(with Beam's --s3_* flags), like the main job's.
"""

import argparse
import dataclasses
import json
import os
import sys
import time

from canonical import errors
from canonical import io as storage_lib
from canonical import quiet
from pipelines import fedavg
from pipelines import reporting

OUTPUT_ROOT = 'compression_study_output'
TARGET_UPLINK_RATIO = 32.0
TARGET_DOWNLINK_RATIO = 8.0
TARGET_ACCURACY_POINTS = 1.0


@dataclasses.dataclass(frozen=True)
class Setting:
  name: str
  description: str
  broadcast_encoder: str = 'none'
  aggregation_encoder: str = 'none'
  threshold: int = 10000
  error_feedback: bool = False
  noise_multiplier: float = None  # DP-FedAvg when set.
  clip: float = 1.0


SETTINGS = (
    Setting('uncompressed', 'float32 both ways'),
    Setting('tutorial_8bit', "the tutorial's: 8-bit uniform both ways, "
            'tensors of 10,000+ elements', 'uniform:8', 'uniform:8'),
    Setting('hadamard', 'down 4-bit nearest uniform; up 3-bit Hadamard',
            'uniform_nearest:4', 'hadamard:3', threshold=1000),
    Setting('drive', 'down 3-bit nearest uniform; up DRIVE 1-bit',
            'uniform_nearest:3', 'drive', threshold=1000),
    Setting('subsampled_drive', 'down 3-bit nearest uniform; up DRIVE on a '
            'random half (0.5 bit)', 'uniform_nearest:3',
            'subsampled_drive:0.5', threshold=1000),
    Setting('subsampled_drive_quarter', 'down 3-bit nearest uniform; up DRIVE '
            'on a random quarter (0.25 bit)', 'uniform_nearest:3',
            'subsampled_drive:0.25', threshold=1000),
    Setting('top_k_ef', 'down 3-bit nearest uniform; up top-1.25% with error '
            'feedback in client state', 'uniform_nearest:3', 'top_k:0.0125',
            threshold=1000, error_feedback=True),
    Setting('secure_8bit', 'down 3-bit nearest uniform; up through secure '
            'aggregation: 8-bit Hadamard-rotated levels, masked (8 + '
            'log2(clients) bits), unweighted mean', 'uniform_nearest:3',
            'secure:8', threshold=1000),
    Setting('dp', 'DP-FedAvg: clip 1, noise multiplier 0.5, Poisson '
            'sampling; float32 both ways', noise_multiplier=0.5, clip=1.0),
    Setting('dp_compressed_down', 'DP-FedAvg as dp; down 3-bit nearest '
            'uniform', 'uniform_nearest:3', noise_multiplier=0.5, clip=1.0,
            threshold=1000),
    Setting('dp_secure_8bit', 'DP-FedAvg as dp; down 3-bit nearest uniform; '
            'up through secure aggregation: 8-bit Hadamard-rotated levels '
            '(conditional rounding), noise once on the decoded sum',
            'uniform_nearest:3', 'secure:8', noise_multiplier=0.5, clip=1.0,
            threshold=1000),
)
BY_NAME = {s.name: s for s in SETTINGS}


def run_study(base, settings=SETTINGS, pipeline_options=None, print_fn=print):
  """Runs `base` (a `fedavg.Config`) once per setting; returns the rows."""
  results = {}
  started = time.monotonic()
  for done, setting in enumerate(settings):
    config = dataclasses.replace(
        base, broadcast_encoder=setting.broadcast_encoder,
        aggregation_encoder=setting.aggregation_encoder,
        threshold=setting.threshold, error_feedback=setting.error_feedback,
        noise_multiplier=setting.noise_multiplier, clip=setting.clip,
        output_dir=storage_lib.join(base.output_dir, setting.name),
        data_dir=base.data_dir)
    left = reporting.time_left(time.monotonic() - started, done,
                               len(settings) - done)
    print_fn(f'== setting {done + 1} of {len(settings)}, {setting.name}: '
             f'{setting.description}' + (f' ({left})' if left else ''))
    results[setting.name] = fedavg.run_experiment(config, pipeline_options,
                                                  print_fn=print_fn)
  return rows_of(results, settings)


def _per_round(curve, key):
  return sum(p[key] for p in curve) / len(curve)


def rows_of(results, settings):
  """One row per setting; ratios against the 'uncompressed' setting if run."""
  baseline = results.get('uncompressed')
  rows = []
  for setting in settings:
    result = results[setting.name]
    down = _per_round(result.curve, 'round_broadcast_bits')
    up = _per_round(result.curve, 'round_aggregated_bits')
    row = {
        'setting': setting.name,
        'description': setting.description,
        'model': result.model_name,
        'rounds': len(result.curve),
        'downlink_bits_per_round': down,
        'uplink_bits_per_round': up,
        'test_accuracy': result.final_test_accuracy,
        'downlink_ratio': None, 'uplink_ratio': None,
        'accuracy_change_points': None,
        'epsilon': result.curve[-1].get('epsilon'),
        'delta': result.config.delta if setting.noise_multiplier else None,
    }
    if baseline is not None:
      row['downlink_ratio'] = _per_round(
          baseline.curve, 'round_broadcast_bits') / down
      row['uplink_ratio'] = _per_round(
          baseline.curve, 'round_aggregated_bits') / up
      row['accuracy_change_points'] = 100 * (
          result.final_test_accuracy - baseline.final_test_accuracy)
    row['meets_target'] = meets_target(row)
    row['curve'] = result.curve
    rows.append(row)
  return rows


def meets_target(row):
  """At least 32x fewer uplink and 8x fewer downlink bits, accuracy within
  1 point of uncompressed."""
  if row['uplink_ratio'] is None:
    return False
  return (row['uplink_ratio'] >= TARGET_UPLINK_RATIO and
          row['downlink_ratio'] >= TARGET_DOWNLINK_RATIO and
          row['accuracy_change_points'] >= -TARGET_ACCURACY_POINTS)


def _ratio(value):
  return '—' if value is None else f'{value:.2f}x'


def markdown_table(rows):
  private = any(row.get('epsilon') is not None for row in rows)
  lines = ['| setting | down bits/round | up bits/round | downlink ratio | '
           'uplink ratio | test accuracy | vs uncompressed | target |' +
           (' epsilon |' if private else ''),
           '|---|---|---|---|---|---|---|---|' + ('---|' if private else '')]
  for row in rows:
    change = row['accuracy_change_points']
    spent = ''
    if private:
      spent = (' — |' if row.get('epsilon') is None else
               f' {row["epsilon"]:.2f} at delta {row["delta"]:g} |')
    lines.append(
        f'| {row["setting"]}: {row["description"]} | '
        f'{reporting.human_bits(row["downlink_bits_per_round"])} | '
        f'{reporting.human_bits(row["uplink_bits_per_round"])} | '
        f'{_ratio(row["downlink_ratio"])} | {_ratio(row["uplink_ratio"])} | '
        f'{row["test_accuracy"]:.4f} | '
        f'{"—" if change is None else f"{change:+.2f} pt"} | '
        f'{"yes" if row["meets_target"] else "no"} |{spent}')
  return '\n'.join(lines)


def study_key(config):
  """Names a study's section in BENCHMARKS.md: one section per dataset and
  partition, so a non-IID study does not replace the IID one."""
  partition = config.partition
  if partition == 'dirichlet':
    partition += f'{config.alpha:g}'
  elif partition == 'shards':
    partition += f'{config.shards_per_client}'
  return f'{os.path.basename(os.path.normpath(config.dataset))}-{partition}'


def markers(key):
  return (f'<!-- compression-study {key}: start -->',
          f'<!-- compression-study {key}: end -->')


def update_benchmarks_md(path, section, key):
  """Puts `section` between the study's markers for `key` in `path` (appended
  the first time), atomically."""
  try:
    text = storage_lib.read_bytes(path).decode()
  except storage_lib.NotFound:
    text = ''
  start, end = markers(key)
  block = f'{start}\n{section.strip()}\n{end}'
  if start in text and end in text:
    before = text[:text.index(start)]
    after = text[text.index(end) + len(end):]
    text = before + block + after
  else:
    text = text.rstrip('\n') + '\n\n' + block + '\n'
  storage_lib.write_bytes(path, text.encode())


def section_text(base, rows, command, plot_path):
  met = [r['setting'] for r in rows if r['meets_target']]
  verdict = (f'met by {", ".join(met)}.' if met else
             'no setting met it in this run.')
  return '\n'.join([
      f'## Compression study: {study_key(base)} (federated averaging on Beam)',
      '',
      f'Command: `{command}`',
      '',
      f'Model {rows[0]["model"]}; dataset {base.dataset}, '
      f'{study_key(base).rsplit("-", 1)[1]} partition over '
      f'{base.num_clients} clients, {base.clients_per_round} clients per '
      f'round, {rows[0]["rounds"]} rounds, local epochs {base.epochs} of '
      f'batches of {base.batch_size}, client SGD lr {base.client_lr}, server '
      f'{base.server_optimizer} lr {base.server_lr}, seed {base.seed}. Bits are '
      'measured from the tensors that travel (broadcast: the payload times '
      'the clients; aggregated: every client\'s update), averaged per round; '
      'ratios are uncompressed over setting. Test accuracy is the server '
      'model\'s after the last round, from one seed (the spread across '
      'seeds is not measured by this command).',
      '',
      markdown_table(rows),
      '',
      f'Target (at least {TARGET_UPLINK_RATIO:.0f}x uplink, '
      f'{TARGET_DOWNLINK_RATIO:.0f}x downlink, accuracy within '
      f'{TARGET_ACCURACY_POINTS:.0f} point of uncompressed): {verdict}',
      '',
      f'Accuracy against cumulative bits: `{plot_path}`.',
  ])


def build_parser():
  parser = argparse.ArgumentParser(
      prog='python -m pipelines.compression_study',
      description=__doc__.split('\n\n')[0],
      epilog='Settings: ' + '; '.join(f'{s.name} ({s.description})'
                                      for s in SETTINGS) +
      '. Other flags are Beam pipeline options (--runner, --s3_*, ...); a '
      'flag neither this program nor Beam knows is an error.')
  parser.add_argument('--dataset', default='fashion_mnist')
  parser.add_argument('--partition', default='iid',
                      choices=('iid', 'dirichlet', 'shards'))
  parser.add_argument('--alpha', type=float, default=0.5)
  parser.add_argument('--num-clients', type=int, default=100)
  parser.add_argument('--rounds', type=int, default=50)
  parser.add_argument('--clients-per-round', type=int, default=10)
  parser.add_argument('--epochs', type=int, default=None,
                      help="default: pipelines.fedavg's for the dataset")
  parser.add_argument('--batch-size', type=int, default=20)
  parser.add_argument('--client-lr', type=float, default=None,
                      help="default: pipelines.fedavg's for the dataset")
  parser.add_argument('--eval-every', type=int, default=5)
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--settings', default=','.join(BY_NAME),
                      help='comma-separated setting names (default: all)')
  parser.add_argument('--quick', action='store_true',
                      help='digits, 20 clients, 5 rounds: a smoke run')
  parser.add_argument('--output-dir', default=None,
                      help='a local directory or a URL (s3://bucket/path); '
                      f'default: {OUTPUT_ROOT}/KEY_DIGEST, KEY the dataset '
                      'and partition, DIGEST of every flag that shapes the '
                      'study (the same command resumes there)')
  parser.add_argument('--plot', default=None,
                      help='the PNG to write (default: '
                      'OUTPUT_DIR/compression_study.png)')
  parser.add_argument('--json', default=None,
                      help='write the rows (setting, uplink_ratio, '
                      'downlink_ratio, test_accuracy, ...) here')
  parser.add_argument('--write-benchmarks', action='store_true',
                      help="replace the study's section of --benchmarks-md "
                      '(not written without this flag)')
  parser.add_argument('--benchmarks-md', default=None,
                      help='the markdown file --write-benchmarks writes '
                      '(default: BENCHMARKS.md)')
  # Accepted for the commands BENCHMARKS.md records; not writing it is now
  # the default.
  parser.add_argument('--no-benchmarks-md', action='store_true',
                      help=argparse.SUPPRESS)
  return parser


def main(argv=None):
  quiet.environment()
  parser = build_parser()
  args, beam_flags = parser.parse_known_args(argv)
  names = [n.strip() for n in args.settings.split(',') if n.strip()]
  unknown = [n for n in names if n not in BY_NAME]
  if unknown or not names:
    parser.error(f'unknown --settings {", ".join(unknown) or "(none)"}; '
                 f'choose from {", ".join(BY_NAME)}')
  if args.benchmarks_md and not args.write_benchmarks:
    parser.error('--benchmarks-md names the file --write-benchmarks writes; '
                 'add --write-benchmarks')
  if args.write_benchmarks and args.no_benchmarks_md:
    parser.error('--write-benchmarks and --no-benchmarks-md contradict')
  if args.quick:
    args.dataset, args.num_clients, args.rounds = 'digits', 20, 5
    args.eval_every = 1
  from beam_runner import options as runner_options  # pylint: disable=g-import-not-at-top
  quiet.third_party()
  try:
    base = fedavg.Config(
        dataset=args.dataset, partition=args.partition, alpha=args.alpha,
        num_clients=args.num_clients, rounds=args.rounds,
        clients_per_round=args.clients_per_round, epochs=args.epochs,
        batch_size=args.batch_size, client_lr=args.client_lr,
        eval_every=args.eval_every, seed=args.seed)
    args.output_dir = args.output_dir or storage_lib.join(
        OUTPUT_ROOT, f'{study_key(base)}_{fedavg.run_digest(base)}')
    base = dataclasses.replace(
        base, output_dir=args.output_dir,
        data_dir=storage_lib.join(args.output_dir, fedavg.DATA_DIR))
    options = runner_options.beam_options(beam_flags,
                                          'pipelines.compression_study')
    storage = storage_lib.storage_for(options)
    settings = [BY_NAME[n] for n in names]
    rows = run_study(base, settings, options,
                     print_fn=lambda line: print(line, flush=True))
  except errors.Error as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  plot_path = reporting.plot_accuracy_vs_bits(
      {r['setting']: r['curve'] for r in rows},
      args.plot or storage_lib.join(args.output_dir, 'compression_study.png'),
      f'compression study: {base.dataset}, {base.rounds} rounds', storage)
  table = markdown_table(rows)
  print(table)
  print(f'plot: {plot_path}')
  if args.json:
    storage.write_bytes(args.json, json.dumps(rows, indent=1).encode())
  if args.write_benchmarks:
    command = 'python -m pipelines.compression_study ' + ' '.join(
        argv if argv is not None else sys.argv[1:])
    update_benchmarks_md(args.benchmarks_md or 'BENCHMARKS.md',
                         section_text(base, rows, command.strip(), plot_path),
                         study_key(base))
  return 0


if __name__ == '__main__':
  sys.exit(main())
