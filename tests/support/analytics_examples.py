"""Small data for the `tff.analytics` tests, and what TFF 0.87 gives on it
(recorded from a real TFF 0.87 with the programs the tests run)."""

import numpy as np
import tensorflow as tf

# Four clients' words (the last cut to 10 bytes by string_max_bytes=10).
WORDS = [
    [b'hello', b'hey', b'hi', b'hello', b'pumpkin'],
    [b'hello', b'hey', b'hi'],
    [b'hello', b'pumpkin', b'a very long string indeed'],
    [b'caf\xc3\xa9', b'hello'],
]

# build_iblt_computation(capacity=10, string_max_bytes=10, seed=0) on WORDS
# in batches of 1, TFF 0.87: word -> (clients having it, its count).
HEAVY_HITTERS = {b'pumpkin': (2, 2), b'hi': (2, 2), b'a very lon': (1, 1),
                 b'hey': (2, 2), b'caf\xc3\xa9': (1, 1), b'hello': (4, 5)}
# ... with max_words_per_user=2, multi_contribution=False, k_anonymity=2,
# secure_sum_bitwidth=20 (TFF 0.87).
HEAVY_HITTERS_CAPPED = {b'hey': (2, 2), b'hello': (4, 4)}

# Three clients' float records for the hierarchical histogram over [0, 10).
RECORDS = [[0.5, 1.5, 2.5, 2.6, 9.9], [3.0, 3.1, 7.5], [4.4, -1.0, 10.0, 5.5]]

# build_hierarchical_histogram_process(0.0, 10.0, 10, max_records_per_user=10)
# on RECORDS, TFF 0.87: the flat tree (arity 2) and its row splits.
TREE_ARITY_2 = [10, 9, 1, 6, 3, 1, 0, 2, 4, 2, 1, 1, 0, 0, 0, 1, 1, 2, 2, 1,
                1, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0]
SPLITS_ARITY_2 = [0, 1, 3, 7, 15, 31]
# ... with arity=3, enable_secure_sum=False.
TREE_ARITY_3 = [10, 9, 1, 0, 4, 4, 1, 1, 0, 0, 0, 0, 0, 1, 1, 2, 2, 1, 1, 0,
                1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
SPLITS_ARITY_3 = [0, 1, 4, 13, 40]


def word_datasets(words=None, batch_size=1):
  return [tf.data.Dataset.from_tensor_slices(w).batch(batch_size)
          for w in (words or WORDS)]


def record_datasets(records=None):
  return [tf.data.Dataset.from_tensor_slices(np.array(r, np.float32))
          for r in (records or RECORDS)]


def heavy_hitters_of(output):
  """`{word: (clients having it, count)}` of a heavy-hitters ServerOutput."""
  return {w: (int(u), int(c)) for w, u, c in zip(
      output.heavy_hitters.tolist(),
      output.heavy_hitters_unique_counts.tolist(),
      output.heavy_hitters_counts.tolist())}
