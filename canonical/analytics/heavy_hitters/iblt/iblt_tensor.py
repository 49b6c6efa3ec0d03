"""IBLTs whose keys also carry a tensor value (TFF's `IbltTensorEncoder` /
`IbltTensorDecoder`).

Beside the IBLT (every key counted once), a values tensor of shape
`(repetitions, table_size) + value_shape` sums each key's value into its
cells, without any modulus. Tables and values add across clients; decoding
peels both together (`IbltDecoder`'s pure peeling), giving each decoded
string its count and its summed value. An empty `value_shape` means no
values: the values tensor is then an empty int64 tensor.
"""

from collections.abc import Sequence
from typing import Optional, Union

import numpy as np
import tensorflow as tf

from canonical.analytics.heavy_hitters.iblt import chunkers
from canonical.analytics.heavy_hitters.iblt import iblt_lib
from canonical import errors

# Plain TensorFlow, with no Python control flow over tensors: AutoGraph,
# converting user code that calls it, need not convert it too (seconds).
_plain = tf.autograph.experimental.do_not_convert

_CharacterEncoding = chunkers.CharacterEncoding


def _shape(value_shape):
  return tuple(int(d) for d in (value_shape or ()))


class IbltTensorEncoder(iblt_lib.IbltEncoder):
  """Strings with tensor values into `(iblt, iblt_values)`."""

  def __init__(self, value_shape: Sequence[int], *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.value_shape = _shape(value_shape)
    self.num_values = int(np.prod(self.value_shape))
    self.iblt_values_shape = (self.repetitions,
                              self.table_size) + self.value_shape

  # TFF's signature: values where the base class takes counts.
  @_plain
  def compute_iblt(self, input_strings, input_values):
    """`(iblt, iblt_values)` of the rank-1 `input_strings` (each counted
    once) and their values, `[n] + value_shape`."""
    return iblt_lib.as_graph(self, self._compute_tensor_iblt)(input_strings,
                                                              input_values)

  def _compute_tensor_iblt(self, input_strings, input_values):
    input_strings = iblt_lib.rank_one_strings(
        input_strings, 'IbltTensorEncoder.compute_iblt')
    input_values = tf.convert_to_tensor(input_values)
    if self.value_shape:
      expected = tf.concat([tf.shape(input_strings),
                            tf.constant(self.value_shape, tf.int32)], 0)
      tf.debugging.assert_equal(
          tf.shape(input_values), expected,
          message='IbltTensorEncoder.compute_iblt: input_values must have '
          f'shape [number of strings] + {list(self.value_shape)}')
      strings, chunks, values = self._kept(input_strings, input_values)
    else:
      strings, chunks = self._kept(input_strings)
    iblt = self._table(strings, chunks,
                       tf.ones_like(strings, iblt_lib.DTYPE))
    if not self.value_shape:
      return iblt, tf.constant([], iblt_lib.DTYPE)
    tiled = tf.tile(values[:, None],
                    [1, self.repetitions] + [1] * len(self.value_shape))
    iblt_values = tf.scatter_nd(self._cells(strings), tiled,
                                self.iblt_values_shape)
    return iblt, iblt_values


class IbltTensorDecoder(iblt_lib.IbltDecoder):
  """The strings, counts and summed values of `(iblt, iblt_values)`."""

  def __init__(self, iblt, iblt_values, value_shape: Sequence[int], *args,
               **kwargs):
    super().__init__(iblt, *args, **kwargs)
    self.iblt_values = iblt_values
    self.value_shape = _shape(value_shape)
    self.num_values = int(np.prod(self.value_shape))

  @_plain
  def get_freq_estimates_tf(self):
    """`(strings [k], counts [k] int64, values [k] + value_shape,
    num_not_decoded int64)`; values are `tf.constant([])` (int64) when
    `value_shape` is empty."""
    return iblt_lib.as_graph(self, self._tensor_freq_estimates)()

  def _tensor_freq_estimates(self):
    if not self.value_shape:
      strings, counts, not_decoded = self._freq_estimates()
      return strings, counts, tf.constant([], iblt_lib.DTYPE), not_decoded
    values = tf.reshape(self.iblt_values,
                        (self.repetitions, self.table_size) +
                        self.value_shape)
    table, strings, counts, found = self._peel(values)
    return strings, counts, found, self._not_decoded(table)

  def get_freq_estimates(self):
    """`({string: count}, {string: value as a list})`, eager; the counts
    also map None to the number of strings not decoded, if any."""
    iblt_lib.check_eager('IbltTensorDecoder.get_freq_estimates')
    strings, counts, values, not_decoded = self.get_freq_estimates_tf()
    strings = iblt_lib.as_text(strings)
    string_counts = dict(zip(strings, counts.numpy().tolist()))
    string_values = dict(zip(strings, values.numpy().tolist()))
    not_decoded = not_decoded.numpy()
    if not_decoded:
      string_counts[None] = not_decoded
    return string_counts, string_values


@_plain
def decode_iblt_tensor_tf(
    iblt, iblt_values, capacity: int, string_max_bytes: int,
    value_shape: Sequence[int], *,
    encoding: _CharacterEncoding = _CharacterEncoding.UTF8, seed: int = 0,
    repetitions: int = iblt_lib.DEFAULT_REPETITIONS,
    hash_family: Optional[str] = None,
    hash_family_params: Optional[dict[str, Union[int, float]]] = None,
    field_size: int = iblt_lib.DEFAULT_FIELD_SIZE):
  """TFF's `decode_iblt_tensor_tf`: `(strings, counts, values,
  num_not_decoded)` of an IBLT and its values, pure TensorFlow."""
  if capacity < 1 or string_max_bytes < 1:
    raise errors.InvalidValueError(
        'decode_iblt_tensor_tf: capacity and string_max_bytes must be at '
        f'least 1, got {capacity} and {string_max_bytes}.')
  return IbltTensorDecoder(
      iblt=iblt, iblt_values=iblt_values, value_shape=value_shape,
      capacity=capacity, string_max_bytes=string_max_bytes,
      encoding=encoding, seed=seed, repetitions=repetitions,
      hash_family=hash_family, hash_family_params=hash_family_params,
      field_size=field_size).get_freq_estimates_tf()
