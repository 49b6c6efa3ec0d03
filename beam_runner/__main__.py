"""Command line: `python -m beam_runner run|write-clients ...`.

    python -m beam_runner run --form form.pb --clients DIR --rounds N \
        --clients-per-round K --output DIR [--seed S] [--min-clients M] \
        [--rounds-per-pipeline R] [--clients-per-element E] \
        [--secure-threshold T] [--secure-neighbors K] \
        [Beam pipeline flags: --runner, --dask_client_address, --s3_*, ...]
    python -m beam_runner write-clients --from MODULE:FUNCTION --output DIR

Paths may be local or URLs Beam reaches (s3://bucket/run, gs://...). Flags
this program does not know go to Beam's `PipelineOptions`; a flag neither
knows is an error, not silently dropped. Without `--runner`, rounds run on
Beam's in-process runner; `--runner DaskRunner` runs them on a Dask cluster.
Bad input (and an engine or storage that cannot be reached) exits with
status 2, a round that fails with status 1; progress lines go to stderr, the
summary to stdout (with per-client outputs, where they were written).
`--help` and bad usage answer without importing TensorFlow or Beam, and an
unknown flag without TensorFlow.
"""

import argparse
import importlib
import os
import sys

from beam_runner.options import add_engine_arguments
from beam_runner.options import beam_options
from beam_runner.options import UsageError
from canonical import errors
from canonical import quiet

USAGE_ERROR = 2
ROUND_FAILED = 1


def _parser():
  parser = argparse.ArgumentParser(
      prog='python -m beam_runner',
      description='Runs a saved canonical form\'s rounds on Apache Beam.')
  commands = parser.add_subparsers(dest='command', required=True)
  run = commands.add_parser(
      'run', help='run rounds (resumes a run in the same --output)',
      allow_abbrev=False,
      epilog='Other flags are Beam pipeline options, e.g. --runner '
      'DaskRunner --dask_client_address tcp://HOST:8786, or --runner '
      'DirectRunner --direct_num_workers 2, and --s3_endpoint_url etc. for '
      's3:// paths.')
  run.add_argument('--form', required=True, help='a saved form (.pb)')
  run.add_argument('--clients', required=True,
                   help='a client data directory (see write-clients)')
  run.add_argument('--rounds', required=True, type=int,
                   help='total rounds; committed rounds are not run again')
  run.add_argument('--clients-per-round', required=True, type=int)
  run.add_argument('--output', required=True, help='the run directory')
  run.add_argument('--seed', type=int, default=0, help='sampling seed')
  run.add_argument('--min-clients', type=int, default=1,
                   help='fail a round if fewer clients succeed')
  run.add_argument('--sampling', default='fixed',
                   choices=('fixed', 'poisson', 'cyclic'),
                   help='fixed: exactly --clients-per-round clients a round; '
                   'poisson: each client with probability clients-per-round '
                   '/ clients (what DP accounting assumes); cyclic: the '
                   'clients cut into groups taken in turn (DP-FTRL)')
  run.add_argument('--secure-threshold', type=int, default=None,
                   help='a form with secure sums: clients that must send '
                   'masked inputs for a round to unmask them (default: a '
                   'majority of those sampled)')
  run.add_argument('--secure-neighbors', default=None,
                   help='a form with secure sums: each client masks with K '
                   'ring neighbors (even; SecAgg+) instead of every other '
                   'client (default); auto: the fewest that fail a round '
                   'below 1e-6 at 5%% dropouts')
  run.add_argument('--secure-server', default='malicious',
                   choices=('malicious', 'honest'),
                   help='a form with secure sums: what its clients assume of '
                   'the server. malicious (default): signed keys checked '
                   'against the clients\' trust store, replayed rounds '
                   'refused, and a consistency check before unmasking; '
                   'honest: the semi-honest protocol, cheaper')
  run.add_argument('--isolate', action='store_true',
                   help='run the form\'s pieces in a sandbox process with '
                   'the limits below (for forms you do not trust)')
  run.add_argument('--client-seconds', type=float, default=300.0,
                   help='with --isolate: seconds one piece call (one '
                   'client\'s work) may take (default 300)')
  run.add_argument('--client-memory-mb', type=int, default=4096,
                   help='with --isolate: resident memory the sandbox may use '
                   '(default 4096)')
  run.add_argument('--non-finite', default='drop',
                   choices=('drop', 'drop_nan', 'keep'),
                   help='which values in a client\'s update or new state '
                   'drop it: NaN or +-Inf (drop, the default), NaN only '
                   '(drop_nan), none (keep)')
  add_engine_arguments(run)
  write = commands.add_parser(
      'write-clients', help='write client data as per-client TFRecord files',
      allow_abbrev=False)
  write.add_argument('--from', dest='source', required=True,
                     metavar='MODULE:FUNCTION',
                     help='a function returning a dict client id -> data '
                     '(a tf.data.Dataset or tensors)')
  write.add_argument('--output', required=True,
                     help='the directory to write (local or a URL); Beam '
                     'filesystem flags such as --s3_endpoint_url apply')
  return parser


def check_run_arguments(args):
  """Refuses numbers out of range, before anything heavy is imported."""
  for name in ('rounds', 'clients_per_round', 'min_clients',
               'rounds_per_pipeline', 'clients_per_element', 'seed',
               'secure_threshold'):
    value = getattr(args, name)
    least = 0 if name in ('rounds', 'seed') else 1
    if value is not None and value < least:
      raise UsageError(f'--{name.replace("_", "-")} must be {least} or '
                       'more.')
  if (args.secure_threshold or 0) > args.clients_per_round:
    raise UsageError(f'--secure-threshold {args.secure_threshold} is more '
                     f'than --clients-per-round {args.clients_per_round}.')


def run_command(args, options):
  import beam_runner  # pylint: disable=g-import-not-at-top
  from canonical import io as storage_lib  # pylint: disable=g-import-not-at-top
  from canonical.secagg import graph as secagg_graph  # pylint: disable=g-import-not-at-top
  storage = storage_lib.storage_for(options)
  try:
    args.secure_neighbors = secagg_graph.from_text(args.secure_neighbors)
  except ValueError:
    raise UsageError('--secure-neighbors must be an even number, 2 or '
                     'more, or auto.') from None
  try:
    if not storage.exists(args.form) or (storage_lib.is_local(args.form) and
                                         not os.path.isfile(args.form)):
      raise UsageError(f'--form {args.form!r}: no such file.')
  except storage_lib.StorageError as e:
    raise UsageError(f'--form: {e}') from None
  result = beam_runner.run(
      args.form, args.clients, args.rounds, args.clients_per_round,
      args.output, pipeline_options=options, seed=args.seed,
      min_clients=args.min_clients, non_finite=args.non_finite,
      isolation=beam_runner.Isolation(args.client_seconds,
                                      args.client_memory_mb)
      if args.isolate else None,
      rounds_per_pipeline=args.rounds_per_pipeline,
      clients_per_element=args.clients_per_element,
      secure_threshold=args.secure_threshold, sampling=args.sampling,
      secure_neighbors=args.secure_neighbors,
      secure_server=args.secure_server)
  state = beam_runner.RunDir(result.output_dir, storage).state_path(
      result.rounds)
  print(f'{result.rounds} rounds committed in {result.output_dir}; state: '
        f'{state}')
  if result.client_outputs is not None and result.rounds:
    last = result.client_outputs[result.rounds]
    print(f'per-client outputs of rounds 1-{result.rounds}: one directory '
          f'per round, round {result.rounds}\'s in {last.directory} '
          f'({len(last)} clients); read them with '
          f'beam_runner.read_client_outputs({result.output_dir!r})')


def write_clients_command(args, options):
  module_name, _, function_name = args.source.partition(':')
  if not module_name or not function_name:
    raise UsageError(f'--from {args.source!r}: expected MODULE:FUNCTION.')
  import beam_runner  # pylint: disable=g-import-not-at-top
  from canonical import io as storage_lib  # pylint: disable=g-import-not-at-top
  storage = storage_lib.storage_for(options)  # --s3_* flags.
  sys.path.insert(0, os.getcwd())
  try:
    function = getattr(importlib.import_module(module_name), function_name)
  except (ImportError, AttributeError) as e:
    raise UsageError(f'--from {args.source!r}: {e}') from None
  data = function()
  if not isinstance(data, dict):
    raise UsageError(f'--from {args.source!r} returned '
                     f'{type(data).__name__}, not a dict client id -> data.')
  source = beam_runner.write_client_data(args.output, data, storage)
  print(f'{len(source.client_ids())} clients written to {source.directory}')


def main(argv=None):
  """Runs the command line; returns the exit status."""
  quiet.environment()
  args, flags = _parser().parse_known_args(argv)
  quiet.third_party()
  try:
    if args.command == 'run':
      check_run_arguments(args)
    options = beam_options(flags)  # Beam, not TensorFlow, says what it knows.
    if args.command == 'run':
      run_command(args, options)
    else:
      write_clients_command(args, options)
  except errors.Error as e:  # Bad input, an engine or storage unreached, or
    print(f'error: {e}', file=sys.stderr)  # a round that failed.
    return ROUND_FAILED if _is_round_error(e) else USAGE_ERROR
  return 0


def _is_round_error(error):
  """Whether `error` is a failed round (the runner, which raises those, is
  imported only once rounds run)."""
  runner = sys.modules.get('beam_runner.driver.runner')
  return runner is not None and isinstance(error, runner.RoundError)


if __name__ == '__main__':
  sys.exit(main())
