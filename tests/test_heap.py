"""beam_runner/heap.py: a step's collections skip the objects alive before it."""

import gc
import weakref

from beam_runner import heap
from beam_runner import steps


class _Node:
  pass


def _garbage_cycle():
  """A weak reference to a cycle nothing else refers to."""
  a, b = _Node(), _Node()
  a.other, b.other = b, a
  return weakref.ref(a)


def test_older_objects_are_frozen_in_the_block_and_collected_after():
  assert gc.get_freeze_count() == 0
  cycle = _garbage_cycle()
  with heap.older_objects_frozen():
    assert gc.get_freeze_count() > 0
    gc.collect()
    assert cycle() is not None  # Frozen: no collection looks at it.
    young = _garbage_cycle()
    gc.collect()
    assert young() is None  # The block's own garbage is collected.
  assert gc.get_freeze_count() == 0
  gc.collect()
  assert cycle() is None  # Unfrozen: nothing leaks.


def test_a_heap_frozen_by_someone_else_stays_frozen():
  gc.freeze()
  try:
    frozen = gc.get_freeze_count()
    with heap.older_objects_frozen():
      assert gc.get_freeze_count() == frozen
    assert gc.get_freeze_count() == frozen
  finally:
    gc.unfreeze()


def test_steps_run_frozen_and_unfreeze_even_when_one_raises():
  seen = []

  class Recording:
    fn = None

    def run(self, values):
      seen.append(gc.get_freeze_count())
      raise ValueError('boom')

  try:
    steps.InOneStep([Recording()])._run([1])
  except ValueError:
    pass
  assert seen and seen[0] > 0
  assert gc.get_freeze_count() == 0
