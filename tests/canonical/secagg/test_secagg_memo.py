"""Results remembered by argument identity (canonical.secagg.memo)."""

import threading

from canonical.secagg import memo


def _counting(size):
  calls = []

  @memo.by_identity(size)
  def length(value):
    calls.append(value)
    return len(value)

  return length, calls


def test_the_same_object_is_computed_once_an_equal_copy_again():
  length, calls = _counting(4)
  roster = tuple(range(1000))
  assert length(roster) == 1000
  assert length(roster) == 1000
  assert len(calls) == 1
  assert length(tuple(range(1000))) == 1000  # Equal, not the same.
  assert len(calls) == 2


def test_a_result_in_use_stays_while_others_come_and_go():
  # A client's steps alternate the round's roster with its own neighborhood:
  # the roster, used between each, must not be pushed out by them.
  length, calls = _counting(2)
  roster = tuple(range(1000))
  for client in range(50):
    length(roster)
    length((client,))
  assert sum(1 for c in calls if c is roster) == 1
  assert len(calls) == 51


def test_lists_and_sets_are_never_remembered():
  length, calls = _counting(4)
  values = [1, 2]
  assert length(values) == 2
  values.append(3)
  assert length(values) == 3
  assert length({1}) == 1 and length({1}) == 1
  assert len(calls) == 4


def test_threads_get_the_result_of_their_own_arguments():
  length, _ = _counting(3)
  objects = [tuple(range(n)) for n in range(8)]
  wrong = []

  def ask(offset):
    for i in range(2000):
      value = objects[(i + offset) % len(objects)]
      if length(value) != len(value):
        wrong.append(value)

  threads = [threading.Thread(target=ask, args=(k,)) for k in range(4)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert not wrong
