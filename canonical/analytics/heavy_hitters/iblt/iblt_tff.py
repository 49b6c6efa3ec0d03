"""TFF's `build_iblt_computation`: one federated computation discovering
heavy hitters among the clients' strings.

Each client picks its words and counts (`iblt_clipping.words_and_counts`)
and encodes them as an IBLT (every word counted once: how many clients
have it) with its counts as the values tensor; the server sums the tables
(`federated_sum`, or `federated_secure_modular_sum` modulo the IBLT's field
with `secure_sum_bitwidth`, the counts then by `federated_secure_sum`),
decodes them (pure peeling) and keeps the words at least `k_anonymity`
clients have, the `max_heavy_hitters` most frequent of them.

The result is TFF's `ServerOutput(clients, heavy_hitters,
heavy_hitters_unique_counts, heavy_hitters_counts, num_not_decoded,
round_timestamp)`; the heavy hitters come in peeling order (TFF's is
random), and `round_timestamp` is the server's clock when the round ran
(seconds since the epoch), the one value that is not a function of the
inputs.
"""

from collections.abc import Callable
from typing import NamedTuple, Optional

import numpy as np
import tensorflow as tf

from canonical.analytics.heavy_hitters.iblt import chunkers
from canonical.analytics.heavy_hitters.iblt import iblt_clipping
from canonical.analytics.heavy_hitters.iblt import iblt_lib
from canonical.analytics.heavy_hitters.iblt import iblt_tensor
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import types as ft
from canonical import errors

# Plain TensorFlow (no Python control flow over tensors): not for AutoGraph.
_plain = tf.autograph.experimental.do_not_convert


class ServerOutput(NamedTuple):
  """A heavy-hitters round's result: how many clients took part, the
  decoded words, how many clients have each, their summed counts, how many
  strings could not be decoded, and when the round ran."""
  clients: object
  heavy_hitters: object
  heavy_hitters_unique_counts: object
  heavy_hitters_counts: object
  num_not_decoded: object
  round_timestamp: object


def _check(string_max_bytes, repetitions, max_heavy_hitters,
           max_words_per_user, k_anonymity, secure_sum_bitwidth, batch_size):
  where = 'build_iblt_computation'
  iblt_clipping.check_options(where, max_words_per_user, batch_size,
                              string_max_bytes)
  if repetitions < 3:
    raise errors.InvalidValueError(
        f'{where}: repetitions must be at least 3, got {repetitions}.')
  if max_heavy_hitters is not None and max_heavy_hitters < 1:
    raise errors.InvalidValueError(
        f'{where}: max_heavy_hitters must be at least 1 (or None), got '
        f'{max_heavy_hitters}.')
  if k_anonymity < 1:
    raise errors.InvalidValueError(
        f'{where}: k_anonymity must be at least 1, got {k_anonymity}.')
  if secure_sum_bitwidth is not None and (
      isinstance(secure_sum_bitwidth, bool) or
      not isinstance(secure_sum_bitwidth, int) or
      not 1 <= secure_sum_bitwidth <= 62):
    raise errors.InvalidValueError(
        f'{where}: secure_sum_bitwidth must be an int in [1, 62] (or None), '
        f'got {secure_sum_bitwidth!r}.')


def build_iblt_computation(
    *, string_max_bytes: int = 10, max_words_per_user: Optional[int] = None,
    multi_contribution: bool = True, capacity: int = 1000,
    k_anonymity: int = 1, max_heavy_hitters: Optional[int] = None,
    string_postprocessor: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
    secure_sum_bitwidth: Optional[int] = None,
    decode_iblt_fn: Optional[Callable[..., tuple]] = None, seed: int = 0,
    batch_size: int = 1, repetitions: int = 3
) -> computations.FederatedComputation:
  """The federated computation `({str[?]*}@CLIENTS -> ServerOutput@SERVER)`
  finding heavy hitters with IBLTs of `capacity` strings of at most
  `string_max_bytes` bytes (TFF's parameters, TFF's meaning)."""
  _check(string_max_bytes, repetitions, max_heavy_hitters,
         max_words_per_user, k_anonymity, secure_sum_bitwidth, batch_size)
  if decode_iblt_fn is None:
    decode_iblt_fn = iblt_tensor.decode_iblt_tensor_tf
  words_type = iblt_clipping.WORDS_TYPE

  @computations.tf_computation(words_type)
  @_plain
  def compute_sketch(dataset):
    words, counts = iblt_clipping.words_and_counts(
        dataset, max_words_per_user, multi_contribution, batch_size,
        string_max_bytes)
    encoder = iblt_tensor.IbltTensorEncoder(
        capacity=capacity, string_max_bytes=string_max_bytes,
        encoding=chunkers.CharacterEncoding.UTF8, repetitions=repetitions,
        value_shape=(1,), seed=seed)
    return encoder.compute_iblt(words, tf.reshape(counts, [-1, 1]))

  # AutoGraph converts this one: it calls the user's decode_iblt_fn and
  # string_postprocessor.
  @computations.tf_computation(*compute_sketch.result_spec)
  def decode_heavy_hitters(sketch, count_tensor):
    words, unique_counts, counts, not_decoded = decode_iblt_fn(
        iblt=sketch, iblt_values=count_tensor, value_shape=(1,),
        capacity=capacity, string_max_bytes=string_max_bytes,
        repetitions=repetitions, seed=seed)
    counts = tf.squeeze(counts, axis=1)
    if k_anonymity > 1:
      keep = unique_counts >= k_anonymity
      words, unique_counts, counts = (tf.boolean_mask(x, keep) for x in
                                      (words, unique_counts, counts))
    if max_heavy_hitters is not None:
      words, unique_counts, counts = _most_frequent(
          max_heavy_hitters, words, unique_counts, counts)
    if string_postprocessor is not None:
      words = string_postprocessor(words)
    return words, unique_counts, counts, not_decoded

  @computations.tf_computation
  @_plain
  def now():
    return tf.cast(tf.timestamp(), tf.int64)

  if secure_sum_bitwidth is None:
    sum_sketch = sum_counts = intrinsics.federated_sum
  else:
    def sum_sketch(value):
      return intrinsics.federated_secure_modular_sum(
          value, np.int64(iblt_lib.DEFAULT_FIELD_SIZE))

    def sum_counts(value):
      return intrinsics.federated_secure_sum(value,
                                             2**secure_sum_bitwidth - 1)

  @computations.federated_computation(ft.clients(words_type))
  def one_round_computation(examples):
    round_timestamp = intrinsics.federated_eval(now, ft.SERVER)
    clients = sum_counts(intrinsics.federated_value(1, ft.CLIENTS))
    sketch, count_tensor = intrinsics.federated_map(compute_sketch, examples)
    words, unique_counts, counts, not_decoded = intrinsics.federated_map(
        decode_heavy_hitters, (sum_sketch(sketch), sum_counts(count_tensor)))
    return intrinsics.federated_zip(ServerOutput(
        clients=clients, heavy_hitters=words,
        heavy_hitters_unique_counts=unique_counts,
        heavy_hitters_counts=counts, num_not_decoded=not_decoded,
        round_timestamp=round_timestamp))

  return one_round_computation


def _most_frequent(k, words, unique_counts, counts):
  """The `k` entries of largest `counts`, if there are more."""

  def top():
    indices = tf.math.top_k(counts, k).indices
    return tuple(tf.gather(x, indices) for x in (words, unique_counts,
                                                 counts))

  return tf.cond(tf.shape(words)[0] > k, top,
                 lambda: (words, unique_counts, counts))
