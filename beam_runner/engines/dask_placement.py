"""Beam's DaskRunner, with two primitives of its own: `Spread` places
elements on workers, `Gather` brings them together in one task.

Beam's DaskRunner turns a Reshuffle into nothing: after a combine a
pipeline's elements stay in one Dask partition, so every later step ran on
one worker (a secure round's client steps, its cryptography, all did).
`Spread` deals its elements, in order, over one partition per worker
thread, each pinned to its worker, so element i runs on the same worker at
every Spread of a pipeline (what a worker cached for it stays useful); a
`Create`'s partitions are pinned the same way, so with one element per
partition (the runner's default) element i starts on that worker too.
`Gather` is one task holding the list of all elements: Beam's combines and
GroupByKeys cross a three-stage Dask shuffle (~25 ms each here) to the same
end when all elements go to one key. Each may take a DoFn (`then`) to run on
its output in its own tasks, as one Beam step would (see steps.py).

A pin is a Dask annotation, and Dask's optimization of a bag's graph (which
fuses each step's tasks into one; without it a secure round took ~40%
longer) drops annotations: the runner fuses the graph itself (`_fused`:
each deal with the steps after it, each gather with the step it feeds) and
annotates the tasks that hold a pinned deal.
"""

import collections

import apache_beam as beam
import dask
from dask import _task_spec  # Dask's task graph nodes, culling, fusion.
from dask import bag as dask_bag
from dask import highlevelgraph

from apache_beam.pipeline import PipelineVisitor
from apache_beam.runners.dask import dask_runner
from apache_beam.runners.dask import overrides
from apache_beam.runners.dask import transform_evaluator


class _Placing(beam.PTransform):
  """A primitive only the PlacingDaskRunner runs (it translates it itself)."""

  def __init__(self, then=None):
    super().__init__()
    self.then = then

  def expand(self, input_or_inputs):
    return beam.pvalue.PCollection.from_(input_or_inputs)


class Spread(_Placing):
  """Its input's elements dealt over the workers, then the DoFn `then` (if
  any) over each (PlacingDaskRunner only)."""


class Gather(_Placing):
  """One element, the list of its input's elements, then the DoFn `then`
  (if any) over it (PlacingDaskRunner only)."""


def worker_slots(nthreads):
  """Worker addresses, each once per thread, interleaved (a, b, a, b, a):
  consecutive partitions go to different workers."""
  most = max(nthreads.values(), default=0)
  return [worker for thread in range(most)
          for worker in sorted(nthreads) if nthreads[worker] > thread]


def _gather(*partitions):
  return [element for partition in partitions for element in partition]


def _run(then, elements):
  """The DoFn `then` over `elements`, set up first, as Beam's Dask ParDo
  does for each partition; None: the elements as they are."""
  if then is None:
    return elements
  then.setup()
  return [output for element in elements
          for output in then.process(transform_evaluator.defenestrate(element))]


def _gather_as_one(then, *partitions):
  return _run(then, [[transform_evaluator.defenestrate(element)
                      for element in _gather(*partitions)]])


def _deal(elements, index, count, then):
  return _run(then, elements[index::count])


def deal(bag, slots, partitions, then=None):
  """`bag`'s elements dealt round-robin into `partitions` partitions (each
  then through the DoFn `then`, if any), and {the i-th partition's key:
  `slots[i % len(slots)]`} (`slots`: worker addresses, see `worker_slots`)."""
  sources = bag.to_delayed(optimize_graph=False)
  elements = sources[0] if len(sources) == 1 else dask.delayed(
      _gather, pure=False)(*sources)
  parts = [dask.delayed(_deal, pure=False)(elements, index, partitions, then)
           for index in range(partitions)]
  return dask_bag.from_delayed(parts), _pins(parts, slots)


def _pins(parts, slots):
  """No slots (every worker gone): no pins, Dask places parts when workers
  come back."""
  return {part.key: slots[index % len(slots)]
          for index, part in enumerate(parts) if slots}


def gather(bag, then=None):
  """A bag of one element, the list of `bag`'s elements (or what the DoFn
  `then` makes of it)."""
  return dask_bag.from_delayed([dask.delayed(_gather_as_one, pure=False)(
      then, *bag.to_delayed(optimize_graph=False))])


def placed(bags, pins):
  """`bags`, their graph optimized together (tasks they share run once),
  each task that holds one of `pins`' keys annotated to run on its worker
  (another only if that one is gone)."""
  outputs = [key for bag in bags for key in bag.__dask_keys__()]
  tasks, chains = _fused(highlevelgraph.HighLevelGraph.merge(
      *[bag.__dask_graph__() for bag in bags]), outputs)
  workers = {key: pins[member] for key, members in chains.items()
             for member in members if member in pins}
  placed_name, rest_name = (f'{bags[0].name}-{part}'  # Unique names.
                            for part in ('placed', 'rest'))
  layers = {
      placed_name: highlevelgraph.MaterializedLayer(
          {key: tasks[key] for key in workers},
          annotations={'workers': lambda key: [workers[key]],
                       'allow_other_workers': True}),
      rest_name: highlevelgraph.MaterializedLayer(
          {key: task for key, task in tasks.items() if key not in workers}),
  }
  # Runs as it is (no layer is culled or optimized): no layer dependencies.
  graph = highlevelgraph.HighLevelGraph(layers, {placed_name: set(),
                                                 rest_name: set()})
  return [dask_bag.Bag(graph, bag.name, bag.npartitions) for bag in bags]


def _fused(graph, outputs):
  """(the tasks that compute `outputs`, each chain fused into one task
  under its last key; {that key: the chain's keys}).

  A chain is tasks each of which is the only dependency of the next and has
  no other dependent: a step's tasks for one partition, or a deal and the
  steps after it. Dask's bag optimizer does the same, but its result hangs
  on the order its culling leaves to hashing (a step could stay apart from
  its chain in one run and not in another: one more task and scheduler hop
  each) and it renames each chain, leaving an alias task (another hop).
  """
  tasks = _task_spec.cull(_task_spec.convert_legacy_graph(graph), outputs)
  dependents = collections.defaultdict(list)
  for key, task in tasks.items():
    for dependency in task.dependencies:
      dependents[dependency].append(key)
  kept = set(outputs)

  def continues(key):
    """Whether `key`'s task runs in its one dependency's task."""
    task = tasks[key]
    if len(task.dependencies) != 1 or task.block_fusion:
      return False
    (dependency,) = task.dependencies
    return (dependency in tasks and dependency not in kept
            and len(dependents[dependency]) == 1
            and not tasks[dependency].block_fusion)

  fused, chains = {}, {}
  for key in tasks:
    if continues(key):
      continue  # In the chain of the task it depends on.
    chain = [key]
    while (len(dependents[chain[-1]]) == 1
           and continues(dependents[chain[-1]][0])):
      chain.append(dependents[chain[-1]][0])
    fused[chain[-1]] = (tasks[key] if len(chain) == 1 else
                        _task_spec.Task.fuse(*(tasks[k] for k in chain),
                                             key=chain[-1]))
    chains[chain[-1]] = chain
  return dask_bag.core.lazify(fused), chains


class _PlacingVisitor(PipelineVisitor):
  """Beam's Dask translation, and ours of Spread and Gather."""

  def __init__(self, translation, slots, partitions):
    self._translation = translation
    self._slots = slots
    self._partitions = partitions
    self.bags = translation.bags
    self.pins = {}
    self._consumed = set()

  def ends(self):
    """The bags no step consumes: computing them runs every step."""
    return [bag for node, bag in self.bags.items()
            if node not in self._consumed]

  def visit_transform(self, transform_node):
    self._consumed.update(
        value.producer for value in transform_node.inputs
        if getattr(value, 'producer', None) is not None)
    self._consumed.update(side.pvalue.producer
                          for side in transform_node.side_inputs)
    transform = transform_node.transform
    if not isinstance(transform, (Spread, Gather)):
      self._translation.visit_transform(transform_node)
      if isinstance(transform, overrides._Create):  # pylint: disable=protected-access
        self.pins.update(_pins(
            self.bags[transform_node].to_delayed(optimize_graph=False),
            self._slots))
      return
    (source,) = transform_node.inputs
    bag = self.bags[source.producer]
    if isinstance(transform, Gather):
      self.bags[transform_node] = gather(bag, transform.then)
    else:
      self.bags[transform_node], pins = deal(bag, self._slots,
                                             self._partitions, transform.then)
      self.pins.update(pins)


class PlacingDaskRunner(dask_runner.DaskRunner):
  """Beam's DaskRunner that also runs Spread and Gather."""

  def run_pipeline(self, pipeline, options):
    from dask import distributed  # pylint: disable=g-import-not-at-top
    dask_options = options.view_as(dask_runner.DaskOptions).get_all_options(
        drop_default=True, current_only=True)
    bag_kwargs = dask_runner.DaskOptions._extract_bag_kwargs(dask_options)  # pylint: disable=protected-access
    # A client per pipeline, as Beam's runner has (the default client while
    # it runs): rounds ran ~15% slower on one client kept open.
    client = distributed.Client(**dask_options)
    slots = worker_slots(client.nthreads())
    pipeline.replace_all(overrides.dask_overrides())
    visitor = _PlacingVisitor(self.to_dask_bag_visitor(bag_kwargs), slots,
                              bag_kwargs.get('npartitions') or len(slots))
    pipeline.visit(visitor)
    return dask_runner.DaskRunnerResult(client, client.compute(
        placed(visitor.ends(), visitor.pins), optimize_graph=False))
