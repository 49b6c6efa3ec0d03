"""The Dask runner's own primitives, without a cluster: which worker each
dealt partition is pinned to, and that pinning survives the graph's
optimization (the runs on a real cluster are in test_beam_runner_dask)."""

import dask
from dask import _task_spec
from dask import bag as dask_bag

from beam_runner.engines import dask_placement


def test_worker_slots_interleave_workers_by_their_threads():
  assert dask_placement.worker_slots({'b': 1, 'a': 2, 'c': 3}) == [
      'a', 'b', 'c', 'a', 'c', 'c']
  assert dask_placement.worker_slots({}) == []


def test_deal_keeps_every_element_once_in_round_robin_order():
  bag = dask_bag.from_sequence(range(7), npartitions=3).map(lambda x: x * 10)
  dealt, pins = dask_placement.deal(bag, ['w0', 'w1'], 3)
  parts = dask.compute(*dealt.to_delayed(), scheduler='sync')
  assert [list(p) for p in parts] == [[0, 30, 60], [10, 40], [20, 50]]
  assert list(pins.values()) == ['w0', 'w1', 'w0']
  _, no_pins = dask_placement.deal(bag, [], 3)  # Every worker gone.
  assert no_pins == {}


def test_placed_graph_is_fused_and_keeps_the_pins():
  bag = dask_bag.from_sequence(range(8), npartitions=4).map(str).map(len)
  dealt, pins = dask_placement.deal(bag, ['w0', 'w1'], 4)
  last = dealt.map(lambda x: x + 1).map(lambda x: x * 2)
  (last_placed,) = dask_placement.placed([last], pins)
  graph = last_placed.__dask_graph__()
  placed = graph.layers[f'{last.name}-placed']
  # Each deal runs in one task with the two maps after it, under the key
  # of the last (the one the computation asks for), on the deal's worker.
  assert {key: placed.annotations['workers'](key) for key in placed} == {
      key: [worker] for key, worker in zip(last.__dask_keys__(),
                                           pins.values())}
  assert placed.annotations['allow_other_workers'] is True
  # The rest: each source partition with its two maps, and the gather
  # before the deals; no alias task (each would be one more scheduler hop).
  assert len(dict(graph)) == 4 + 1 + 4
  assert not [task for task in dict(graph).values()
              if isinstance(task, _task_spec.Alias)]
  assert sorted(last_placed.compute(scheduler='sync')) == [4] * 8


def test_a_gathers_next_step_runs_in_its_task_every_time():
  # Dask's own fusion of this graph depends on hash order (the deals' keys
  # are random): the map after the gather was a task of its own in some
  # runs. Ours fuses it every time.
  for _ in range(20):
    bag = dask_bag.from_sequence(range(6), npartitions=2).map(str)
    combined = dask_placement.gather(bag).map(len)
    dealt, pins = dask_placement.deal(combined, ['w0', 'w1'], 2)
    (last,) = dask_placement.placed([dealt.map(str)], pins)
    # Two sources with their map, the gather with its map, two deals with
    # their map.
    assert len(dict(last.__dask_graph__())) == 2 + 1 + 2
    assert last.compute(scheduler='sync') == ['6']


def test_placed_bags_share_their_common_tasks():
  calls = []
  bag = dask_bag.from_sequence(range(4), npartitions=2).map(calls.append)
  ends = dask_placement.placed([bag.map(str), bag.map(repr)], {})
  dask.compute(*ends, scheduler='sync')
  assert sorted(calls) == [0, 1, 2, 3]  # Each element's first step once.


def test_gather_is_one_element_listing_all_even_none():
  bag = dask_bag.from_sequence(range(5), npartitions=2)
  assert dask_placement.gather(bag).compute(scheduler='sync') == [
      [0, 1, 2, 3, 4]]
  empty = bag.filter(lambda x: x > 10)
  assert dask_placement.gather(empty).compute(scheduler='sync') == [[]]
