"""DP-FTRL's correlated noise: how far one client moves everything a run
releases, in units of its clip. Such a run is one Gaussian mechanism over
all its rounds (noise multiplier z / sensitivity), not a round-by-round one.

A run releases C x + z for the rounds' clipped sums x: C is the binary tree
over rounds (one row per node; `tree`) or a banded lower-triangular
Toeplitz matrix with coefficients c_0..c_(b-1) (`banded`). A client taking
part in the rounds of a 0/1 vector u moves it by |C u|, at most when u
holds every round it may take part in: `participations` lists those
patterns (a round-robin group each, or every round when nothing bounds how
often a client comes back). With b-min-separated rounds and b bands the
columns never overlap, so the sensitivity is sqrt(participations) (Choquette-
Choo et al. 2023); other cases are computed here exactly.
"""

import numpy as np


def tree_segments(rounds, restart_warmup=0, restart_frequency=0):
  """The [start, stop) rounds of each tree: a restart after
  `restart_warmup`, then every `restart_frequency` rounds (0: never)."""
  if not restart_frequency:
    return [(0, rounds)] if rounds else []
  bounds = [0]
  step = int(restart_warmup) or int(restart_frequency)
  while bounds[-1] + step < rounds:
    bounds.append(bounds[-1] + step)
    step = int(restart_frequency)
  bounds.append(rounds)
  return list(zip(bounds[:-1], bounds[1:]))


def _tree_norm2(u):
  """|C u|^2 for the binary tree over len(u) rounds: each node sums the
  rounds under it."""
  total, level = 0.0, np.asarray(u, np.float64)
  while True:
    total += float(np.sum(level**2))
    if len(level) == 1:
      return total
    if len(level) % 2:
      level = np.append(level, 0.0)
    level = level[0::2] + level[1::2]


def tree_sensitivity(patterns, restart_warmup=0, restart_frequency=0):
  """max over patterns of |C u| for the restarted trees over the rounds."""
  best = 0.0
  for u in patterns:
    segments = tree_segments(len(u), restart_warmup, restart_frequency)
    best = max(best, sum(_tree_norm2(u[a:b]) for a, b in segments))
  return float(np.sqrt(best))


def banded_sensitivity(patterns, coefficients):
  """max over patterns of |C u| for the banded Toeplitz C: C u is u
  convolved with the coefficients."""
  # |C u| <= ||C| u| for 0/1 u, and |C| u grows with u: the whole pattern
  # bounds every part of it a client may miss.
  c = np.abs(np.asarray(coefficients, np.float64))
  best = 0.0
  for u in patterns:
    if len(u):
      best = max(best, float(np.sum(np.convolve(u, c)[:len(u)]**2)))
  return float(np.sqrt(best))


def sensitivity(release, patterns):
  if release.mechanism == 'tree':
    return tree_sensitivity(patterns, release.parameters['restart_warmup'],
                            release.parameters['restart_frequency'])
  return banded_sensitivity(patterns, release.coefficients)


def participations(rounds, groups=None):
  """The 0/1 round patterns a client may take part in: one per
  round-robin group, or every round (`groups` None)."""
  if groups is None:
    return [np.ones(rounds)] if rounds else []
  patterns = []
  for g in range(min(groups, rounds)):
    u = np.zeros(rounds)
    u[g::groups] = 1.0
    patterns.append(u)
  return patterns
