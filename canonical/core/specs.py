"""Helpers for builders of processes: spec structures, and computations traced
without AutoGraph."""

import tensorflow as tf

from canonical.core import computations
from canonical import errors


def plain(spec_structure):
  """The structure with every TensorSpec stripped of its name."""
  return tf.nest.map_structure(
      lambda s: tf.TensorSpec(s.shape, s.dtype)
      if isinstance(s, tf.TensorSpec) else s, spec_structure)


def check_value_spec(value_spec, who):
  for leaf in tf.nest.flatten(value_spec):
    if not isinstance(leaf, tf.TensorSpec) or not leaf.shape.is_fully_defined():
      raise errors.InvalidTypeError(
          f'{who}: values must be a structure of fully defined '
          f'tf.TensorSpecs, found {leaf!r}.')
  return plain(value_spec)


def tf_computation(fn, *parameter_specs):
  """`canonical.tf_computation` of `fn`, without AutoGraph.

  Everything federated averaging runs (the learning blocks, the encoders) is
  plain TensorFlow with no Python control flow over tensors, so there is
  nothing for AutoGraph to rewrite; letting it try re-parses the whole
  encoder library on every trace (seconds for the tutorial's CNN).
  """
  return computations.tf_computation(
      tf.autograph.experimental.do_not_convert(fn), *parameter_specs)
