"""Comparing structures of tensors in tests, leaf by leaf."""

import numpy as np
import tensorflow as tf


def flat(structure):
  return [np.asarray(x) for x in tf.nest.flatten(structure)]


def assert_same(actual, expected, exact, what=''):
  """Same leaves, shapes and values: bit for bit if `exact`, else to float
  tolerance (sums taken in another order)."""
  a, e = flat(actual), flat(expected)
  assert len(a) == len(e), what
  for x, y in zip(a, e):
    assert x.shape == y.shape, what
    if exact:
      np.testing.assert_array_equal(x, y, err_msg=what)
    else:
      np.testing.assert_allclose(x, y, rtol=2e-6, atol=1e-6, err_msg=what)
