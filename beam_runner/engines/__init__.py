"""The engine a run's pipelines go to, chosen by Beam's pipeline options.

- no runner: Beam's in-process `FnApiRunner` (nothing to download, one
  worker);
- `DirectRunner`: Beam's local runner, `--direct_num_workers` workers;
- `DaskRunner` (short name accepted): a `dask.distributed` cluster at
  `--dask_client_address`, or, without one, a local cluster of one worker
  process per core started for the run and stopped after it. Workers stay
  warm between pipelines, so a round costs ~0.1-0.3 s of engine time;
- any other name (DataflowRunner, FlinkRunner, SparkRunner, ...): handed to
  Beam as it is.

An engine says how many clients run at once (`parallelism`, to cut the
round into that many elements), what spreads elements over its workers
(`spread`: Beam's Reshuffle; on Dask, whose Reshuffle is a no-op, our own
`dask_placement.Spread`), what gathers them into one task (`gather`: on
Dask, instead of Beam's shuffle; Dask's both run the steps after them in
their own tasks, `spread_runs_steps`). Several rounds may share one
pipeline: the spread before each round's work spreads that round's clients
over the workers, so the per-pipeline cost is paid once for them. Even
on Dask's warm workers building and submitting a pipeline costs ~0.05 s: 100
clients of logistic regression took 0.13 s a round alone, 0.08 s chained by
5 (on the CNN's 2 s rounds it made no difference).

Checks that need the engine run before any round: an unreachable scheduler
or a node without this project installed is one `EngineError` line.
"""

import copy
import importlib.metadata
import logging
import os
import sys
import time

import apache_beam as beam
from apache_beam.options import pipeline_options as beam_options
from apache_beam.runners.dask import dask_runner  # Registers --dask_* flags.
from apache_beam.runners.portability import fn_api_runner

from beam_runner.engines import dask_placement
from canonical import errors

from canonical import io as storage_lib

DISTRIBUTION = 'fedcanon'
DASK_NAMES = ('daskrunner', 'dask',
              'apache_beam.runners.dask.dask_runner.daskrunner')
DIRECT_NAMES = ('directrunner', 'bundlebaseddirectrunner',
                'switchingdirectrunner')
# Elements per unit of parallelism, at most: a client each up to there, so
# workers that finish early take the next one.
ELEMENTS_PER_WORKER = 8
# Workers assumed for runners that do not say (Dataflow, Flink, Spark, ...).
UNKNOWN_PARALLELISM = 16
DASK_CONNECT_SECONDS = 10
# Dask's nanny starts workers with MALLOC_TRIM_THRESHOLD_=65536. Any value
# turns off glibc's dynamic mmap threshold, and TensorFlow's large
# allocations then go to the kernel each time: training the tutorial CNN
# took ~1.6x the time (sys time ~0.6x the user time, against ~0 unset).
TRIM_SETTING = 'distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_'
TRIM_VARIABLE = 'MALLOC_TRIM_THRESHOLD_'
# The Dask settings of the clusters started here. Each Dask process wakes
# every 10 ms (profiler), 20 ms (event-loop tick), 100 ms (memory monitor)
# and 500 ms (system monitor); every wake-up preempts one of TensorFlow's
# intra-op threads, and the whole op waits for it. With TensorFlow's default
# threading, an idle cluster of 2 workers made a plain process's CNN rounds
# ~15% slower; with these, as fast as with no cluster. Without a dashboard
# nobody reads the profile or the system monitor anyway.
QUIET_CLUSTER_SETTINGS = {
    TRIM_SETTING: None,
    'distributed.worker.profile.enabled': False,
    'distributed.admin.tick.interval': '1s',
    'distributed.admin.system-monitor.interval': '10s',
    'distributed.worker.memory.monitor-interval': '1s',
}

_log = logging.getLogger(__name__)


class EngineError(errors.Error, RuntimeError):
  """The engine cannot run rounds (unreachable, or a node is not set up)."""


def pipeline_options_of(options):
  """`PipelineOptions` from None, a dict, a list of flags, options or an
  open engine (the --dask_* flags known: this module imports Beam's Dask
  runner)."""
  if isinstance(options, Engine):
    return options.options
  return storage_lib.pipeline_options(options)


def runner_name(options):
  runner = pipeline_options_of(options).view_as(
      beam_options.StandardOptions).runner
  if runner is None:
    return None
  return runner if isinstance(runner, str) else type(runner).__name__


def is_dask(options):
  return (runner_name(options) or '').lower() in DASK_NAMES


def open_engine(options) -> 'Engine':
  """The engine for these pipeline options (close it when done); given an
  engine that is already open, that engine, left open when this one is
  closed (so one local cluster can serve several steps of a job)."""
  if isinstance(options, Engine):
    return _Borrowed(options)
  # A copy: an engine sets options (a local cluster's address, partitions)
  # that must not reach the caller's next engine.
  options = copy.deepcopy(pipeline_options_of(options))
  name = (runner_name(options) or '').lower()
  if not name:
    return InProcessEngine(options)
  if name in DASK_NAMES:
    return DaskEngine(options)
  if name in DIRECT_NAMES:
    workers = options.view_as(beam_options.DirectOptions).direct_num_workers
    return Engine(options, parallelism=workers or os.cpu_count() or 1)
  return Engine(options, parallelism=UNKNOWN_PARALLELISM)


class Engine:
  """Any Beam runner the options name; pipelines built and run one by one.

  The protocol every engine keeps (subclasses: the in-process runner, Dask):
  `name`, `parallelism`, `elements_for(clients)` (how many elements a round
  is cut into), `pipeline(elements)` (a new Beam pipeline), `run(pipeline)`
  (until it finishes), `close()`, and the class attributes below saying how
  its runner spreads and gathers elements.
  """

  spread = beam.Reshuffle  # What spreads elements over workers (or None).
  create_spreads = False  # Create's elements may all start on one worker.
  gather = None  # What gathers all elements into one list (None: Beam's).
  spread_runs_steps = False  # Whether `spread(then)` runs a DoFn in place.

  def __init__(self, options: beam_options.PipelineOptions, parallelism: int):
    self.options = options
    self.parallelism = max(1, int(parallelism))
    # The runner's pipelines are ours, their types checked by tests: Beam's
    # checks at each step cost a secure round ~50 ms to build on Dask.
    options.view_as(beam_options.TypeOptions).pipeline_type_check = False

  @property
  def name(self) -> str:
    return runner_name(self.options)

  def elements_for(self, clients: int) -> int:
    """How many elements to cut `clients` clients into."""
    return max(1, min(clients, self.parallelism * ELEMENTS_PER_WORKER))

  def pipeline(self, elements: int) -> beam.Pipeline:
    del elements
    return beam.Pipeline(options=self.options)

  def run(self, pipeline: beam.Pipeline) -> None:
    pipeline.run().wait_until_finish()

  def close(self) -> None:
    pass

  def __enter__(self) -> 'Engine':
    return self

  def __exit__(self, *exc):
    self.close()


class _Borrowed:
  """An open engine lent to a step: closing the loan leaves it open."""

  def __init__(self, engine):
    self._engine = engine

  def __getattr__(self, name):
    return getattr(self._engine, name)

  def close(self):
    pass

  def __enter__(self):
    return self._engine

  def __exit__(self, *exc):
    pass


class InProcessEngine(Engine):
  """Beam's in-process FnApiRunner: deterministic, one worker, no download."""

  spread = None  # One worker: nothing to spread.

  def __init__(self, options):
    super().__init__(options, parallelism=1)

  @property
  def name(self):
    return 'in-process FnApiRunner'

  def elements_for(self, clients):
    return 1  # Beam's cost per element is all there is to save here.

  def pipeline(self, elements):
    del elements
    return beam.Pipeline(runner=fn_api_runner.FnApiRunner(),
                         options=self.options)


class DaskEngine(Engine):
  """A dask.distributed cluster: the given scheduler, or a local one."""

  spread = dask_placement.Spread
  create_spreads = True  # A partition per element, on any worker.
  gather = dask_placement.Gather
  spread_runs_steps = True

  def __init__(self, options):
    dask_options = options.view_as(dask_runner.DaskOptions)
    self._cluster = None
    address = dask_options.address
    if address is None and dask_options.scheduler_file is None:
      self._cluster = _start_announced_cluster()
      address = dask_options.address = self._cluster.scheduler_address
    self._client = connect(address, dask_options.scheduler_file,
                           dask_options.timeout)
    try:
      check_nodes(self._client)
      threads = sum(self._client.nthreads().values())
    except BaseException:
      self.close()
      raise
    super().__init__(options, parallelism=threads)
    self.address = self._client.scheduler.address
    self._fixed_partitions = (dask_options.npartitions or
                              dask_options.partition_size)

  @property
  def name(self):
    return f'DaskRunner at {self.address}'

  def pipeline(self, elements):
    if not self._fixed_partitions:  # One element per Dask task.
      self.options.view_as(dask_runner.DaskOptions).npartitions = elements
    return beam.Pipeline(runner=dask_placement.PlacingDaskRunner(),
                         options=self.options)

  def run(self, pipeline):
    # Without Beam's check that the pipeline survives a round trip through
    # its portable form (~0.1 s a secure round's pipeline): the DaskRunner
    # runs the Python objects, which its workers unpickle anyway.
    result = pipeline.run(test_runner_api=False)
    try:
      result.wait_until_finish()
      unfinished = [f for f in result.futures if f.status != 'finished']
    except Exception as e:
      if self._client.status != 'running':
        raise self._lost() from e
      raise
    finally:
      result.client.close()  # The runner opens a client per pipeline.
    if unfinished or self._client.status != 'running':
      # A lost scheduler cancels the futures: they end, unfinished.
      raise self._lost()

  def _lost(self):
    return EngineError(
        f'Lost the Dask scheduler at {self.address} mid-pipeline (the '
        f'client is {self._client.status}): restart it and its workers, and '
        'run again to resume.')

  def elements_for(self, clients):
    """One element per worker thread: each element's partial accumulator
    weighs what a model weighs and crosses Dask's shuffle, and Dask's
    scheduler split ten one-client CNN tasks 6/4 between two workers."""
    return max(1, min(clients, self.parallelism))

  def close(self):
    if self._client is not None:
      self._client.close()
      self._client = None
    if self._cluster is not None:
      self._cluster.close()
      self._cluster = None


def _start_announced_cluster():
  """`start_local_cluster()`, with a line on stderr before and after: a
  start takes seconds to a minute, and silence looks like a hang."""
  workers = os.cpu_count() or 1
  print(f'starting a local Dask cluster of {workers} worker'
        f'{"s" if workers > 1 else ""}...', file=sys.stderr, flush=True)
  started = time.monotonic()
  cluster = start_local_cluster(workers)
  print(f'Dask cluster ready at {cluster.scheduler_address} (no dashboard) '
        f'in {time.monotonic() - started:.1f} s', file=sys.stderr, flush=True)
  return cluster


def start_local_cluster(workers=None, env=None, lifetime=None):
  """A local Dask cluster on 127.0.0.1: one single-threaded worker process
  per core, no dashboard. TensorFlow in each worker uses one thread for
  each kind of parallelism (unless `env` says otherwise), so the workers do
  not fight over the cores. Its processes run with QUIET_CLUSTER_SETTINGS
  (no MALLOC_TRIM_THRESHOLD_, few wake-ups). With `lifetime` (e.g. '20
  minutes') workers end by themselves after it, whatever happens to this
  process."""
  import dask  # pylint: disable=g-import-not-at-top
  from dask import distributed  # pylint: disable=g-import-not-at-top
  worker_env = {'TF_NUM_INTRAOP_THREADS': '1', 'TF_NUM_INTEROP_THREADS': '1',
                'TF_CPP_MIN_LOG_LEVEL': os.environ.get('TF_CPP_MIN_LOG_LEVEL',
                                                       '2')}
  worker_env.update(env or {})
  # Its scheduler runs in this process and its workers log to our stderr:
  # their INFO lines would flood it. Workers read this variable when they
  # import dask, before the cluster hands them `env`.
  logging.getLogger('distributed').setLevel(logging.WARNING)
  environ = dict(os.environ)  # Dask's nanny writes its settings into ours.
  os.environ['DASK_LOGGING__DISTRIBUTED'] = 'warning'
  try:
    with dask.config.set(QUIET_CLUSTER_SETTINGS):
      return distributed.LocalCluster(
          n_workers=workers or os.cpu_count() or 1, threads_per_worker=1,
          processes=True, host='127.0.0.1', dashboard_address=None,
          worker_dashboard_address=None, silence_logs=logging.ERROR,
          # Each worker loads TensorFlow at start with its load-time lines
          # and Beam's apitools notice filtered, as our command lines do.
          preload=['canonical.quiet'],
          # No dashboard; the scheduler's plain HTTP routes on a free port
          # (its default, 8787, would collide between clusters).
          scheduler_kwargs={'dashboard': False,
                            'dashboard_address': '127.0.0.1:0'},
          env=worker_env, **({'lifetime': lifetime} if lifetime else {}))
  finally:
    os.environ.clear()
    os.environ.update(environ)


def connect(address, scheduler_file=None, timeout=None):
  """A client of the scheduler; EngineError if it cannot be reached."""
  from dask import distributed  # pylint: disable=g-import-not-at-top
  seconds = timeout if isinstance(timeout, (int, float)) else \
      DASK_CONNECT_SECONDS
  where = address or f'the scheduler file {scheduler_file!r}'
  try:
    return distributed.Client(address, scheduler_file=scheduler_file,
                              timeout=seconds, set_as_default=False)
  except (OSError, TimeoutError, ValueError) as e:
    raise EngineError(
        f'Cannot reach the Dask scheduler at {where} within {seconds} s '
        f'({type(e).__name__}: {_first_line(e)}). Start it (dask scheduler; '
        'dask worker ADDRESS on each node) or fix --dask_client_address.'
    ) from None
  except AssertionError as e:
    # distributed's own check, in this process, before any connection:
    # its client's event-loop thread did not start in time.
    raise EngineError(
        'This process could not start the Dask client\'s event loop to reach '
        f'{where} (AssertionError from distributed: {_first_line(e)}); '
        'nothing was asked of the scheduler. A machine too busy to start a '
        'thread in 10 s does this: try again.') from None
  except Exception as e:  # pylint: disable=broad-except
    # Something answered, but not as a scheduler does (a worker's address).
    raise EngineError(
        f'{where} did not answer as a Dask scheduler ({type(e).__name__}: '
        f'{_first_line(e)}); is it a worker\'s address? Give the '
        'scheduler\'s in --dask_client_address.') from None


def check_nodes(client):
  """EngineError unless the scheduler and every worker run this project at
  the driver's version: they unpickle the round's functions."""
  expected = importlib.metadata.version(DISTRIBUTION)
  if not client.nthreads():
    raise EngineError(f'The Dask scheduler at {client.scheduler.address} '
                      'has no workers; start some with dask worker ADDRESS.')
  found = dict(client.run(importlib.metadata.version, DISTRIBUTION,
                          on_error='return'))
  try:
    found['the scheduler'] = client.run_on_scheduler(
        importlib.metadata.version, DISTRIBUTION)
  except Exception as e:  # pylint: disable=broad-except
    found['the scheduler'] = e
  for node, version in sorted(found.items(), key=lambda kv: str(kv[0])):
    what = node if node == 'the scheduler' else f'Dask worker {node}'
    if isinstance(version, BaseException):
      raise EngineError(
          f'{what} does not have {DISTRIBUTION} installed '
          f'({type(version).__name__}: {_first_line(version)}); install this '
          'project on every node, the scheduler included (pip install .).')
    if version != expected:
      raise EngineError(
          f'{what} runs {DISTRIBUTION} {version}, this driver {expected}; '
          'install the same version on every node.')
  trimmed = sorted(w for w, v in client.run(os.getenv,
                                            TRIM_VARIABLE).items() if v)
  if trimmed:
    _log.warning(
        'Dask workers %s run with %s set (Dask\'s nanny default), which makes '
        'TensorFlow much slower; start them with the Dask setting %s: null '
        '(docs/beam-runner.md, multi-machine Dask).', ', '.join(trimmed),
        TRIM_VARIABLE, TRIM_SETTING)


def _first_line(error):
  text = str(error).strip()
  return text.splitlines()[0] if text else type(error).__name__
