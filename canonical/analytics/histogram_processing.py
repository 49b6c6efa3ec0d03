"""TFF 0.87's `tff.analytics.histogram_processing`."""

import tensorflow as tf

# Plain TensorFlow, with no Python control flow over tensors: AutoGraph,
# converting user code that calls it, need not convert it too (seconds).
_plain = tf.autograph.experimental.do_not_convert


@_plain
def threshold_histogram(histogram_keys, histogram_values, threshold):
  """`(keys, values)` of the histogram's entries whose value is at least
  `threshold` (rank-1 keys and values, in their order)."""
  keep = tf.math.greater_equal(histogram_values, threshold)
  return (tf.boolean_mask(histogram_keys, keep),
          tf.boolean_mask(histogram_values, keep))
