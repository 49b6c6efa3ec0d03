"""Distributed DP's round: every client adds its own discrete noise before
the secure sum, so the server sees the sum of n clients' noises. Each bound
here is a zCDP (or linear RDP) curve that dp-accounting's `ZCDpEvent`
carries, for a shift of one client's L2 (and L1) sensitivity.

- Distributed discrete Gaussian (Kairouz, Liu and Steinke 2021, Theorem 1):
  the sum of n draws of N_Z(0, s^2) per coordinate, d coordinates, is
  (eps^2 / 2)-zCDP with eps = min(sqrt(D^2 / (n s^2) + tau d / 2),
  D / (sqrt(n) s) + tau sqrt(d)), tau = 10 sum_{k<n} exp(-2 pi^2 s^2 k/(k+1)).
- Distributed Skellam (Agarwal, Kairouz and Liu 2021, Theorem 3.5): the sum
  has variance m = n s^2 and RDP eps(a) <= a D2^2 / (2m) + min(((2a - 1) D2^2
  + 6 D1) / (4 m^2), 3 D1 / (2m)). Each branch of the min is linear in a, so
  each is a (xi, rho) event; `skellam_events` gives both and the accountant
  keeps the smaller epsilon (each is a valid bound on its own).
"""

import math

import dp_accounting
import numpy as np


def dgauss_event(local_stddev, l2_sensitivity, dimension, clients):
  """The zCDP event of one round of the distributed discrete Gaussian."""
  s, n, d = float(local_stddev), int(clients), float(dimension)
  if s == 0:
    return dp_accounting.NonPrivateDpEvent()
  k = np.arange(1, max(n, 1), dtype=np.float64)
  tau = 10.0 * float(np.sum(np.exp(-2.0 * math.pi**2 * s**2 * k / (k + 1))))
  shift = float(l2_sensitivity)
  eps = min(math.sqrt(shift**2 / (n * s**2) + tau * d / 2),
            shift / (math.sqrt(n) * s) + tau * math.sqrt(d))
  return dp_accounting.ZCDpEvent(eps**2 / 2)


def skellam_events(local_stddev, l2_sensitivity, l1_sensitivity, clients):
  """The two (xi, rho) events bounding one round of distributed Skellam."""
  variance = float(clients) * float(local_stddev)**2
  if variance == 0:
    return (dp_accounting.NonPrivateDpEvent(),)
  d2, d1 = float(l2_sensitivity), float(l1_sensitivity)
  rho = d2**2 / (2 * variance)
  return (dp_accounting.ZCDpEvent(
              rho + d2**2 / (2 * variance**2),
              max(0.0, (6 * d1 - d2**2) / (4 * variance**2))),
          dp_accounting.ZCDpEvent(rho, 3 * d1 / (2 * variance)))


def round_events(release, scale=1.0):
  """The alternative events (any one bounds it) of one round of a
  distributed release whose sensitivity is multiplied by `scale` (2 when
  neighbours replace one client)."""
  p = release.parameters
  if release.mechanism == 'distributed_dgauss':
    return (dgauss_event(p['local_stddev'], scale * p['l2_sensitivity'],
                         p['dimension'], p['clients']),)
  return skellam_events(p['local_stddev'], scale * p['l2_sensitivity'],
                        scale * p['l1_sensitivity'], p['clients'])
