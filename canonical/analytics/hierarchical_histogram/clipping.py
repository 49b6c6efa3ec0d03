"""How much one client's histogram may count (TFF's
`HistogramClippingSumFactory` mechanisms), with pure randomness.

'sub-sampling': a client with more than `max_records` records keeps that
many, drawn uniformly without replacement; 'distinct': each bin counts at
most once, and a client with more than `max_records` nonempty bins keeps
that many of them, drawn uniformly. Draws come from stateless ops seeded by
the round's seed and the client's histogram (TFF seeds them from the
clock).
"""

import tensorflow as tf

from encoders.core import seeds

CLIP_MECHANISMS = ('sub-sampling', 'distinct')


def _keep_some(histogram, indices, max_records, seed):
  """A histogram of `max_records` of `indices` (bins, one per record),
  drawn without replacement."""
  draws = tf.random.stateless_uniform(tf.shape(indices), seed,
                                      alg=seeds.ALGORITHM)
  kept = tf.gather(indices, tf.math.top_k(draws, k=max_records,
                                          sorted=False).indices)
  return tf.scatter_nd(kept[:, None], tf.ones_like(kept, histogram.dtype),
                       tf.shape(histogram))


def sub_sample(histogram, max_records, seed):
  """At most `max_records` of the histogram's records."""
  def sample():
    records = tf.repeat(tf.range(tf.shape(histogram)[0]), histogram)
    return _keep_some(histogram, records, max_records, seed)

  total = tf.reduce_sum(tf.abs(histogram))
  clipped = tf.cond(total > max_records, sample, lambda: histogram)
  return tf.ensure_shape(clipped, histogram.shape)


def distinct(histogram, max_records, seed):
  """At most `max_records` of the histogram's nonempty bins, each once."""
  def sample():
    bins = tf.cast(tf.where(tf.not_equal(histogram, 0))[:, 0], tf.int32)
    return _keep_some(histogram, bins, max_records, seed)

  nonempty = tf.math.count_nonzero(histogram, dtype=tf.int32)
  clipped = tf.cond(nonempty > max_records, sample,
                    lambda: tf.minimum(histogram, 1))
  return tf.ensure_shape(clipped, histogram.shape)


def clip(mechanism, histogram, max_records, round_seed):
  """`histogram` clipped by `mechanism`, drawing from the round's seed and
  the histogram itself (clients with other data draw independently)."""
  seed = seeds.client_seed(round_seed, histogram)
  if mechanism == 'sub-sampling':
    return sub_sample(histogram, max_records, seed)
  return distinct(histogram, max_records, seed)
