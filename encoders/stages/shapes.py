"""Helpers for code that works on static and dynamic shapes alike."""

import tensorflow as tf


def static_or_dynamic_size(flat):
  """The length of rank-1 `flat`: a Python int when static, else a tensor."""
  size = flat.shape[0]
  return int(size) if size is not None else tf.size(flat)


def cond(pred, true_fn, false_fn):
  """A Python `if` for a static predicate, `tf.cond` for a tensor one."""
  if isinstance(pred, bool):
    return true_fn() if pred else false_fn()
  return tf.cond(pred, true_fn, false_fn)
