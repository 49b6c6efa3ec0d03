"""A round's steps, declared once: applied as Beam transforms, or, for a
round whose clients are one element, run in order inside one Beam step.

Each Beam step costs a runner ~10 ms to build, translate and start, and
every combine adds a barrier; a round of one element has nothing to spread
or merge, so it runs the same DoFns and CombineFns in one call (`InOneStep`):
a plain round's three steps, a secure round's fifteen.

An engine may bring its own primitives (`Engine.spread`, `Engine.gather`):
on Dask, a combine is its elements gathered into one task, then the same
CombineFn run over them in that task (`RunOver`), instead of Beam's shuffle.
The `Each` steps right after a gather or a spread run in its step (in the
gather's task, or in each of the spread's): one Beam step less each, which
saves the driver ~10 ms a step to build and translate, ~80 ms a secure round.
An engine whose spread is Beam's Reshuffle runs them as steps of their own.
"""

import itertools

import apache_beam as beam
from apache_beam import typehints


class AnyOutput:
  """Mixin for DoFns and CombineFns: no output type inference."""

  def infer_output_type(self, input_type):
    """Any: Beam's default infers it from `process`'s bytecode, ~10 ms a
    step each time a pipeline is built."""
    del input_type
    return typehints.Any


class Each:
  """A ParDo of `fn` (a DoFn whose `process` takes one element)."""

  def __init__(self, name, fn):
    self.name, self.fn = name, fn

  def apply(self, pcoll, engine, prefix):
    del engine
    return pcoll | prefix + self.name >> beam.ParDo(self.fn)

  def run(self, values):
    return [out for value in values for out in self.fn.process(value)]


def _then(pcoll, then, engine, prefix):
  for step in then:
    pcoll = step.apply(pcoll, engine, prefix)
  return pcoll


class _IntoOne:
  """A step that brings all elements into one: in the engine's gather
  (`RunOver`) if it has one, with the `Each` steps right after it (`then`),
  else by Beam's own transforms (`beam_apply`)."""

  def apply(self, pcoll, engine, prefix, then=()):
    name = prefix + self.name
    if engine.gather is None:
      return _then(self.beam_apply(pcoll, name), then, engine, prefix)
    return pcoll | name >> engine.gather(RunOver([self, *then]))


class Combine(_IntoOne):
  """All elements into one by the CombineFn `fn` (none from none)."""

  def __init__(self, name, fn):
    self.name, self.fn = name, fn

  def beam_apply(self, pcoll, name):
    return pcoll | name >> beam.CombineGlobally(self.fn).without_defaults()

  def run(self, values):
    if not values:
      return []
    accumulator = self.fn.create_accumulator()
    for value in values:
      accumulator = self.fn.add_input(accumulator, value)
    return [self.fn.extract_output(accumulator)]


class Collect(_IntoOne):
  """Lists of paths into one list (none from none): a GroupByKey is cheaper
  to build and run than a CombineGlobally, and nothing needs merging."""

  fn = None

  def __init__(self, name):
    self.name = name

  def beam_apply(self, pcoll, name):
    return (pcoll
            | f'{name}Key' >> beam.Map(lambda paths: (None, paths))
            | name >> beam.GroupByKey()
            | f'{name}Flat' >> beam.MapTuple(
                lambda _, lists: [p for paths in lists for p in paths]))

  def run(self, values):
    return [[p for paths in values for p in paths]] if values else []


class Spread:
  """The elements spread over the engine's workers (its `spread`), if it
  has several."""

  fn = None

  def __init__(self, name):
    self.name = name

  def apply(self, pcoll, engine, prefix, then=()):
    name = prefix + self.name
    if engine.spread is not None:
      if then and engine.spread_runs_steps:
        return pcoll | name >> engine.spread(InOneStep(then))
      pcoll = pcoll | name >> engine.spread()
    return _then(pcoll, then, engine, prefix)

  def run(self, values):
    return values


class InOneStep(AnyOutput, beam.DoFn):
  """The steps in order over one element, in one Beam step."""

  def __init__(self, steps):
    self._steps = steps

  def setup(self):
    for step in self._steps:
      if hasattr(step.fn, 'setup'):
        step.fn.setup()

  def process(self, element):
    yield from self._run([element])

  def _run(self, values):
    for step in self._steps:
      values = step.run(values)
    return values


class RunOver(InOneStep):
  """The steps in order over one element that lists all their elements
  (an engine's gather made it)."""

  def process(self, element):
    yield from self._run(element)


def apply(pcoll, steps, engine, prefix, elements):
  """`pcoll` through `steps`, named `prefix` + each step's name; as one
  step (`prefix` + 'InOneStep') when `pcoll` is one element."""
  if elements == 1:
    return pcoll | prefix + 'InOneStep' >> beam.ParDo(InOneStep(steps))
  steps = list(steps)
  while steps:
    step = steps.pop(0)
    if isinstance(step, (_IntoOne, Spread)):
      then = list(itertools.takewhile(lambda s: isinstance(s, Each), steps))
      del steps[:len(then)]
      pcoll = step.apply(pcoll, engine, prefix, then)
    else:
      pcoll = step.apply(pcoll, engine, prefix)
  return pcoll
