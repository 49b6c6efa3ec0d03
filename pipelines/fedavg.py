"""The main job: federated averaging with compressed broadcast and aggregation, on Beam.

    python -m pipelines.fedavg                       # digits, 10 rounds, no compression
    python -m pipelines.fedavg --dataset fashion_mnist --rounds 50 \\
        --broadcast-encoder uniform:8 --aggregation-encoder uniform:8
    python -m pipelines.fedavg ... --runner=DirectRunner --direct_num_workers=2 \\
        --direct_running_mode=multi_processing       # Beam flags pass through
    python -m pipelines.fedavg ... --output-dir s3://bucket/run1 \\
        --s3_endpoint_url http://HOST:9000 \\
        --runner DaskRunner --dask_client_address tcp://HOST:8786

Steps: partition the dataset into per-client TFRecord shards (a Beam pipeline,
reused when it exists), build TFF's federated averaging process
(`tff.learning.algorithms`) with the aggregator and broadcast the flags choose,
compile it to a canonical form and save it, run its rounds on Beam,
evaluating the server model on the test set after each round. Prints the
compression tutorial's line per round (with the time left); writes
TensorBoard logs, `summary.json` and a PNG of test accuracy against bits.
A rerun with the same flags and output directory resumes where it stopped;
without --output-dir, each experiment has its own (`experiment_dir`).

Every file goes through `canonical.io`, so the output and data
directories may be local or on an object store (s3://, gs://): workers of a
distributed engine then need no shared disk. A storage or engine that cannot
be reached, and a flag neither this program nor Beam knows, are one `error:`
line and exit status 2 before any round runs.
"""

import argparse
import dataclasses
import functools
import hashlib
import json
import os
import re
import secrets
import sys
import time

# TensorFlow, Beam and what imports them are imported where they are used,
# so that --help and bad flags are answered at once.
from beam_runner import options as runner_options
from canonical import errors
from canonical import io as storage_lib
from canonical import quiet
from pipelines import encoder_choice
# The experiment (fedavg_config) and its model and process (fedavg_process)
# have modules of their own; their names are this job's too.
from pipelines.fedavg_config import Config
from pipelines.fedavg_config import ConfigError
from pipelines.fedavg_config import DATA_DIR  # pylint: disable=unused-import
from pipelines.fedavg_config import DP_MECHANISMS
from pipelines.fedavg_config import MODELS
from pipelines.fedavg_config import OUTPUT_ROOT
from pipelines.fedavg_config import TFF_AGGREGATORS
from pipelines.fedavg_process import build_process
from pipelines.fedavg_process import make_evaluator
from pipelines.fedavg_process import model_for

FORM_FILE = 'form.pb'
NOISE_SEED_FILE = 'noise_seed'  # DP runs: the secret seed of their noise.
CONFIG_FILE = 'config.json'
SUMMARY_FILE = 'summary.json'
PLOT_FILE = 'accuracy_vs_bits.png'
RUN_DIR = 'run'



@dataclasses.dataclass
class Result:
  config: Config
  model_name: str
  curve: list          # One `reporting.curve_point` per round.
  form: object         # The CanonicalForm run.
  form_path: str
  run_dir: str
  plot_path: str
  summary_path: str

  @property
  def final_test_accuracy(self):
    evaluated = [p['test_accuracy'] for p in self.curve
                 if p['test_accuracy'] is not None]
    return evaluated[-1] if evaluated else None


def _check_output_dir(config, claim, storage=None):
  """Refuses an output directory made by a different experiment; with
  `claim`, records this one there (once everything else is checked, so that
  a refused run leaves nothing that refuses its corrected rerun)."""
  from beam_runner.driver import run_dir as run_dir_lib  # pylint: disable=g-import-not-at-top
  compare = run_dir_lib.record_or_compare if claim else \
      run_dir_lib.compare_recorded
  differing = compare(storage or storage_lib.default(),
                      storage_lib.join(config.output_dir, CONFIG_FILE),
                      config.run_description())
  if differing:
    raise ConfigError(
        f'{config.output_dir!r} holds a run of another experiment (it '
        f'differs in {", ".join(differing)}); pick another --output-dir or '
        'delete that one.')


def run_experiment(config, pipeline_options=None, print_fn=print,
                   runner_progress=None, rounds_per_pipeline=None,
                   clients_per_element=None):
  """Prepares data, builds, compiles, saves and runs one experiment; a `Result`.

  `pipeline_options` (flags, dict, `PipelineOptions` or an open engine)
  choose the engine and the filesystem settings (S3 endpoint, credentials);
  without them rounds run in-process on the process's default storage. One
  engine serves the data preparation and the rounds (one local Dask
  cluster, not two). `rounds_per_pipeline` and `clients_per_element` go to
  `beam_runner.run` (they change speed, not results).
  """
  from beam_runner import engines  # pylint: disable=g-import-not-at-top
  from pipelines import prepare_data  # pylint: disable=g-import-not-at-top
  from pipelines import reporting  # pylint: disable=g-import-not-at-top
  options = engines.pipeline_options_of(pipeline_options)
  storage = storage_lib.storage_for(options)
  output_dir = storage.absolute(config.output_dir)
  storage.check_writable(output_dir, 'output directory')
  _check_output_dir(config, False, storage)
  with engines.open_engine(options) as engine:
    prepared = prepare_data.prepare(
        config.dataset, storage.absolute(config.data_dir), config.num_clients,
        scheme=config.partition, alpha=config.alpha,
        shards_per_client=config.shards_per_client,
        batch_size=config.batch_size, seed=config.seed,
        pipeline_options=engine)
    model_name, model, form, form_path = _compile(config, prepared,
                                                  output_dir, print_fn,
                                                  storage)
    _check_output_dir(config, True, storage)
    run_dir = storage_lib.join(output_dir, RUN_DIR)
    curve = _run_rounds(
        config, engine, prepared, model, form_path, run_dir, storage,
        print_fn,
        runner_progress or (lambda line: None),
        dict(rounds_per_pipeline=rounds_per_pipeline,
             clients_per_element=clients_per_element,
             sampling=config.sampling,
             privacy_delta=config.delta,
             secure_neighbors=config.runner_secure_neighbors,
             secure_server=config.secure_server))
  manifest = prepared.manifest
  plot_path = reporting.plot_accuracy_vs_bits(
      {_label(config): curve}, storage_lib.join(output_dir, PLOT_FILE),
      f'federated averaging on {manifest["dataset"]} ({model_name})',
      storage)
  summary_path = storage_lib.join(output_dir, SUMMARY_FILE)
  storage.write_bytes(summary_path, json.dumps({
      'config': dataclasses.asdict(config),
      'model': model_name,
      'form_broadcast_bits_per_client': form.broadcast_bits,
      'form_aggregated_bits_per_client': form.aggregated_bits,
      'curve': curve}, indent=1).encode())
  return Result(config, model_name, curve, form, form_path, run_dir,
                plot_path, summary_path)


def _compile(config, prepared, output_dir, print_fn, storage):
  """The model, and the saved form of its federated averaging process."""
  import canonical  # pylint: disable=g-import-not-at-top
  from pipelines import reporting  # pylint: disable=g-import-not-at-top
  manifest = prepared.manifest
  model_name, model = model_for(config, manifest['image_shape'],
                                manifest['num_classes'])
  print_fn(f'fedavg: {manifest["dataset"]}, {config.partition} partition over '
           f'{config.num_clients} clients, '
           f'{manifest["num_test_examples"]} test examples; model '
           f'{model_name} ({_parameters(model):,} parameters); broadcast '
           f'{config.broadcast_encoder}, aggregation {_aggregation(config)}')
  noise_seed = _noise_seed(output_dir, storage) if config.private else None
  form = canonical.compile(build_process(config, model, noise_seed))
  _check_plan(config, form)
  form_path = canonical.save(form, storage_lib.join(output_dir, FORM_FILE),
                             storage)
  print_fn(f'form: {form_path}; per client: broadcast '
           f'{reporting.human_bits(form.broadcast_bits)}, aggregated '
           f'{reporting.human_bits(form.aggregated_bits)}')
  return model_name, model, form, form_path


def _check_plan(config, form):
  """--target-epsilon against what the form's releases spend over
  --rounds (DP-FedAvg's Gaussian plan is checked with the flags)."""
  if config.target_epsilon is None or config.dp_mechanism == 'gaussian':
    return
  from canonical.privacy import spending  # pylint: disable=g-import-not-at-top
  spent = spending.spent(
      form.privacy_releases, sampling=config.sampling,
      clients_per_round=config.clients_per_round,
      population=config.num_clients, rounds=config.rounds,
      delta=config.delta)['epsilon']
  if spent > config.target_epsilon:
    raise ConfigError(
        f'--dp-mechanism {config.dp_mechanism}: {config.rounds} rounds at '
        f'noise multiplier {config.noise_multiplier:g} spend epsilon '
        f'{spent:.4g} at delta {config.delta:g}, above --target-epsilon '
        f'{config.target_epsilon:g}.')


def _noise_seed(output_dir, storage):
  """The run's secret noise seed, drawn once and kept beside its form (as
  private as the form, which carries it): a resumed DP run rebuilds the
  same form."""
  path = storage_lib.join(output_dir, NOISE_SEED_FILE)
  try:
    storage.create_only(path, str(secrets.randbits(63)).encode())
  except storage_lib.AlreadyExists:
    pass
  return int(storage.read_bytes(path))


def _run_rounds(config, engine, prepared, model, form_path, run_dir, storage,
                print_fn, runner_progress, runner_options):
  """Runs (or resumes) the rounds, evaluating on the test set; the curve."""
  import beam_runner  # pylint: disable=g-import-not-at-top
  from pipelines import reporting  # pylint: disable=g-import-not-at-top
  evaluator = make_evaluator(model, *prepared.test_set())
  curve = _committed_curve(run_dir, storage)
  if curve:
    print_fn(f'resuming after round {curve[-1]["round"]} (committed in '
             f'{run_dir}):')
    for point in curve:
      print_fn(reporting.round_line(point, config.rounds))

  def evaluate(state):
    # Rounds commit one by one, each evaluated just before: the next one.
    rounds_done = (curve[-1]['round'] if curve else 0) + 1
    if rounds_done % config.eval_every and rounds_done != config.rounds:
      return {}
    return evaluator(state)

  ends = [time.monotonic()]  # The start, then the end of each round run.

  def on_round(outcome):
    curve.append(reporting.curve_point(outcome, curve[-1] if curve else None))
    ends.append(time.monotonic())
    # The first round also loads the form and warms the engine up: once
    # there are later ones, their pace is the estimate's.
    paced = ends[1:] if len(ends) > 2 else ends
    left = reporting.time_left(paced[-1] - paced[0], len(paced) - 1,
                               config.rounds - curve[-1]['round'])
    print_fn(reporting.round_line(curve[-1], config.rounds) +
             (f'  {left}' if left else ''))

  beam_runner.run(
      form_path, prepared.client_data, config.rounds, config.clients_per_round,
      run_dir, pipeline_options=engine, seed=config.seed,
      progress=runner_progress, evaluate=evaluate, on_round=on_round,
      **runner_options)
  return curve


def _curve(outcomes):
  from pipelines import reporting  # pylint: disable=g-import-not-at-top
  curve = []
  for outcome in outcomes:
    curve.append(reporting.curve_point(outcome, curve[-1] if curve else None))
  return curve


def _aggregation(config):
  """How the updates are aggregated, in words, for the run's header."""
  if config.tff_aggregator == 'dp':
    return (f"TFF's unweighted FedAvg with its dp aggregator (noise "
            f'multiplier {config.noise_multiplier:g}, adaptive clip, Poisson '
            f'sampling q={config.sampling_probability:g})')
  if config.tff_aggregator is not None:
    return f"TFF's FedAvg with the {config.tff_aggregator} aggregator"
  if config.private and config.dp_mechanism != 'gaussian':
    clip = 'adaptive clip from' if config.adaptive_clip else 'clip'
    return (f'{DP_MECHANISMS[config.dp_mechanism]} (noise multiplier {config.noise_multiplier:g}, {clip} '
            f'{config.clip:g}, {config.sampling} sampling)')
  if config.private:
    clip = 'adaptive clip from' if config.adaptive_clip else 'clip'
    through = ''
    if encoder_choice.secure_bits(config.aggregation_encoder) is not None:
      through = f', through {config.aggregation_encoder}'
    return (f'DP-FedAvg (noise multiplier {config.noise_multiplier:g}, {clip} '
            f'{config.clip:g}, Poisson sampling q='
            f'{config.sampling_probability:g}{through})')
  if encoder_choice.secure_bits(config.aggregation_encoder) is not None:
    return f'{config.aggregation_encoder} (every tensor)'
  if encoder_choice.is_identity(config.aggregation_encoder):
    return config.aggregation_encoder
  feedback = ' with error feedback' if config.error_feedback else ''
  return (f'{config.aggregation_encoder}{feedback} (tensors of '
          f'{config.threshold:,}+ elements)')


def _committed_curve(run_dir, storage):
  """The curve of rounds an earlier, interrupted invocation committed."""
  import beam_runner  # pylint: disable=g-import-not-at-top
  out = beam_runner.RunDir(run_dir, storage)
  return _curve(out.outcome(r) for r in out.committed_rounds() if r > 0)


def _parameters(model):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return sum(s.shape.num_elements() for s in
             tf.nest.flatten(model.weights_spec.trainable))


def _label(config):
  if config.tff_aggregator is not None:
    return f'TFF {config.tff_aggregator} aggregator'
  if encoder_choice.is_identity(config.broadcast_encoder) and \
      encoder_choice.is_identity(config.aggregation_encoder):
    return 'uncompressed'
  feedback = ' + error feedback' if config.error_feedback else ''
  return (f'down {config.broadcast_encoder}, up '
          f'{config.aggregation_encoder}{feedback}')


def build_parser(prog='python -m pipelines.fedavg'):
  parser = argparse.ArgumentParser(
      prog=prog, description=__doc__.split('\n\n')[0],
      epilog='Other flags are Beam pipeline options (e.g. --runner '
      'DaskRunner --dask_client_address tcp://HOST:8786, '
      '--runner=DirectRunner --direct_num_workers=2, and --s3_endpoint_url '
      'etc. for s3:// directories); a flag neither this program nor Beam '
      'knows is an error. Encoders: ' +
      ', '.join(encoder_choice.names()) + '.')
  defaults = Config(output_dir='fedavg_output')
  data = parser.add_argument_group('data')
  data.add_argument('--dataset', default=defaults.dataset,
                    help="'digits' (scikit-learn, the default), "
                    "'fashion_mnist' (Debian's dataset-fashion-mnist) or a "
                    'directory of MNIST-format IDX files')
  data.add_argument('--partition', choices=('iid', 'dirichlet', 'shards'),
                    default=defaults.partition)
  data.add_argument('--alpha', type=float, default=defaults.alpha,
                    help='Dirichlet concentration (smaller: more skewed)')
  data.add_argument('--shards-per-client', type=int,
                    default=defaults.shards_per_client,
                    help='label shards each client holds (--partition shards)')
  data.add_argument('--num-clients', type=int, default=None,
                    help='clients to partition into (default: 20 for digits, '
                    '100 otherwise)')
  data.add_argument('--data-dir', default=None,
                    help='where the client shards live, local or a URL '
                    '(default: OUTPUT_DIR/data); shared by runs with the same '
                    'data flags')
  train = parser.add_argument_group('training')
  train.add_argument('--model', default='auto', choices=('auto',) + MODELS)
  train.add_argument('--rounds', type=int, default=defaults.rounds)
  train.add_argument('--clients-per-round', type=int,
                     default=defaults.clients_per_round)
  train.add_argument('--epochs', type=int, default=None,
                     help='local epochs per round (default: 3 for digits, 1 '
                     'otherwise and with --tff-aggregator)')
  train.add_argument('--batch-size', type=int, default=defaults.batch_size)
  train.add_argument('--client-lr', type=float, default=None,
                     help='client SGD learning rate (default: 0.3 for digits, '
                     '0.1 otherwise)')
  train.add_argument('--server-optimizer', choices=('sgd', 'adam'),
                     default=defaults.server_optimizer)
  train.add_argument('--server-lr', type=float, default=defaults.server_lr)
  train.add_argument('--server-momentum', type=float,
                     default=defaults.server_momentum)
  train.add_argument('--eval-every', type=int, default=defaults.eval_every,
                     help='evaluate on the test set every N rounds (and '
                     'after the last)')
  train.add_argument('--seed', type=int, default=defaults.seed)
  compress = parser.add_argument_group('compression')
  compress.add_argument('--broadcast-encoder',
                        default=defaults.broadcast_encoder,
                        help='encoder of the model sent to clients')
  compress.add_argument('--aggregation-encoder',
                        default=defaults.aggregation_encoder,
                        help='encoder of the model updates sent back')
  compress.add_argument('--threshold', type=int, default=None,
                        help='only tensors with at least this many elements '
                        'are encoded (default: 1,000 for digits, 10,000 '
                        'otherwise)')
  compress.add_argument(
      '--tff-aggregator', choices=sorted(TFF_AGGREGATORS), default=None,
      help='TFF 0.87\'s model aggregator for its build_weighted_fed_avg '
      '(tff.learning.compression_aggregator(), ...) instead of the one our '
      'encoder, secure and DP flags name; dp: build_unweighted_fed_avg with '
      'tff.learning.dp_aggregator(--noise-multiplier, --clients-per-round), '
      'epsilon reported each round')
  compress.add_argument('--error-feedback', action='store_true',
                        help='each client keeps what its aggregation encoder '
                        'dropped and adds it to its next update')
  compress.add_argument('--secure-server', default=defaults.secure_server,
                        choices=('malicious', 'honest'),
                        help='secure sums hold against a malicious server '
                        '(signed keys, a consistency check before unmasking; '
                        'the default) or an honest-but-curious one (cheaper)')
  compress.add_argument('--secure-neighbors', default=None,
                        help='with --aggregation-encoder secure:BITS: each '
                        'client masks with K ring neighbors (even; SecAgg+) '
                        'or auto, instead of with every other client')
  private = parser.add_argument_group(
      'differential privacy (DP-FedAvg: clipped updates, Gaussian noise on '
      'the sum, Poisson sampling)')
  private.add_argument('--noise-multiplier', type=float, default=None,
                       help='z: noise stddev over the clip (enables DP)')
  private.add_argument('--clip', type=float, default=defaults.clip,
                       help='L2 norm each client update is clipped to (the '
                       'initial one with --adaptive-clip)')
  private.add_argument('--adaptive-clip', action='store_true',
                       help='let the clip follow the median update norm '
                       '(its noisy count costs privacy too)')
  private.add_argument('--dp-mechanism', default=defaults.dp_mechanism,
                       choices=tuple(DP_MECHANISMS),
                       help='how the noise is made: ' + '; '.join(
                           f'{k}: {v}' for k, v in DP_MECHANISMS.items()) +
                       ' (tree and banded take clients in turn; tree with '
                       '--adaptive-clip is TFF\'s tree_adaptive)')
  private.add_argument('--bands', type=int, default=defaults.bands,
                       help='--dp-mechanism banded: the strategy\'s bands '
                       '(at most the clients // clients-per-round groups for '
                       'the tightest accounting)')
  private.add_argument('--ddp-bits', type=int, default=defaults.ddp_bits,
                       help='--dp-mechanism distributed_*: bits of the '
                       'secure sum (TFF\'s bits)')
  private.add_argument('--target-epsilon', type=float, default=None,
                       help='refuse a run whose epsilon after --rounds would '
                       'pass this')
  private.add_argument('--delta', type=float, default=defaults.delta,
                       help='the delta epsilon is reported at')
  runner_options.add_engine_arguments(parser.add_argument_group(
      'engine (speed only: results are the same)'))
  parser.add_argument('--output-dir', default=None,
                      help='a local directory or a URL (s3://bucket/path); '
                      f'default: {OUTPUT_ROOT}/NAME, NAME from the data and '
                      'encoder flags and a digest of every flag that shapes '
                      'the experiment (the same command resumes there)')
  parser.add_argument('--verbose', action='store_true',
                      help="also print the Beam runner's per-round details "
                      '(clients dropped, seconds per stage) to stderr')
  return parser


def config_from_args(args):
  """The flags' Config; without --output-dir, in its `experiment_dir`."""
  fields = {f.name for f in dataclasses.fields(Config)}
  config = Config(**{k: v for k, v in vars(args).items()
                     if k in fields and not (k == 'output_dir' and v is None)})
  if getattr(args, 'output_dir', None) is None:
    config = dataclasses.replace(config, output_dir=experiment_dir(config),
                                 data_dir=args.data_dir)
  return config


def experiment_dir(config, root=OUTPUT_ROOT):
  """ROOT/NAME: the command line's directory for `config`'s experiment.

  NAME says its data and compression and ends with a digest of everything
  that must match for a rerun to resume (`run_description`), so the same
  command resumes there (--rounds may grow) and any other command gets a
  directory of its own instead of being refused.
  """
  if config.tff_aggregator is not None:
    what = [f'tff-{config.tff_aggregator}']
  else:
    what = [f'down-{config.broadcast_encoder}',
            f'up-{config.aggregation_encoder}']
    what += ['ef'] if config.error_feedback else []
    what += ['dp'] if config.private else []
  name = '_'.join([os.path.basename(os.path.normpath(config.dataset)),
                   config.partition, *what, run_digest(config)])
  return storage_lib.join(root, re.sub(r'[^A-Za-z0-9._-]', '', name))


def run_digest(config):
  """8 hex digits of what must match for a rerun to resume."""
  return hashlib.sha256(json.dumps(
      config.run_description(), sort_keys=True).encode()).hexdigest()[:8]


def main(argv=None):
  quiet.environment()
  parser = build_parser()
  args, beam_flags = parser.parse_known_args(argv)
  quiet.third_party()
  try:
    config = config_from_args(args)
    options = runner_options.beam_options(beam_flags, 'pipelines.fedavg')
    progress = (lambda line: print(line, file=sys.stderr, flush=True)) \
        if args.verbose else None
    result = run_experiment(config, options,
                            print_fn=functools.partial(print, flush=True),
                            runner_progress=progress,
                            rounds_per_pipeline=args.rounds_per_pipeline,
                            clients_per_element=args.clients_per_element)
  except errors.Error as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  accuracy = result.final_test_accuracy
  accuracy_text = 'not evaluated' if accuracy is None else f'{accuracy:.4f}'
  spent = ''
  if config.private:
    spent = (f', epsilon {result.curve[-1]["epsilon"]:.3f} at delta '
             f'{config.delta:g}')
  board = storage_lib.join(result.run_dir, 'tensorboard')
  print(f'done: {len(result.curve)} rounds, final test accuracy '
        f'{accuracy_text}{spent}; plot {result.plot_path}; TensorBoard: '
        f'tensorboard --logdir {board}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
