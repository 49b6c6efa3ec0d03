"""tff.simulation.build_uniform_sampling_fn: seeded, a round's sample is a
function of the seed and the round alone; the samples below are the ones
TFF 0.87 gave for the same arguments, checked by hand against it."""

import numpy as np
import pytest

import canonical as tff


def test_seeded_samples_are_tffs():
  sample = tff.simulation.build_uniform_sampling_fn(
      ['a', 'b', 'c', 'd', 'e'], random_seed=7)
  assert [sample(r, 2) for r in range(4)] == [
      ['d', 'c'], ['a', 'd'], ['e', 'd'], ['b', 'd']]
  with_replacement = tff.simulation.build_uniform_sampling_fn(
      range(10), replace=True, random_seed=123)
  assert [with_replacement(r, 3) for r in (1, 2, 3)] == [
      [1, 0, 9], [4, 3, 8], [9, 0, 0]]


def test_a_round_samples_the_same_whenever_it_is_asked():
  ids = [f'client_{i}' for i in range(20)]
  sample = tff.simulation.build_uniform_sampling_fn(ids, random_seed=1)
  first = [sample(r, 5) for r in range(1, 6)]
  # Out of order, and from a new sampler: a resumed run's rounds.
  again = tff.simulation.build_uniform_sampling_fn(ids, random_seed=1)
  assert [again(r, 5) for r in (5, 4, 3, 2, 1)] == first[::-1]
  assert len({tuple(s) for s in first}) == 5  # Rounds differ.
  for chosen in first:
    assert len(set(chosen)) == 5 and set(chosen) <= set(ids)
  other = tff.simulation.build_uniform_sampling_fn(ids, random_seed=2)
  assert [other(r, 5) for r in range(1, 6)] != first


def test_numpy_integer_seeds_count_as_seeds():
  sample = tff.simulation.build_uniform_sampling_fn(
      ['a', 'b', 'c', 'd', 'e'], random_seed=np.int64(7))
  assert sample(3, 2) == ['b', 'd']


def test_unseeded_samples_come_from_the_range():
  sample = tff.simulation.build_uniform_sampling_fn(range(4))
  for r in range(5):
    chosen = sample(r, 4)
    assert sorted(chosen) == [0, 1, 2, 3]


def test_errors_name_the_problem():
  sample = tff.simulation.build_uniform_sampling_fn(range(3), random_seed=0)
  with pytest.raises(tff.Error, match='Cannot sample 4 clients from a '
                     'population of 3'):
    sample(1, 4)
  with pytest.raises(ValueError):  # As TFF raises.
    sample(1, 4)
  with pytest.raises(TypeError, match='random_seed must be an integer'):
    tff.simulation.build_uniform_sampling_fn(range(3), random_seed='7')


def test_the_beam_runners_sampling_is_still_here():
  assert set(tff.simulation.SAMPLINGS) == {'fixed', 'poisson', 'cyclic'}
  chosen = tff.simulation.sample_clients(['a', 'b', 'c'], 2, seed=0,
                                         round_number=1)
  assert len(chosen) == 2 and chosen == tff.simulation.sample_clients(
      ['c', 'b', 'a'], 2, seed=0, round_number=1)
